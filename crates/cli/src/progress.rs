//! Progress on stderr: a bar on a terminal; on a pipe or file the bar hides itself and
//! each finished item gets a plain line.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar of `len` items (`None`: length unknown yet) drawn with `template`; hidden when `quiet`.
pub fn bar(len: Option<u64>, template: &str, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::with_draw_target(len, ProgressDrawTarget::stderr());
    b.set_style(
        ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    b
}

/// Print `line` above the bar, or as a plain line when the bar is hidden (not when `quiet`).
pub fn line(bar: &ProgressBar, quiet: bool, line: String) {
    match (quiet, bar.is_hidden()) {
        (true, _) => {}
        (false, true) => eprintln!("{line}"),
        (false, false) => bar.println(line),
    }
}
