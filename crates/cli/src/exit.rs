//! Exit codes, and the one usage-error type that maps to [`USAGE`]: commands return
//! `Err(usage(..))` for bad input instead of printing and returning a code themselves.

use std::fmt::Display;

/// Everything was correct (or the command simply succeeded).
pub const CORRECT: u8 = 0;
/// Some verdict other than correct.
pub const VERDICT: u8 = 1;
/// Bad input: flags, files, configs, problems.
pub const USAGE: u8 = 2;
/// The environment failed: Python, the pool, the store, a backend.
pub const ENV: u8 = 3;
/// Ctrl-C.
pub const INTERRUPTED: u8 = 130;

/// Bad input, named; `main` prints it and exits with [`USAGE`].
#[derive(Debug)]
pub struct UsageError(pub String);

impl Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A usage error from anything printable.
pub fn usage(e: impl Display) -> anyhow::Error {
    anyhow::Error::new(UsageError(e.to_string()))
}

/// The exit code for a command's error: usage errors are 2, the rest 3.
pub fn code_of(e: &anyhow::Error) -> u8 {
    if e.downcast_ref::<UsageError>().is_some() {
        USAGE
    } else {
        ENV
    }
}
