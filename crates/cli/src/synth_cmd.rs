//! `tritonforge suite synth` (alias `bench synth`): generate problems with reference
//! Triton solutions and planted wrong attempts, keep only what the real evaluator
//! confirms, write them as a suite. The work is `tritonforge_synth::build`; this module
//! supplies the evaluator and the decontamination, and prints the summary.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use tritonforge_data::config::{Decontaminate, Dedup};
use tritonforge_eval::{
    evaluate_all, validate_suite, Checked, EvalService, EvalSettings, TimingSettings, ValidateSpec,
};
use tritonforge_suite::{Candidate, Manifest, Problem, Suite};
use tritonforge_synth::{AttemptOutcome, Checker, Failure, Settings, Summary};

use crate::args::{load_rules, Global, PoolArgs};
use crate::exit::{self, usage};

#[derive(Args)]
pub struct SynthArgs {
    /// Problems to generate (fewer are kept: duplicates, heldout look-alikes and anything
    /// the evaluator does not confirm are dropped).
    #[arg(long, default_value_t = 100)]
    count: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Directory to write the set to (replaced if it holds an earlier set).
    #[arg(long)]
    out: PathBuf,
    /// Share of problems that also get a planted wrong first attempt.
    #[arg(long, default_value_t = 0.3)]
    attempts: f64,
    /// Share of problems marked `split = "heldout"`.
    #[arg(long, default_value_t = 0.2)]
    heldout: f64,
    #[command(flatten)]
    pool: PoolArgs,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(global: &Global, suite: &Suite, args: SynthArgs) -> anyhow::Result<u8> {
    let settings = Settings {
        count: args.count,
        seed: args.seed,
        attempt_share: args.attempts,
        heldout_share: args.heldout,
    };
    settings.check().map_err(usage)?;
    let evaluator =
        global.eval_service(|| args.pool.config(usize::MAX), Some(load_rules(None)?)).await?;
    if !args.json {
        eprintln!("{}", tritonforge_eval::report::env_line(evaluator.environment()));
    }
    let checker = EvalChecker { evaluator, handle: tokio::runtime::Handle::current() };
    let root = suite.root.clone();
    let heldout: Vec<(String, String)> = suite
        .entries
        .iter()
        .filter(|e| e.meta.split.as_deref() == Some("heldout"))
        .filter_map(|e| Some((e.key.clone(), std::fs::read_to_string(&e.problem_path).ok()?)))
        .collect();
    let (out, json) = (args.out.clone(), args.json);
    let built = tokio::task::spawn_blocking(move || {
        let (dedup, decon) = (Dedup::default(), Decontaminate::default());
        // The same computation as a heldout problem, or text the data pipeline's
        // decontamination would find too close to one.
        let lookalikes = move |sources: &[&str]| {
            let twins = tritonforge_synth::twins::heldout_twins(sources, &heldout);
            let (near, _) = tritonforge_data::heldout_lookalikes(
                &root,
                sources,
                dedup.shingle,
                decon.threshold,
            )
            .map_err(|e| e.to_string())?;
            Ok(twins
                .into_iter()
                .zip(near)
                .map(|(twin, near)| {
                    twin.map(|k| format!("suite:{k} (same computation)"))
                        .or(near.map(|k| format!("suite:{k} (similar text)")))
                })
                .collect())
        };
        let progress = |line: &str| {
            if !json {
                eprintln!("synth: {line}");
            }
        };
        tritonforge_synth::build(&settings, &out, &lookalikes, &checker, &progress)
    })
    .await?;
    let summary = match built {
        Ok(s) => s,
        Err(e @ tritonforge_synth::SynthError::Check(_)) => {
            eprintln!("error: {e}");
            return Ok(exit::ENV);
        }
        Err(e) => return Err(usage(e)),
    };
    if json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        print!("{}", render(&summary, &args.out));
    }
    Ok(exit::CORRECT)
}

/// The summary as lines: kept and dropped by reason, families, difficulties, attempts.
fn render(s: &Summary, out: &Path) -> String {
    let list = |m: &std::collections::BTreeMap<String, usize>| {
        m.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
    };
    let dropped: usize = s.dropped.values().sum();
    let mut t = format!(
        "generated {}: kept {} ({} train, {} heldout), dropped {dropped}{}\n",
        s.generated,
        s.kept,
        s.train,
        s.heldout,
        if dropped > 0 { format!(" ({})", list(&s.dropped)) } else { String::new() }
    );
    t += &format!("families: {}\n", list(&s.by_family));
    let by_difficulty: Vec<String> =
        s.by_difficulty.iter().map(|(d, n)| format!("{d}: {n}")).collect();
    t += &format!("difficulty: {}\n", by_difficulty.join(", "));
    let kept: usize = s.attempts_kept.values().sum();
    if s.attempts_planted == 0 {
        t += "wrong attempts: none planted\n";
    } else {
        t += &format!(
            "wrong attempts: {} planted, {kept} kept ({}; flaws: {}), {} dropped{}\n",
            s.attempts_planted,
            list(&s.attempts_kept),
            list(&s.attempts_by_flaw),
            s.attempts_dropped.values().sum::<usize>(),
            if s.attempts_dropped.is_empty() {
                String::new()
            } else {
                format!(" ({})", list(&s.attempts_dropped))
            }
        );
    }
    t += &format!("wrote {} in {:.0} s (details: synth.json)\n", out.display(), s.seconds);
    t
}

/// The real evaluator, as the generator's checker: suite validation of the staged set
/// (problem soundness and solution correctness), then each planted attempt.
struct EvalChecker {
    evaluator: Arc<dyn EvalService>,
    handle: tokio::runtime::Handle,
}

fn untimed() -> TimingSettings {
    TimingSettings { enabled: false, ..TimingSettings::default() }
}

impl Checker for EvalChecker {
    fn check(
        &self,
        dir: &Path,
        keys: &[String],
        progress: &(dyn Fn(&str) + Sync),
    ) -> Result<Vec<Option<Failure>>, String> {
        let suite = Suite::load(dir).map_err(|e| e.to_string())?;
        let spec = ValidateSpec { timing: untimed(), ..ValidateSpec::default() };
        let mut hear = |c: tritonforge_eval::CheckDone| progress(&c.line());
        let report = self
            .handle
            .block_on(validate_suite(self.evaluator.clone(), &suite, &spec, &mut hear))
            .map_err(|e| e.to_string())?;
        // Findings that are no problem's check (the manifest and the files disagree) are
        // the generator's bug: nothing of this set can be trusted.
        if report.findings.len() > report.failed.len() {
            return Err(format!("the generated set is not a valid suite:\n{}", report.text()));
        }
        Ok(keys
            .iter()
            .map(|key| {
                let mine: Vec<_> = report.failed.iter().filter(|f| &f.key == key).collect();
                let first = mine.first()?;
                let reason = match mine.iter().find(|f| f.what == Checked::Problem) {
                    Some(_) => "problem_unsound".to_string(),
                    None => match first.status {
                        Some(s) => format!("solution_{}", s.as_str()),
                        None => "solution_error".into(),
                    },
                };
                let detail = mine.iter().map(|f| f.finding.as_str()).collect::<Vec<_>>().join("; ");
                Some(Failure { reason, detail })
            })
            .collect())
    }

    fn attempts(
        &self,
        dir: &Path,
        items: &[(String, PathBuf)],
        progress: &(dyn Fn(&str) + Sync),
    ) -> Result<Vec<AttemptOutcome>, String> {
        let manifest = Manifest::load(&dir.join(tritonforge_suite::MANIFEST_FILE))
            .map_err(|e| e.to_string())?;
        let mut pairs = Vec::new();
        for (key, path) in items {
            let problem = Problem::load_with(&dir.join(format!("{key}.py")), Some(&manifest));
            let pair = problem.and_then(|p| Ok((p, Candidate::load(path)?)));
            pairs.push(pair.map_err(|e| e.to_string())?);
        }
        let settings = EvalSettings { timing: untimed(), ..EvalSettings::default() };
        let (total, mut done) = (items.len(), 0);
        let mut on_done = |i: usize, r: &Result<tritonforge_eval::Evaluation, _>| {
            done += 1;
            let verdict = match r {
                Ok(ev) => ev.record.verdict.status.as_str().to_string(),
                Err(e) => format!("error: {e}"),
            };
            progress(&format!("[{done}/{total}] attempt {}: {verdict}", items[i].0));
            ControlFlow::Continue(())
        };
        let results = self
            .handle
            .block_on(evaluate_all(&self.evaluator, pairs, &settings, &mut on_done))
            .map_err(|e| e.to_string())?;
        Ok(results
            .into_iter()
            .map(|r| match r {
                Some(Ok(ev)) => AttemptOutcome::Evaluated(Box::new(ev.record)),
                Some(Err(e)) => AttemptOutcome::Failed(e.to_string()),
                None => AttemptOutcome::Failed("not evaluated".into()),
            })
            .collect())
    }
}
