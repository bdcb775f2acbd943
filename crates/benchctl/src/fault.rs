//! Fault injection for the crash tests: `BENCHCTL_FAULT=<point>:<n>` makes benchctl abort
//! (as a kill would: no unwinding, no cleanup) the `n`-th time (from 0) it reaches `point`.
//! Points: `encode-batch` (after an encoder batch has been cached) and `store-item` (inside
//! the store's transaction, after an item's scores were inserted). Unset, it costs one
//! environment lookup per call.

/// Aborts the process if `BENCHCTL_FAULT` names this point and count.
pub fn at(point: &str, n: usize) {
    if let Ok(spec) = std::env::var("BENCHCTL_FAULT") {
        if let Some((p, count)) = spec.split_once(':') {
            if p == point && count.parse() == Ok(n) {
                eprintln!("benchctl: injected fault at {point}:{n}");
                std::process::abort();
            }
        }
    }
}
