//! `tritonforge bench`: list, show and validate the problem suite.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use tokio::task::JoinSet;
use tritonforge_bench::{Candidate, Problem, Suite, SuiteEntry};
use tritonforge_eval::Evaluator;
use tritonforge_protocol::{DeviceKind, DeviceRequest, EvalConfig, Status};
use tritonforge_store::Store;

use crate::{Global, EXIT_CORRECT, EXIT_USAGE, EXIT_VERDICT};

/// A trial of a `small` variant must stay under this on one CPU core (interpreter).
const SMALL_TRIAL_BUDGET_MS: f64 = 2000.0;

#[derive(Subcommand)]
pub enum BenchCmd {
    /// List problems, filtered by level, family or split.
    List {
        #[command(flatten)]
        filter: Filter,
        #[arg(long)]
        json: bool,
    },
    /// Show one problem: metadata, variants, solution, source.
    Show {
        /// Id (`L1-001`), key (`level1/relu`) or name (`relu`).
        problem: String,
        #[arg(long, default_value = "bench")]
        suite: PathBuf,
    },
    /// Check the suite: manifest and files agree; every problem imports, is deterministic and
    /// not degenerate; every reference solution is correct. Reports all failures.
    Validate {
        #[command(flatten)]
        filter: Filter,
        /// Variants to run [default: `small` in CPU mode, `full` and `heldout` on a GPU].
        #[arg(long)]
        variant: Vec<String>,
        #[command(flatten)]
        pool: crate::PoolArgs,
        #[command(flatten)]
        timing: crate::eval_cmd::TimingArgs,
        #[command(flatten)]
        guard: crate::GuardOpts,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Clone)]
pub struct Filter {
    /// The suite's root directory (holding manifest.toml).
    #[arg(long, default_value = "bench")]
    pub suite: PathBuf,
    #[arg(long)]
    pub level: Option<u32>,
    #[arg(long)]
    pub family: Option<String>,
    #[arg(long)]
    pub split: Option<String>,
}

impl Filter {
    pub fn keep(&self, e: &SuiteEntry) -> bool {
        self.level.is_none_or(|l| e.meta.level == Some(l))
            && self
                .family
                .as_deref()
                .is_none_or(|f| e.meta.family.as_deref() == Some(f))
            && self
                .split
                .as_deref()
                .is_none_or(|s| e.meta.split.as_deref() == Some(s))
    }
}

fn load(root: &std::path::Path) -> Result<Suite, u8> {
    Suite::load(root).map_err(|e| {
        eprintln!("error: {e}");
        EXIT_USAGE
    })
}

pub async fn run(global: &Global, cmd: BenchCmd) -> anyhow::Result<u8> {
    match cmd {
        BenchCmd::List { filter, json } => {
            let suite = match load(&filter.suite) {
                Ok(s) => s,
                Err(c) => return Ok(c),
            };
            let rows: Vec<&SuiteEntry> = suite.entries.iter().filter(|e| filter.keep(e)).collect();
            if json {
                for e in rows {
                    println!(
                        "{}",
                        serde_json::json!({
                            "id": e.id(), "key": e.key, "name": e.name(), "level": e.meta.level,
                            "family": e.meta.family, "split": e.meta.split,
                            "variants": e.meta.variants, "path": e.problem_path,
                            "solution": e.solution_path,
                        })
                    );
                }
            } else {
                print!("{}", list_table(&rows));
            }
            Ok(EXIT_CORRECT)
        }
        BenchCmd::Show { problem, suite } => {
            let suite = match load(&suite) {
                Ok(s) => s,
                Err(c) => return Ok(c),
            };
            let Some(e) = suite.find(&problem) else {
                eprintln!(
                    "error: no problem {problem:?} in {} (use an id, a key like level1/relu, or a unique name)",
                    suite.manifest.path.display()
                );
                return Ok(EXIT_USAGE);
            };
            print!("{}", show(e));
            Ok(EXIT_CORRECT)
        }
        BenchCmd::Validate {
            filter,
            variant,
            pool,
            timing,
            guard,
            json,
        } => validate(global, filter, variant, pool, timing, guard, json).await,
    }
}

fn list_table(rows: &[&SuiteEntry]) -> String {
    let w = rows.iter().map(|e| e.key.len()).max().unwrap_or(3).max(3);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<8} {:<w$} {:<14} {:<8} {:<24} solution",
        "id", "key", "family", "split", "variants"
    );
    let mut by_split: BTreeMap<&str, usize> = BTreeMap::new();
    for e in rows {
        let variants: Vec<&str> = e.meta.variants.keys().map(String::as_str).collect();
        let split = e.meta.split.as_deref().unwrap_or("?");
        *by_split.entry(split).or_default() += 1;
        let _ = writeln!(
            s,
            "{:<8} {:<w$} {:<14} {:<8} {:<24} {}",
            e.id(),
            e.key,
            e.meta.family.as_deref().unwrap_or("?"),
            split,
            variants.join(","),
            if e.solution_path.is_some() {
                "yes"
            } else {
                "-"
            }
        );
    }
    let counts: Vec<String> = by_split.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let _ = writeln!(s, "{} problems ({})", rows.len(), counts.join(", "));
    s
}

fn show(e: &SuiteEntry) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "id:       {}", e.id());
    let _ = writeln!(s, "key:      {}", e.key);
    let _ = writeln!(
        s,
        "level:    {}",
        e.meta.level.map(|l| l.to_string()).unwrap_or_default()
    );
    let _ = writeln!(s, "family:   {}", e.meta.family.as_deref().unwrap_or("?"));
    let _ = writeln!(s, "split:    {}", e.meta.split.as_deref().unwrap_or("?"));
    if let Some(t) = e.meta.tolerance() {
        let _ = writeln!(s, "tolerance: atol {} rtol {}", t.atol, t.rtol);
    }
    let _ = writeln!(s, "problem:  {}", e.problem_path.display());
    let _ = writeln!(
        s,
        "solution: {}",
        e.solution_path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "none".into())
    );
    for (name, o) in &e.meta.variants {
        let parts: Vec<String> = o.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(s, "variant:  {name}: {}", parts.join(" "));
    }
    let _ = writeln!(s, "---");
    s.push_str(&std::fs::read_to_string(&e.problem_path).unwrap_or_else(|e| format!("<{e}>\n")));
    s
}

enum Task {
    Problem(String, String),
    Solution(String, String),
}

async fn validate(
    global: &Global,
    filter: Filter,
    variants: Vec<String>,
    pool_args: crate::PoolArgs,
    timing: crate::eval_cmd::TimingArgs,
    guard: crate::GuardOpts,
    json: bool,
) -> anyhow::Result<u8> {
    let suite = match load(&filter.suite) {
        Ok(s) => s,
        Err(c) => return Ok(c),
    };
    let mut findings: Vec<String> = suite.lint();
    let entries: Vec<SuiteEntry> = suite
        .entries
        .iter()
        .filter(|e| filter.keep(e) && e.problem_path.is_file())
        .cloned()
        .collect();
    if let Some(msg) = pool_args.problem() {
        eprintln!("error: {msg}");
        return Ok(EXIT_USAGE);
    }
    let policy = match guard.load() {
        Ok(p) => p,
        Err(msg) => {
            eprintln!("error: {msg}");
            return Ok(EXIT_USAGE);
        }
    };
    let pool = global.start_pool(pool_args.config(usize::MAX)).await?;
    let cpu_mode = pool.environment().device == DeviceKind::Cpu;
    let variants = if variants.is_empty() {
        if cpu_mode {
            vec!["small".to_string()]
        } else {
            vec!["full".to_string(), "heldout".to_string()]
        }
    } else {
        variants
    };
    if !json {
        eprintln!("{}", crate::report::env_line(pool.environment()));
    }
    let store = Store::open(&global.store_path())?;
    let evaluator = Arc::new(crate::guarded(
        Evaluator::new(pool, Some(store), tritonforge_pyenv::worker_hash()),
        policy,
    ));

    // Findings make the suite invalid; `slow` notes (wall-clock, so load-dependent) do not.
    let mut set: JoinSet<(Task, Vec<String>, Vec<String>)> = JoinSet::new();
    let (mut n_problems, mut n_solutions) = (0usize, 0usize);
    for e in &entries {
        let problem = match Problem::load_with(&e.problem_path, Some(&suite.manifest)) {
            Ok(p) => p,
            Err(err) => {
                findings.push(format!("{}: {err}", e.key));
                continue;
            }
        };
        for v in &variants {
            let (vname, overrides) = match problem.variant(Some(v), cpu_mode) {
                Ok(x) => x,
                Err(err) => {
                    findings.push(format!("{}: {err}", e.key));
                    continue;
                }
            };
            let label = vname.clone().unwrap_or_else(|| "full".into());
            n_problems += 1;
            let ev = evaluator.clone();
            let (p, key, l, o) = (
                problem.clone(),
                e.key.clone(),
                label.clone(),
                overrides.clone(),
            );
            set.spawn(async move {
                let mut f = Vec::new();
                let mut slow = Vec::new();
                match ev.check_problem(&p, o, Duration::from_secs(300)).await {
                    Ok(report) => {
                        for x in report.findings {
                            f.push(format!("{key} [{l}]: {x}"));
                        }
                        if cpu_mode && l == "small" && report.max_forward_ms > SMALL_TRIAL_BUDGET_MS
                        {
                            slow.push(format!(
                                "{key} [{l}]: reference forward takes {:.0} ms; `small` must stay under {SMALL_TRIAL_BUDGET_MS:.0} ms on CPU",
                                report.max_forward_ms
                            ));
                        }
                    }
                    Err(err) => f.push(format!("{key} [{l}]: {err}")),
                }
                (Task::Problem(key, l), f, slow)
            });
            let Some(sol) = &e.solution_path else {
                continue;
            };
            let candidate = match Candidate::load(sol) {
                Ok(c) => c,
                Err(err) => {
                    findings.push(format!("{}: {err}", e.key));
                    continue;
                }
            };
            n_solutions += 1;
            let config = timing.apply(EvalConfig {
                tolerance: problem.meta.tolerance(),
                variant: vname,
                overrides,
                device: DeviceRequest::Auto,
                ..EvalConfig::default()
            });
            let ev = evaluator.clone();
            let (p, key, l) = (problem.clone(), e.key.clone(), label);
            set.spawn(async move {
                let mut f = Vec::new();
                let mut slow = Vec::new();
                match ev.evaluate(&p, &candidate, &config).await {
                    Ok(r) => {
                        let rec = r.record;
                        if rec.verdict.status != Status::Correct {
                            f.push(format!(
                                "{key} [{l}]: reference solution is {}: {}",
                                rec.verdict.status, rec.verdict.message
                            ));
                        } else if cpu_mode && l == "small" {
                            // Waiting for the device is not the solution's time.
                            let per_trial = (rec.executor_ms.unwrap_or(0.0) - rec.lease_wait_ms)
                                .max(0.0)
                                / f64::from(config.trials.max(1));
                            if per_trial > SMALL_TRIAL_BUDGET_MS {
                                slow.push(format!(
                                    "{key} [{l}]: a solution trial takes {per_trial:.0} ms under the interpreter; `small` must stay under {SMALL_TRIAL_BUDGET_MS:.0} ms"
                                ));
                            }
                        }
                    }
                    Err(err) => f.push(format!("{key} [{l}]: solution: {err}")),
                }
                (Task::Solution(key, l), f, slow)
            });
        }
    }
    let total = set.len();
    let mut done = 0;
    let mut slow: Vec<String> = Vec::new();
    while let Some(joined) = set.join_next().await {
        let (task, f, s) = joined?;
        slow.extend(s);
        done += 1;
        if !json {
            let (what, key, l) = match &task {
                Task::Problem(k, l) => ("problem ", k, l),
                Task::Solution(k, l) => ("solution", k, l),
            };
            eprintln!(
                "[{done}/{total}] {what} {key} [{l}]: {}",
                if f.is_empty() { "ok" } else { "FAILED" }
            );
        }
        findings.extend(f);
    }
    findings.sort();
    slow.sort();
    if json {
        println!(
            "{}",
            serde_json::json!({
                "problems_checked": n_problems, "solutions_checked": n_solutions,
                "variants": variants, "findings": findings, "slow": slow,
            })
        );
    } else {
        for f in &findings {
            println!("FAIL {f}");
        }
        for s in &slow {
            println!("SLOW {s} (wall-clock on this machine now; not a failure)");
        }
        println!(
            "validated {} problem variants and {} solutions ({}): {} finding{}",
            n_problems,
            n_solutions,
            variants.join(", "),
            findings.len(),
            if findings.len() == 1 { "" } else { "s" }
        );
    }
    Ok(if findings.is_empty() {
        EXIT_CORRECT
    } else {
        EXIT_VERDICT
    })
}
