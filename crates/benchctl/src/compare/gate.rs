//! The gate's decision over every row at once: each tested row's one-sided p-value of a drop,
//! adjusted for the number of rows (Holm by default), its minimum detectable difference at the
//! level a single true drop must reach, and its verdict.

use benchctl_scoring::metrics::power::{self, Correction};
use benchctl_scoring::metrics::stats::{Paired, PairedTest};

use super::{Change, GateRule, Verdict};

/// What the paired statistics say about one row.
#[derive(Debug, Clone)]
pub(super) struct Evidence {
    /// `current − baseline`, in the metric's units.
    pub delta: f64,
    /// Its standard error (clusters where the current run drew its intervals by clusters).
    pub se: f64,
    pub items: usize,
    /// A 0/1 metric's `(baseline right current wrong, baseline wrong current right)`.
    pub discordant: Option<(usize, usize)>,
    /// Whether `se` is by clusters; a 0/1 metric then takes the normal test, not the exact one.
    pub clustered: bool,
    pub design_effect: Option<f64>,
    pub interval: Option<(f64, f64)>,
}

impl Evidence {
    /// A per-item metric's test (overall or in a group), with the normal interval.
    pub fn from_test(test: &PairedTest, clustered: bool) -> Self {
        let half = 1.959_963_984_540_054 * test.se;
        Evidence {
            delta: test.delta,
            se: test.se,
            items: test.items,
            discordant: test.discordant,
            clustered,
            design_effect: test.design_effect,
            interval: Some((test.delta - half, test.delta + half)),
        }
    }

    /// Any other headline metric (a macro or subset average, a group accuracy, a quartile):
    /// the paired bootstrap's interval and standard error.
    pub fn from_bootstrap(paired: &Paired, items: usize, clustered: bool) -> Self {
        Evidence {
            delta: paired.delta,
            se: paired.se,
            items,
            discordant: None,
            clustered,
            design_effect: None,
            interval: Some((paired.low, paired.high)),
        }
    }

    /// The one-sided p-value of a drop, `sign` being +1 where higher is better.
    fn p_value(&self, sign: f64) -> f64 {
        match self.discordant {
            Some((a_only, b_only)) if !self.clustered => {
                let (worse, better) = if sign > 0.0 { (a_only, b_only) } else { (b_only, a_only) };
                power::mcnemar_one_sided(worse, better)
            }
            _ => power::normal_one_sided(-sign * self.delta, self.se),
        }
    }

    /// The smallest drop (in points) found with probability `power` at one-sided level `alpha`.
    fn detectable(&self, alpha: f64, power_wanted: f64) -> Option<f64> {
        match self.discordant {
            Some((a_only, b_only)) => {
                let n = self.items as f64;
                let discordance = (a_only + b_only) as f64 / n;
                // Clusters shrink the items to their effective number.
                let effect = self.design_effect.filter(|e| self.clustered && *e > 0.0).unwrap_or(1.0);
                power::mcnemar_detectable(n / effect, discordance, alpha, power_wanted).map(|d| 100.0 * d)
            }
            None => Some(power::normal_detectable(self.se, alpha, power_wanted)),
        }
    }
}

/// One row before the decision: its change, and its evidence where the runs pair.
pub(super) struct Row {
    pub change: Change,
    pub evidence: Option<Evidence>,
    /// +1 where higher is better.
    pub sign: f64,
}

/// Decides every row: adjusted p-values over the tested rows, detectable differences at the
/// level one true drop among them must reach, and verdicts.
pub(super) fn decide(rows: Vec<Row>, rule: &GateRule) -> Vec<Change> {
    let p_values: Vec<f64> = rows.iter().filter_map(|r| r.evidence.as_ref().map(|e| e.p_value(r.sign))).collect();
    let adjusted = rule.correction.adjust(&p_values);
    let single_level = rule.correction.single_level(rule.alpha, p_values.len());
    let mut adjusted = adjusted.into_iter();
    let mut raw = p_values.into_iter();
    rows.into_iter()
        .map(|Row { mut change, evidence, sign }| {
            if matches!(change.verdict, Verdict::NotComparable | Verdict::NoCurrentRun) {
                return change;
            }
            let drop = sign * (change.baseline - change.current);
            let mut significant = true; // untested: the tolerance alone decides
            if let Some(evidence) = &evidence {
                let (p, p_adjusted) = (raw.next().unwrap_or(1.0), adjusted.next().unwrap_or(1.0));
                significant = p_adjusted < rule.alpha;
                change.p_value = Some(p);
                change.adjusted_p = Some(p_adjusted);
                // A normal interval of a 0/1 metric's difference stays within what the
                // baseline leaves possible.
                change.interval = match (evidence.discordant, evidence.interval) {
                    (Some(_), Some((low, high))) => {
                        Some((low.max(-change.baseline), high.min(100.0 - change.baseline)))
                    }
                    (_, interval) => interval,
                };
                change.detectable = evidence.detectable(single_level, rule.power).or(Some(f64::INFINITY));
            }
            let regression = change.current.is_nan() || (drop > rule.tolerance && significant);
            change.verdict = if regression {
                Verdict::Regression
            } else if change.detectable.is_some_and(|d| d > rule.tolerance) {
                Verdict::Underpowered
            } else {
                Verdict::Ok
            };
            change
        })
        .collect()
}

/// The correction's name for the gate's header.
pub(super) fn describe(rule: &GateRule, tested: usize) -> String {
    let correction = match rule.correction {
        Correction::Holm => "Holm-adjusted",
        Correction::Bh => "Benjamini–Hochberg-adjusted",
        Correction::None => "unadjusted",
    };
    format!(
        "a drop beyond {:.2} point(s) is a regression when its {correction} one-sided p-value over {tested} tested row(s) is below {}; detectable differences at {:.0} % power",
        rule.tolerance,
        rule.alpha,
        100.0 * rule.power
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::Change;

    /// A row of a 0/1 metric over `items` items, `worse` of them turning wrong and `better` right.
    fn row(items: usize, worse: usize, better: usize) -> Row {
        let delta = 100.0 * (better as f64 - worse as f64) / items as f64;
        let mut change = Change::unpaired(String::new(), String::new(), "acc".into(), 50.0, 50.0 + delta);
        change.group = Some(("tag".into(), format!("{worse}/{better}")));
        let evidence = Evidence {
            delta,
            se: 1.0,
            items,
            discordant: Some((worse, better)),
            clustered: false,
            design_effect: None,
            interval: None,
        };
        Row { change, evidence: Some(evidence), sign: 1.0 }
    }

    /// Fifty drops each significant on its own (McNemar's one-sided p = 2⁻⁸ ≈ 0.004) are all
    /// regressions uncorrected and none under Holm (0.004 × 50 > 0.05); one overwhelming drop
    /// stays a regression under Holm; a drop within the tolerance never is one.
    #[test]
    fn holm_keeps_the_overwhelming_drop_and_drops_the_many_marginal_ones() {
        let rows = || {
            let mut rows: Vec<Row> = (0..50).map(|_| row(1000, 8, 0)).collect();
            rows.push(row(1000, 40, 0));
            rows.push(row(1000, 4, 0)); // 0.4 points: within the 0.5 tolerance
            rows
        };
        let regressions = |correction| {
            let rule = GateRule { correction, ..GateRule::default() };
            decide(rows(), &rule).iter().map(|c| c.verdict == Verdict::Regression).collect::<Vec<_>>()
        };
        let none = regressions(Correction::None);
        assert!(none[..51].iter().all(|&r| r) && !none[51], "{none:?}");
        let holm = regressions(Correction::Holm);
        assert!(holm[..50].iter().all(|&r| !r) && holm[50] && !holm[51], "{holm:?}");
        let decided = decide(rows(), &GateRule::default());
        assert!((decided[0].p_value.unwrap() - 1.0 / 256.0).abs() < 1e-15);
        // Second smallest of 52 (after the overwhelming drop): × 51, the running maximum after.
        assert!((decided[0].adjusted_p.unwrap() - 51.0 / 256.0).abs() < 1e-15);
        // The detectable difference at 0.05/52 on 1,000 items, all discordant items one way.
        let detectable = decided[0].detectable.unwrap();
        assert!(detectable > 0.5 && detectable < 3.0, "{detectable}");
        assert_eq!(decided[0].verdict, Verdict::Underpowered, "{detectable} points is beyond the 0.5 tolerance");
    }
}
