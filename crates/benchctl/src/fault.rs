//! Fault injection for the crash tests: `BENCHCTL_FAULT=<point>:<n>` makes benchctl abort
//! (as a kill would: no unwinding, no cleanup) the `n`-th time (from 0) it reaches `point`.
//! Points: `encode-batch` (after an encoder batch has been cached), `store-dump` (the score
//! dump written, the run file not yet), `store-files` (the run file and dump written, the
//! store's row not yet) and `store-item` (inside the store's
//! transaction, after an item's scores were inserted). The variable is read once
//! per process; unset, a check is one comparison.

use std::sync::OnceLock;

fn configured() -> Option<&'static (String, usize)> {
    static FAULT: OnceLock<Option<(String, usize)>> = OnceLock::new();
    FAULT
        .get_or_init(|| {
            let spec = std::env::var("BENCHCTL_FAULT").ok()?;
            let (point, n) = spec.split_once(':')?;
            Some((point.to_string(), n.parse().ok()?))
        })
        .as_ref()
}

/// Aborts the process if `BENCHCTL_FAULT` names this point and count.
pub fn at(point: &str, n: usize) {
    if let Some((p, count)) = configured() {
        if p == point && *count == n {
            benchctl_base::stderr_line!("benchctl: injected fault at {point}:{n}");
            std::process::abort();
        }
    }
}
