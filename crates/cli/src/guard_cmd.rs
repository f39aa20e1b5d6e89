//! `tritonforge guard FILE…`: the static rules, printed like a linter.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use tritonforge_guard::{Policy, Severity, RULES};

use crate::{short, EXIT_CORRECT, EXIT_USAGE, EXIT_VERDICT};

#[derive(Args)]
pub struct GuardArgs {
    /// Candidate files to check.
    files: Vec<PathBuf>,
    /// Policy file (TOML): `[rules]` severities (`reject`, `warn`, `off`) and `allow_torch`.
    #[arg(long)]
    policy: Option<PathBuf>,
    /// One JSON object per file.
    #[arg(long)]
    json: bool,
    /// List the rules with their default severity and documentation.
    #[arg(long)]
    rules: bool,
}

/// Read `--policy` (or the strict default), naming the file on error.
pub fn load_policy(path: Option<&std::path::Path>) -> Result<Policy, String> {
    match path {
        None => Ok(Policy::default()),
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            Policy::from_toml(&text, &p.display().to_string()).map_err(|e| e.to_string())
        }
    }
}

pub fn run(args: GuardArgs) -> anyhow::Result<u8> {
    if args.rules {
        for r in RULES {
            println!("{} [{}]\n    {}\n", r.id, severity(r.default), r.doc);
        }
        return Ok(EXIT_CORRECT);
    }
    if args.files.is_empty() {
        eprintln!("error: give one or more candidate files (or --rules)");
        return Ok(EXIT_USAGE);
    }
    let policy = match load_policy(args.policy.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(EXIT_USAGE);
        }
    };
    let mut any_reject = false;
    for file in &args.files {
        let source = match std::fs::read_to_string(file) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {}: {e}", file.display());
                return Ok(EXIT_USAGE);
            }
        };
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
        if let Some(e) = &report.parse_error {
            println!("{name}: syntax error: {e}");
        }
        for f in &report.findings {
            println!(
                "{name}:{}:{}: {} [{}] {}",
                f.line,
                f.column,
                severity(f.severity),
                f.rule,
                f.message
            );
        }
    }
    Ok(if any_reject {
        EXIT_VERDICT
    } else {
        EXIT_CORRECT
    })
}

fn severity(s: Severity) -> &'static str {
    match s {
        Severity::Reject => "reject",
        Severity::Warn => "warn",
        Severity::Off => "off",
    }
}
