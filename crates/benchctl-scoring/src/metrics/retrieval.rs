//! Retrieval metrics against a gallery, as RoCOCO reports them (Park et al., "RoCOCO:
//! Robustness Benchmark of MS-COCO to Stress-test Image-Text Matching Models", 2023,
//! <https://arxiv.org/abs/2304.10727>).
//!
//! A query is scored against every gallery candidate; some candidates match it, some are
//! altered samples. From the score row alone:
//! - the query's **rank**: the number of non-matching candidates scoring at least as high as
//!   its best match (0 = a match is on top). Ties count against the model, as everywhere in
//!   benchctl: a non-match tied with the best match outranks it;
//! - whether its **top-1 is altered**: an altered candidate scores at least as high as every
//!   other candidate (ties again against the model).
//!
//! R@k is the share of queries with rank < k; RSMS the share whose top-1 is altered; the
//! drop rate compares R@1 on an altered gallery with R@1 on the clean one.

use crate::{Error, Result};

/// One query's outcome against a gallery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryOutcome {
    pub rank: usize,
    pub top1_altered: bool,
}

/// The outcome of one query from its scores against the whole gallery. `matches` lists the
/// matching candidates; `is_altered(c)` tells which candidates are altered samples.
pub fn query_outcome(scores: &[f32], matches: &[usize], is_altered: impl Fn(usize) -> bool) -> Result<QueryOutcome> {
    if let Some(c) = scores.iter().position(|s| s.is_nan()) {
        return Err(Error::new(format!("score of gallery candidate {c} is NaN")));
    }
    let best_match = matches
        .iter()
        .map(|&c| {
            scores.get(c).copied().ok_or_else(|| Error::new(format!("matching candidate {c} is outside a gallery of {}", scores.len())))
        })
        .try_fold(f32::NEG_INFINITY, |best, s| s.map(|s| best.max(s)))?;
    if matches.is_empty() {
        return Err(Error::new("a query needs at least one matching candidate"));
    }
    let (mut rank, mut best_altered, mut best_other) = (0, f32::NEG_INFINITY, f32::NEG_INFINITY);
    for (c, &s) in scores.iter().enumerate() {
        if !matches.contains(&c) && s >= best_match {
            rank += 1;
        }
        if is_altered(c) {
            best_altered = best_altered.max(s);
        } else {
            best_other = best_other.max(s);
        }
    }
    Ok(QueryOutcome { rank, top1_altered: best_altered >= best_other })
}

/// R@1, R@5, R@10 and RSMS of a set of queries, as percentages.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetrievalScores {
    pub r1: f64,
    pub r5: f64,
    pub r10: f64,
    pub rsms: f64,
}

/// Summarises query outcomes.
pub fn summarise(outcomes: &[QueryOutcome]) -> Result<RetrievalScores> {
    if outcomes.is_empty() {
        return Err(Error::new("there are no queries to score"));
    }
    let pct = |f: &dyn Fn(&QueryOutcome) -> bool| 100.0 * outcomes.iter().filter(|o| f(o)).count() as f64 / outcomes.len() as f64;
    Ok(RetrievalScores {
        r1: pct(&|o| o.rank < 1),
        r5: pct(&|o| o.rank < 5),
        r10: pct(&|o| o.rank < 10),
        rsms: pct(&|o| o.top1_altered),
    })
}

/// `(R@1 clean − R@1 altered) / R@1 clean`, as a percentage; `None` when the clean R@1 is 0.
pub fn drop_rate(clean_r1: f64, altered_r1: f64) -> Option<f64> {
    (clean_r1 > 0.0).then(|| 100.0 * (clean_r1 - altered_r1) / clean_r1)
}
