//! `tritonforge suite` (alias `bench`): list, show and validate the problem suite.

use clap::Subcommand;
use tritonforge_eval::{validate_suite, ValidateSpec};
use tritonforge_suite::{Filter, SuiteEntry};

use crate::args::{budget_flag, FilterArgs, Global, GuardOpts, PoolArgs, TimingArgs};
use crate::exit::{self, usage};

#[derive(Subcommand)]
pub enum SuiteCmd {
    /// List problems, filtered by level, family or split.
    List {
        #[command(flatten)]
        filter: FilterArgs,
        #[arg(long)]
        json: bool,
    },
    /// Show one problem: metadata, variants, solution, source.
    Show {
        /// Id (`L1-001`), key (`level1/relu`) or name (`relu`).
        problem: String,
    },
    /// Check the suite: manifest and files agree; every problem imports, is deterministic and
    /// not degenerate; every reference solution is correct. Reports all failures.
    Validate {
        #[command(flatten)]
        filter: FilterArgs,
        /// Variants to run [default: `small` in CPU mode, `full` and `heldout` on a GPU].
        #[arg(long)]
        variant: Vec<String>,
        /// Wall-clock budget per reference solution, seconds; one that runs out of it is
        /// tried once more with three times as much before it is a failure.
        #[arg(long, default_value_t = 120.0)]
        budget: f64,
        /// Correctness trials per reference solution, each with a fresh seed (the re-call
        /// check after them draws inputs of its own).
        #[arg(long, default_value_t = tritonforge_eval::EvalSettings::default().trials,
              value_parser = clap::value_parser!(u32).range(1..))]
        trials: u32,
        #[command(flatten)]
        pool: PoolArgs,
        #[command(flatten)]
        timing: TimingArgs,
        #[command(flatten)]
        guard: GuardOpts,
        #[arg(long)]
        json: bool,
    },
    /// Turn a KernelBench-style folder (its levelN/ folders, or a flat folder of problem
    /// files) into a suite with a manifest, deriving `small` CPU variants by scaling each
    /// problem's module-level size constants; reports the problems it cannot scale.
    Import {
        /// The folder: a KernelBench checkout, its levelN/ parent, or a folder of .py problems.
        dir: std::path::PathBuf,
        /// Where to write the suite [default: `<DIR>-suite` beside DIR].
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// The level of a flat folder's problems.
        #[arg(long, default_value_t = 1)]
        level: u32,
        #[command(flatten)]
        pool: PoolArgs,
        #[arg(long)]
        json: bool,
    },
    /// Generate problems with reference Triton solutions at graded difficulty (and planted
    /// wrong first attempts), keep those the evaluator confirms, write them as a suite
    /// (see docs/synth.md).
    Synth(Box<crate::synth_cmd::SynthArgs>),
}

pub async fn run(global: &Global, cmd: SuiteCmd) -> anyhow::Result<u8> {
    if let SuiteCmd::Import { dir, out, level, pool, json } = cmd {
        return import(global, &dir, out, level, &pool, json).await;
    }
    let suite = global.load_suite()?;
    match cmd {
        SuiteCmd::List { filter, json } => {
            let filter = Filter::from(&filter);
            let rows: Vec<&SuiteEntry> = suite.entries.iter().filter(|e| filter.keep(e)).collect();
            if !json {
                print!("{}", tritonforge_suite::render::list_table(&rows));
            }
            for e in rows.iter().filter(|_| json) {
                println!("{}", tritonforge_suite::render::json(e));
            }
            Ok(exit::CORRECT)
        }
        SuiteCmd::Show { problem } => {
            let Some(e) = suite.find(&problem) else {
                return Err(usage(format!(
                    "no problem {problem:?} in {} (use an id, a key like level1/relu, or a unique name)",
                    suite.manifest.path.display()
                )));
            };
            print!("{}", tritonforge_suite::render::show(e));
            Ok(exit::CORRECT)
        }
        SuiteCmd::Validate { filter, variant, budget, trials, pool, timing, guard, json } => {
            let spec = ValidateSpec {
                filter: Filter::from(&filter),
                variants: variant,
                timing: (&timing).into(),
                budget: Some(budget_flag(budget)?),
                trials: Some(trials),
            };
            validate(global, &suite, spec, &pool, &guard, json).await
        }
        SuiteCmd::Synth(args) => crate::synth_cmd::run(global, &suite, *args).await,
        SuiteCmd::Import { .. } => unreachable!("handled before the suite is loaded"),
    }
}

async fn import(
    global: &Global,
    dir: &std::path::Path,
    out: Option<std::path::PathBuf>,
    level: u32,
    pool: &PoolArgs,
    json: bool,
) -> anyhow::Result<u8> {
    use tritonforge_eval::import::{import_suite, ImportLine, ImportOutcome, ImportSuiteError};
    use tritonforge_suite::import::ImportError;
    let out = out.unwrap_or_else(|| {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        dir.with_file_name(format!("{name}-suite"))
    });
    // Bad input (no such folder, a file that is no problem, an existing suite) is named
    // before any worker starts.
    if let Err(e) = tritonforge_suite::import::discover(dir, level) {
        return Err(usage(e.to_string()));
    }
    if out.join(tritonforge_suite::MANIFEST_FILE).exists() {
        return Err(usage(ImportError::OutExists { out }.to_string()));
    }
    let evaluator = global.eval_service(|| pool.config(usize::MAX), None).await?;
    if !json {
        eprintln!("{}", tritonforge_eval::report::env_line(evaluator.environment()));
    }
    let render = |l: &ImportLine| match l.outcome {
        ImportOutcome::Unscalable => {
            format!("{:<40} unscalable  {}", l.key, l.reason.as_deref().unwrap_or(""))
        }
        ImportOutcome::AsIs => format!("{:<40} as written", l.key),
        ImportOutcome::Scaled => {
            let o: Vec<String> = l.small.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("{:<40} small       {}", l.key, o.join(" "))
        }
    };
    let report = match import_suite(evaluator, dir, &out, level, &mut |l| {
        if !json {
            eprintln!("{}", render(l));
        }
    })
    .await
    {
        Ok(r) => r,
        Err(ImportSuiteError::Import(e)) => return Err(usage(e.to_string())),
        Err(e) => return Err(e.into()),
    };
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        for l in &report.problems {
            println!("{}", render(l));
        }
        println!(
            "wrote {} ({} problems, {} without a small variant)",
            report.manifest.display(),
            report.problems.len(),
            report.unscalable()
        );
    }
    Ok(exit::CORRECT)
}

async fn validate(
    global: &Global,
    suite: &tritonforge_suite::Suite,
    spec: ValidateSpec,
    pool: &PoolArgs,
    guard: &GuardOpts,
    json: bool,
) -> anyhow::Result<u8> {
    let evaluator = global.eval_service(|| pool.config(usize::MAX), guard.load()?).await?;
    if !json {
        eprintln!("{}", tritonforge_eval::report::env_line(evaluator.environment()));
    }
    // Progress goes to stderr in JSON mode too: the report is written only at the end, and a
    // long GPU validation cut short would otherwise leave nothing of what it checked.
    let report =
        validate_suite(evaluator, suite, &spec, &mut |c| eprintln!("{}", c.line())).await?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", report.text());
    }
    Ok(if report.findings.is_empty() { exit::CORRECT } else { exit::VERDICT })
}
