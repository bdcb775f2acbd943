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
//! With `--ties first` ([`Ties::First`], RoCOCO's official `argsort` ranking) a candidate tied
//! with the best match ranks behind it when its index is higher, as in a stable descending
//! sort; see [`query_outcome_with`].
//!
//! R@k is the share of queries with rank < k; RSMS the share whose top-1 is altered; the
//! drop rate compares R@1 on an altered gallery with R@1 on the clean one. As the official
//! evaluation code (BLIP's `itm_eval`, kept in RoCOCO's `eval_*.py`) also reports: `r_mean`,
//! the mean of R@1, R@5 and R@10 (`txt_r_mean` / `img_r_mean`), and MedR,
//! `floor(median(rank)) + 1` with numpy's median (ViLEM, CVPR 2023, reports it with rsum, the
//! sum of R@1/5/10 over both directions).

mod report;

pub use report::{rococo_report, GalleryOutcomes};

use super::Ties;
use crate::{Error, Result};

/// The statistics a retrieval report names `<gallery>_<direction>_<statistic>` whose lower
/// values are better: the median rank, the share of top-1 altered samples, the drop rate.
pub const LOWER_IS_BETTER: [&str; 3] = ["medr", "rsms", "drop"];

/// Whether a larger value of a retrieval metric is better (see [`LOWER_IS_BETTER`]).
pub fn higher_is_better(metric: &str) -> bool {
    !LOWER_IS_BETTER.iter().any(|stat| metric.rsplit_once('_').is_some_and(|(_, last)| last == *stat))
}

/// One query's outcome against a gallery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryOutcome {
    pub rank: usize,
    pub top1_altered: bool,
}

/// The outcome of one query from its scores against the whole gallery, ties against the
/// model. `matches` lists the matching candidates; `altered[c]` tells which candidates are
/// altered samples (an empty slice: none are).
pub fn query_outcome(scores: &[f32], matches: &[usize], altered: &[bool]) -> Result<QueryOutcome> {
    query_outcome_with(scores, matches, altered, Ties::Strict)
}

/// [`query_outcome`] under a tie rule. With [`Ties::First`] the gallery is ordered as a
/// stable descending sort orders it (`numpy.argmax` picks its first element): among equal
/// scores the lower candidate index comes first. The rank is then the number of non-matching
/// candidates ahead of the first best match, and the top-1 is the first candidate holding the
/// highest score.
pub fn query_outcome_with(scores: &[f32], matches: &[usize], altered: &[bool], ties: Ties) -> Result<QueryOutcome> {
    if matches.is_empty() {
        return Err(Error::new("a query needs at least one matching candidate"));
    }
    if !altered.is_empty() && altered.len() != scores.len() {
        return Err(Error::new(format!("{} altered flags for a gallery of {}", altered.len(), scores.len())));
    }
    let mut best_match = f32::NEG_INFINITY;
    for &c in matches {
        let s = scores
            .get(c)
            .copied()
            .ok_or_else(|| Error::new(format!("matching candidate {c} is outside a gallery of {}", scores.len())))?;
        best_match = best_match.max(s);
    }
    let scan = scan(scores, altered, best_match);
    if scan.nan {
        let c = scores.iter().position(|s| s.is_nan()).unwrap_or(0);
        return Err(Error::new(format!("score of gallery candidate {c} is NaN")));
    }
    // Every candidate at or above the best match, less the matches among them.
    let mut distinct = matches.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    let strict_rank = scan.at_or_above - distinct.iter().filter(|&&c| scores[c] >= best_match).count();
    match ties {
        // `shared` is for answer options only, refused before a gallery is ranked.
        Ties::Strict | Ties::Shared => {
            Ok(QueryOutcome { rank: strict_rank, top1_altered: scan.best_altered >= scan.best_other })
        }
        Ties::First => {
            // The first best match; non-matches tied with it but after it rank behind it.
            let first = distinct.iter().copied().find(|&c| scores[c] == best_match).unwrap_or(0);
            let tied_after = scores.iter().enumerate().filter(|&(j, &s)| j > first && s == best_match).count();
            let matches_tied_after = distinct.iter().filter(|&&c| c > first && scores[c] == best_match).count();
            let top = scores.iter().enumerate().fold(0, |top, (j, &s)| if s > scores[top] { j } else { top });
            let top1_altered = altered.get(top).copied().unwrap_or(false);
            Ok(QueryOutcome { rank: strict_rank - (tied_after - matches_tied_after), top1_altered })
        }
    }
}

/// One pass over a query's scores.
struct Scan {
    at_or_above: usize,
    best_altered: f32,
    best_other: f32,
    nan: bool,
}

// Branch-free and compiled per tier, so each copy vectorises (a gallery holds up to 50K
// candidates per query).
#[inline(always)]
fn scan_body<const FUSED: bool>(scores: &[f32], altered: &[bool], threshold: f32) -> Scan {
    let (mut at_or_above, mut best_altered, mut best_other, mut nan) =
        (0usize, f32::NEG_INFINITY, f32::NEG_INFINITY, false);
    if altered.is_empty() {
        for &s in scores {
            at_or_above += (s >= threshold) as usize;
            best_other = if s > best_other { s } else { best_other };
            nan |= s.is_nan();
        }
    } else {
        for (&s, &a) in scores.iter().zip(altered) {
            at_or_above += (s >= threshold) as usize;
            let (alt, other) = if a { (s, f32::NEG_INFINITY) } else { (f32::NEG_INFINITY, s) };
            best_altered = if alt > best_altered { alt } else { best_altered };
            best_other = if other > best_other { other } else { best_other };
            nan |= s.is_nan();
        }
    }
    Scan { at_or_above, best_altered, best_other, nan }
}

benchctl_cpu::per_tier!(fn scan_on = scan_body(scores: &[f32], altered: &[bool], threshold: f32) -> Scan);

fn scan(scores: &[f32], altered: &[bool], threshold: f32) -> Scan {
    scan_on(benchctl_cpu::Tier::current(), scores, altered, threshold)
}

/// What BLIP's retrieval evaluation gives a candidate outside a query's shortlist (its score
/// matrix starts at −100), so it ranks below every shortlisted one.
pub const OUTSIDE_SHORTLIST: f32 = -100.0;

/// The `k` candidates of highest similarity (BLIP's `sims.topk(k)`), ties broken by the lower
/// index (`topk` leaves them unspecified).
pub fn shortlist(similarities: &[f32], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..similarities.len()).collect();
    order.sort_by(|&a, &b| similarities[b].total_cmp(&similarities[a]).then(a.cmp(&b)));
    order.truncate(k);
    order
}

/// A query's row after BLIP's re-ranking (`evaluation()` in salesforce/BLIP
/// `train_retrieval.py`): each shortlisted candidate `c` scores `fusion[i] + similarities[c]`
/// (the ITM head's class-1 logit plus the ITC similarity), every other one
/// [`OUTSIDE_SHORTLIST`]. `fusion[i]` belongs to `shortlist[i]`.
pub fn rerank_row(similarities: &[f32], shortlist: &[usize], fusion: &[f32]) -> Vec<f32> {
    let mut row = vec![OUTSIDE_SHORTLIST; similarities.len()];
    for (&c, &f) in shortlist.iter().zip(fusion) {
        row[c] = f + similarities[c];
    }
    row
}

/// R@1, R@5, R@10, their mean and RSMS of a set of queries, as percentages, and the median
/// rank (1-based).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetrievalScores {
    pub r1: f64,
    pub r5: f64,
    pub r10: f64,
    pub r_mean: f64,
    pub medr: f64,
    pub rsms: f64,
}

/// `floor(median(ranks)) + 1`, numpy's median averaging the two middle ranks of an even count.
pub fn median_rank(ranks: &[usize]) -> f64 {
    let mut sorted = ranks.to_vec();
    sorted.sort_unstable();
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    let median =
        if n % 2 == 1 { sorted[n / 2] as f64 } else { (sorted[n / 2 - 1] as f64 + sorted[n / 2] as f64) / 2.0 };
    median.floor() + 1.0
}

/// Summarises query outcomes.
pub fn summarise(outcomes: &[QueryOutcome]) -> Result<RetrievalScores> {
    if outcomes.is_empty() {
        return Err(Error::new("there are no queries to score"));
    }
    let pct = |f: &dyn Fn(&QueryOutcome) -> bool| {
        100.0 * outcomes.iter().filter(|o| f(o)).count() as f64 / outcomes.len() as f64
    };
    let (r1, r5, r10) = (pct(&|o| o.rank < 1), pct(&|o| o.rank < 5), pct(&|o| o.rank < 10));
    let ranks: Vec<usize> = outcomes.iter().map(|o| o.rank).collect();
    Ok(RetrievalScores {
        r1,
        r5,
        r10,
        r_mean: (r1 + r5 + r10) / 3.0,
        medr: median_rank(&ranks),
        rsms: pct(&|o| o.top1_altered),
    })
}

/// `(R@1 clean − R@1 altered) / R@1 clean`, as a percentage; `None` when the clean R@1 is 0.
pub fn drop_rate(clean_r1: f64, altered_r1: f64) -> Option<f64> {
    (clean_r1 > 0.0).then(|| 100.0 * (clean_r1 - altered_r1) / clean_r1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use benchctl_cpu::Tier;

    /// Each tier this CPU runs scans a row exactly as the generic tier does: counts, maxima, NaN.
    #[test]
    fn every_tier_scans_as_the_generic_one() {
        let mut rng = crate::metrics::stats::SplitMix64::new(0x9e37_79b9);
        let mut next = || (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        for len in [0, 1, 15, 16, 17, 64, 1000, 50_011] {
            let mut scores: Vec<f32> = (0..len).map(|_| (next() * 64.0).round() / 64.0).collect();
            let altered: Vec<bool> = (0..len).map(|i| i % 7 == 3).collect();
            for poisoned in [false, true] {
                if poisoned && len > 0 {
                    scores[len / 2] = f32::NAN;
                }
                for flags in [&altered[..], &[][..]] {
                    let reference = scan_on(Tier::generic(), &scores, flags, 0.125);
                    for tier in Tier::available() {
                        let got = scan_on(tier, &scores, flags, 0.125);
                        let same = |a: f32, b: f32| a.to_bits() == b.to_bits();
                        assert!(
                            got.at_or_above == reference.at_or_above
                                && got.nan == reference.nan
                                && same(got.best_altered, reference.best_altered)
                                && same(got.best_other, reference.best_other),
                            "{} tier, {len} scores, NaN {poisoned}",
                            tier.isa()
                        );
                    }
                }
            }
        }
    }
}
