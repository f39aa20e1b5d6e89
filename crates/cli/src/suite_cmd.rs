//! `tritonforge suite` (alias `bench`): list, show and validate the problem suite.

use clap::Subcommand;
use tritonforge_eval::{validate_suite, ValidateSpec};
use tritonforge_suite::{Filter, SuiteEntry};

use crate::args::{FilterArgs, Global, GuardOpts, PoolArgs, TimingArgs};
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
        #[command(flatten)]
        pool: PoolArgs,
        #[command(flatten)]
        timing: TimingArgs,
        #[command(flatten)]
        guard: GuardOpts,
        #[arg(long)]
        json: bool,
    },
    /// Generate problems with reference Triton solutions at graded difficulty (and planted
    /// wrong first attempts), keep those the evaluator confirms, write them as a suite
    /// (see docs/synth.md).
    Synth(Box<crate::synth_cmd::SynthArgs>),
}

pub async fn run(global: &Global, cmd: SuiteCmd) -> anyhow::Result<u8> {
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
        SuiteCmd::Validate { filter, variant, pool, timing, guard, json } => {
            let spec = ValidateSpec {
                filter: Filter::from(&filter),
                variants: variant,
                timing: (&timing).into(),
            };
            validate(global, &suite, spec, &pool, &guard, json).await
        }
        SuiteCmd::Synth(args) => crate::synth_cmd::run(global, &suite, *args).await,
    }
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
    let report = validate_suite(evaluator, suite, &spec, &mut |c| {
        if !json {
            eprintln!("{}", c.line());
        }
    })
    .await?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", report.text());
    }
    Ok(if report.findings.is_empty() { exit::CORRECT } else { exit::VERDICT })
}
