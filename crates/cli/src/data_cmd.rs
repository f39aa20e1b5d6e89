//! `tritonforge data`: build the SFT set from a `data.toml`, and show what a build kept.

use std::path::PathBuf;

use clap::Subcommand;
use tritonforge_data::{synth, write, Config, Report};

use crate::EXIT_USAGE;

#[derive(Subcommand)]
pub enum DataCmd {
    /// Ingest, normalise, filter, deduplicate, decontaminate, split and write (stages and
    /// inputs from the config; see docs/data.md).
    Build {
        #[arg(long)]
        config: PathBuf,
        /// Print the stats as JSON instead of Markdown.
        #[arg(long)]
        json: bool,
    },
    /// Write synthetic KernelBook-shaped rows (kernelbook.jsonl and kernelbook.parquet):
    /// for tests and throughput figures.
    Synth {
        #[arg(long, default_value_t = 1000)]
        rows: usize,
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Plant rows every stage must drop (uuids `bad-...`), a malformed and a non-UTF-8
        /// JSONL line, and a heldout problem of the suite under another name.
        #[arg(long)]
        defects: bool,
        #[arg(long, default_value = "bench")]
        suite: PathBuf,
    },
    /// Show the stats of a finished build (its output directory).
    Stats {
        dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: DataCmd) -> anyhow::Result<u8> {
    match cmd {
        DataCmd::Build { config, json } => {
            let cfg = match Config::load(&config) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("error: {e}");
                    return Ok(EXIT_USAGE);
                }
            };
            let progress = |stage: &str| {
                if !json {
                    eprintln!("data: {stage}");
                }
            };
            let (report, _) = match tritonforge_data::build(&cfg, &progress) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("error: {e}");
                    return Ok(EXIT_USAGE);
                }
            };
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", write::markdown(&report));
                eprintln!("wrote {}", report.outputs.join(", "));
            }
            Ok(0)
        }
        DataCmd::Synth {
            rows,
            out,
            seed,
            defects,
            suite,
        } => {
            let heldout = if defects {
                let s = tritonforge_bench::Suite::load(&suite)?;
                s.entries
                    .iter()
                    .find(|e| e.meta.split.as_deref() == Some("heldout"))
                    .and_then(|e| std::fs::read_to_string(&e.problem_path).ok())
            } else {
                None
            };
            let made = synth::rows(rows, seed, defects, heldout.as_deref());
            std::fs::create_dir_all(&out)?;
            synth::write_jsonl(&out.join("kernelbook.jsonl"), &made, defects)?;
            synth::write_parquet(&out.join("kernelbook.parquet"), &made)?;
            eprintln!("wrote {} rows to {}", made.len(), out.display());
            Ok(0)
        }
        DataCmd::Stats { dir, json } => {
            let path = dir.join("stats.json");
            let report: Report = match std::fs::read_to_string(&path)
                .map_err(|e| e.to_string())
                .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
            {
                Ok(r) => r,
                Err(e) => {
                    eprintln!(
                        "error: {}: {e} (is it a `data build` output directory?)",
                        path.display()
                    );
                    return Ok(EXIT_USAGE);
                }
            };
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", write::markdown(&report));
            }
            Ok(0)
        }
    }
}
