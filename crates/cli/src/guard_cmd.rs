//! `tritonforge guard FILE…`: the static rules, printed like a linter.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use tritonforge_guard::RULES;

use crate::args::{load_rules, short};
use crate::exit::{self, usage};

#[derive(Args)]
pub struct GuardArgs {
    /// Candidate files to check.
    files: Vec<PathBuf>,
    /// Guard rules file (TOML): `[rules]` severities (`reject`, `warn`, `off`) and `allow_torch`.
    #[arg(long = "guard-rules", alias = "policy")]
    rules_file: Option<PathBuf>,
    /// One JSON object per file.
    #[arg(long)]
    json: bool,
    /// List the rules with their default severity and documentation.
    #[arg(long)]
    rules: bool,
    /// Check as for a problem of this suite level: at levels whose mixed-kernel policy lets
    /// PyTorch compute run (3 and 4 by default), `torch-compute-in-forward` only warns.
    #[arg(long)]
    level: Option<u32>,
}

pub fn run(args: GuardArgs) -> anyhow::Result<u8> {
    if args.rules {
        for r in RULES {
            println!("{} [{}]\n    {}\n", r.id, r.default.as_str(), r.doc);
        }
        return Ok(exit::CORRECT);
    }
    if args.files.is_empty() {
        return Err(usage("give one or more candidate files (or --rules)"));
    }
    let mut policy = load_rules(args.rules_file.as_deref())?;
    let mixed = args
        .level
        .and_then(tritonforge_suite::default_level_policy)
        .and_then(|p| p.allow_torch_compute)
        .unwrap_or(false);
    if mixed {
        policy = policy.for_mixed();
    }
    let mut any_reject = false;
    for file in &args.files {
        let source =
            std::fs::read_to_string(file).map_err(|e| usage(format!("{}: {e}", file.display())))?;
        let started = Instant::now();
        let report = tritonforge_guard::check(&source, &policy);
        let micros = started.elapsed().as_secs_f64() * 1e6;
        any_reject |= report.rejects() || report.parse_error.is_some();
        let name = short(file);
        if args.json {
            let v = serde_json::json!({
                "file": name,
                "rejected": report.rejects(),
                "parse_error": report.parse_error,
                "findings": report.findings,
                "micros": micros,
            });
            println!("{v}");
            continue;
        }
        print!("{}", report.lines(&name));
    }
    Ok(if any_reject { exit::VERDICT } else { exit::CORRECT })
}
