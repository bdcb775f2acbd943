//! What the regression gate's verdicts are worth (`bench --part gate`), on simulated pairs of
//! runs over a suite of [`TAGS`] tags × [`PER_TAG`] one-image, two-text items (choice accuracy),
//! the gate comparing the overall metric and every tag's (51 rows):
//!
//! - **False alarms**: [`PAIRS`] pairs with no true difference (each item's two outcomes drawn
//!   so that [`DISCORDANCE`] of the items differ, as often one way as the other): the share of
//!   pairs with any regression (the family-wise error rate) under Holm, Benjamini–Hochberg
//!   and no correction, at α = 0.05 and the default 0.5-point tolerance.
//! - **Power**: [`PAIRS`] pairs whose true overall drop is the detectable difference the gate
//!   reported for the overall row of the first null pair: the share in which the overall row
//!   is a regression under Holm. It should be about the 80 % the detectable difference is
//!   computed for.

use std::time::Instant;

use benchctl_scoring::metrics::power::Correction;
use benchctl_scoring::metrics::stats::{paired_tests, SplitMix64, Unit};
use benchctl_scoring::metrics::{choice, ItemView, Summary};
use benchctl_scoring::{ScoreTensor, Tags, Truth};

use super::PartResult;
use crate::compare::{decide_tests, GateRule, Verdict};
use crate::Result;

/// Simulated pairs of runs, per measurement.
pub const PAIRS: usize = 1000;
/// Tags of the simulated suite, and items per tag.
pub const TAGS: usize = 50;
pub const PER_TAG: usize = 40;
/// The share of items on which the two runs' outcomes differ.
pub const DISCORDANCE: f64 = 0.2;

fn uniform(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// Two runs' scores over the suite: each item discordant with probability [`DISCORDANCE`],
/// the baseline right and the current wrong on `(p + δ)/2` of the items and the reverse on
/// `(p − δ)/2`; a concordant item is right in both with probability ¾.
fn pair(rng: &mut SplitMix64, items: usize, drop: f64) -> (ScoreTensor, ScoreTensor) {
    let (mut a, mut b) = (ScoreTensor::new(), ScoreTensor::new());
    let (right, wrong): (&[f32], &[f32]) = (&[0.9, 0.1], &[0.1, 0.9]);
    let worse = (DISCORDANCE + drop) / 2.0;
    for _ in 0..items {
        let u = uniform(rng);
        let (x, y) = if u < worse {
            (right, wrong)
        } else if u < DISCORDANCE {
            (wrong, right)
        } else if uniform(rng) < 0.75 {
            (right, right)
        } else {
            (wrong, wrong)
        };
        // A push of two values to a 1 × 2 item cannot fail.
        let _ = (a.push(1, 2, x), b.push(1, 2, y));
    }
    (a, b)
}

pub(super) fn run() -> Result<(String, Vec<PartResult>)> {
    let truth = Truth::new(1, 2, vec![true, false])?;
    let tags: Vec<Tags> = (0..TAGS).map(|t| Tags::from(vec![("tag".to_string(), vec![format!("t{t:02}")])])).collect();
    let items = TAGS * PER_TAG;
    let views: Vec<ItemView> = (0..items).map(|i| ItemView { truth: &truth, tags: &tags[i / PER_TAG] }).collect();
    let summary = Summary::of(choice::FAMILY).breakdown(&["tag"]);
    let rule = |correction| GateRule { correction, ..GateRule::default() };
    let rules = [rule(Correction::Holm), rule(Correction::Bh), rule(Correction::None)];
    let mut rng = SplitMix64::new(48);
    let started = Instant::now();
    let mut alarms = [0usize; 3];
    let mut detectable = f64::NAN;
    let mut rows = 0;
    for _ in 0..PAIRS {
        let (a, b) = pair(&mut rng, items, 0.0);
        let tests = paired_tests(&summary, &a, &b, &views, Unit::Items)?;
        rows = tests.len();
        for (alarm, rule) in alarms.iter_mut().zip(&rules) {
            let gate = decide_tests(&tests, rule);
            if detectable.is_nan() && rule.correction == Correction::Holm {
                detectable = gate.changes[0].detectable.unwrap_or(f64::NAN);
            }
            *alarm += usize::from(gate.changes.iter().any(|c| c.verdict == Verdict::Regression));
        }
    }
    let mut found = 0usize;
    for _ in 0..PAIRS {
        let (a, b) = pair(&mut rng, items, detectable / 100.0);
        let tests = paired_tests(&summary, &a, &b, &views, Unit::Items)?;
        let gate = decide_tests(&tests, &rules[0]);
        found += usize::from(gate.changes[0].verdict == Verdict::Regression);
    }
    let seconds = started.elapsed().as_secs_f64();
    let share = |n: usize| n as f64 / PAIRS as f64;
    let result = PartResult {
        part: "gate",
        batch: items,
        per_second: (2 * PAIRS) as f64 / seconds,
        p50_ms: seconds * 1e3,
        p90_ms: f64::NAN,
        max_ms: f64::NAN,
        extra: vec![
            ("rows", rows as f64),
            ("false_alarm_rate_holm", share(alarms[0])),
            ("false_alarm_rate_bh", share(alarms[1])),
            ("false_alarm_rate_uncorrected", share(alarms[2])),
            ("overall_detectable_points", detectable),
            ("power_at_detectable_holm", share(found)),
        ],
    };
    let name = format!(
        "regression gate: {PAIRS} simulated pairs of runs with no true difference over {TAGS} tags × {PER_TAG} items (discordance {DISCORDANCE}), then {PAIRS} with the reported detectable drop"
    );
    Ok((name, vec![result]))
}
