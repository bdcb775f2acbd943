//! `cargo xtask test [ARGS…]`: the README's test command. Runs every test of the workspace in
//! the release profile (the build the README's main command already made, so nothing is
//! compiled twice), reports every failure rather than stopping at the first failing test
//! binary, and ends with the tests that skipped for want of third-party data or tools: how
//! many, why, and which. `ARGS` go to `cargo test` (e.g. `-p benchctl-scoring`, or
//! `-- name_filter`). The exit status is `cargo test`'s.
//!
//! A test skips through `benchctl_testkit::skip`, which appends its name and reason to a file in
//! the directory `BENCHCTL_SKIP_LOG` names (set here to `target/test-skips/`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Writes to stderr; a closed stream is not an error (nor a panic, as `eprintln!` would be).
fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        _ => {
            say("usage: cargo xtask test [ARGS for cargo test…]");
            ExitCode::from(2)
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn test(extra: &[String]) -> ExitCode {
    let root = workspace_root();
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    let log = target.join("test-skips");
    let _ = std::fs::remove_dir_all(&log);
    if let Err(e) = std::fs::create_dir_all(&log) {
        say(&format!("error: failed to create {}: {e}", log.display()));
        return ExitCode::from(1);
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(&root)
        .args(["test", "--workspace", "--locked", "--release", "--no-fail-fast"])
        .args(extra)
        .env("BENCHCTL_SKIP_LOG", &log)
        .status();
    let code = match status {
        Ok(status) => status.code().unwrap_or(1),
        Err(e) => {
            say(&format!("error: failed to run cargo test: {e}"));
            return ExitCode::from(1);
        }
    };
    let _ = write!(std::io::stdout(), "{}", skip_summary(&read_skips(&log)));
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Each skip's `(test, reason)`, from every file under `log`.
fn read_skips(log: &Path) -> Vec<(String, String)> {
    let mut skips = Vec::new();
    let Ok(entries) = std::fs::read_dir(log) else { return skips };
    for entry in entries.flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        skips
            .extend(text.lines().filter_map(|line| line.split_once('\t')).map(|(t, r)| (t.to_string(), r.to_string())));
    }
    skips.sort();
    skips
}

/// The skips grouped by reason: a count per reason and the tests under it.
fn skip_summary(skips: &[(String, String)]) -> String {
    if skips.is_empty() {
        return "\nno test skipped\n".to_string();
    }
    let mut by_reason: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (test, reason) in skips {
        by_reason.entry(reason).or_default().push(test);
    }
    let mut out = format!("\n{} test(s) skipped, for {} reason(s):\n", skips.len(), by_reason.len());
    for (reason, tests) in by_reason {
        out.push_str(&format!("  {} × {reason}\n", tests.len()));
        for test in tests {
            out.push_str(&format!("      {test}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_are_counted_by_reason() {
        let dir = std::env::temp_dir().join(format!("xtask-skips-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("1.tsv"), "suite::a\tno ../shared\nsuite::b\tno chromium\n").unwrap();
        std::fs::write(dir.join("2.tsv"), "other::c\tno ../shared\nmalformed line\n").unwrap();
        let summary = skip_summary(&read_skips(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(summary.contains("3 test(s) skipped, for 2 reason(s):"), "{summary}");
        assert!(summary.contains("  2 × no ../shared\n      other::c\n      suite::a\n"), "{summary}");
        assert!(summary.contains("  1 × no chromium\n      suite::b\n"), "{summary}");
        assert_eq!(skip_summary(&[]), "\nno test skipped\n");
    }
}
