//! What a comparison of two runs can detect, and how a gate of many comparisons keeps its
//! false alarms in check (see "The regression gate" in docs/results.md).
//!
//! - **One-sided tests** of "the current run is worse": McNemar's exact binomial test on the
//!   discordant items of a 0/1 metric, a normal test of the difference over its standard error
//!   otherwise.
//! - **Multiplicity**: Holm's step-down adjustment (the family-wise error rate, under any
//!   dependence between the tests) or Benjamini–Hochberg's step-up one (the false discovery
//!   rate), as adjusted p-values.
//! - **Minimum detectable difference** at a level and power: for a 0/1 metric, Connor's (1987)
//!   normal approximation to McNemar's test at the observed discordance; otherwise
//!   `(z₁₋α + z_power) · se`.
//! - **Sample sizes** the same formulas solved for items, and for repeated seeds (a two-sample
//!   normal test of the seeds' means).

/// Φ, the standard normal distribution function, to about 1e-15 (through `erfc`).
pub fn normal_cdf(x: f64) -> f64 {
    0.5 * erfc(-x / std::f64::consts::SQRT_2)
}

/// Φ⁻¹, the standard normal quantile of `p` in (0, 1): Acklam's rational approximation
/// (relative error below 1.2e-9) refined by two Newton steps on [`normal_cdf`].
pub fn normal_quantile(p: f64) -> f64 {
    if p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if p >= 1.0 {
        return f64::INFINITY;
    }
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] =
        [7.784_695_709_041_462e-3, 3.224_671_290_700_398e-1, 2.445_134_137_142_996, 3.754_408_661_907_416];
    let tail = |q: f64| {
        let q = (-2.0 * q.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    let mut x = if p < 0.024_25 {
        tail(p)
    } else if p > 1.0 - 0.024_25 {
        -tail(1.0 - p)
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    };
    for _ in 0..2 {
        let density = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
        if density > 0.0 {
            x -= (normal_cdf(x) - p) / density;
        }
    }
    x
}

/// The complementary error function: its Maclaurin series below 2 (where the terms do not
/// cancel beyond a few ulp), Laplace's continued fraction above.
fn erfc(x: f64) -> f64 {
    if x < 0.0 {
        return 2.0 - erfc(-x);
    }
    if x < 2.0 {
        // erf(x) = 2/√π Σ (−1)ⁿ x²ⁿ⁺¹ / (n! (2n + 1))
        let (mut term, mut sum) = (x, x);
        for n in 1..60 {
            term *= -x * x / n as f64;
            let add = term / (2 * n + 1) as f64;
            sum += add;
            if add.abs() < 1e-17 * sum.abs() {
                break;
            }
        }
        return 1.0 - sum * std::f64::consts::FRAC_2_SQRT_PI;
    }
    // erfc(x) = e^(−x²)/√π · 1/(x + ½/(x + 1/(x + (3/2)/(x + 2/(x + …))))), from the bottom.
    let mut fraction = x;
    for k in (1..80).rev() {
        fraction = x + (k as f64 / 2.0) / fraction;
    }
    (-x * x).exp() / std::f64::consts::PI.sqrt() / fraction
}

/// McNemar's exact one-sided p-value that `worse` items turning wrong against `better` turning
/// right is no chance: `P(X ≥ worse)` for `X ~ Binomial(worse + better, ½)`.
pub fn mcnemar_one_sided(worse: usize, better: usize) -> f64 {
    let n = worse + better;
    if worse == 0 {
        return 1.0;
    }
    // Σ_{i ≥ worse} C(n, i)·2⁻ⁿ in log space, so large counts neither overflow nor underflow.
    let ln_half_n = -(n as f64) * std::f64::consts::LN_2;
    let mut ln_choose = ln_choose(n, worse);
    let mut tail = 0.0;
    for i in worse..=n {
        if i > worse {
            ln_choose += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        tail += (ln_choose + ln_half_n).exp();
    }
    tail.min(1.0)
}

fn ln_choose(n: usize, k: usize) -> f64 {
    let k = k.min(n - k);
    (0..k).map(|i| ((n - i) as f64).ln() - ((i + 1) as f64).ln()).sum()
}

/// The one-sided p-value of a difference of `drop` (in the worse direction; negative is an
/// improvement) whose standard error is `se`, by the normal approximation.
pub fn normal_one_sided(drop: f64, se: f64) -> f64 {
    if se > 0.0 {
        1.0 - normal_cdf(drop / se)
    } else if drop > 0.0 {
        0.0
    } else {
        1.0
    }
}

/// How the p-values of one gate's many comparisons are adjusted for their number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Correction {
    /// Holm's step-down procedure: the chance of any false alarm (family-wise error rate) is at
    /// most α, whatever the dependence between the tests.
    #[default]
    Holm,
    /// Benjamini and Hochberg's step-up procedure: the expected share of false alarms among the
    /// alarms (false discovery rate) is at most α, for independent or positively dependent tests.
    Bh,
    /// No adjustment: each comparison at level α on its own.
    None,
}

impl Correction {
    /// The name `--correction` takes.
    pub fn name(self) -> &'static str {
        match self {
            Correction::Holm => "holm",
            Correction::Bh => "bh",
            Correction::None => "none",
        }
    }

    /// Adjusted p-values, in the order given: Holm's `max_{j ≤ i} min(1, (m − j + 1)·p₍ⱼ₎)`, or
    /// Benjamini–Hochberg's `min_{j ≥ i} min(1, m·p₍ⱼ₎ / j)`, over the p-values sorted
    /// ascending (ties in their given order).
    pub fn adjust(self, p: &[f64]) -> Vec<f64> {
        let m = p.len();
        let mut order: Vec<usize> = (0..m).collect();
        order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
        let mut adjusted = vec![0.0; m];
        match self {
            Correction::None => adjusted.copy_from_slice(p),
            Correction::Holm => {
                let mut running = 0.0f64;
                for (rank, &i) in order.iter().enumerate() {
                    running = running.max(((m - rank) as f64 * p[i]).min(1.0));
                    adjusted[i] = running;
                }
            }
            Correction::Bh => {
                let mut running = 1.0f64;
                for (rank, &i) in order.iter().enumerate().rev() {
                    running = running.min((m as f64 * p[i] / (rank + 1) as f64).min(1.0));
                    adjusted[i] = running;
                }
            }
        }
        adjusted
    }

    /// The level at which one comparison among `tests` must be significant for a single true
    /// difference to be found: α/m under Holm and Benjamini–Hochberg (both start there), α alone.
    pub fn single_level(self, alpha: f64, tests: usize) -> f64 {
        match self {
            Correction::None => alpha,
            Correction::Holm | Correction::Bh => alpha / tests.max(1) as f64,
        }
    }
}

/// The smallest true difference (a fraction of items) that McNemar's test at one-sided level
/// `alpha` finds with probability `power`, on `items` items whose discordant share is
/// `discordance`: the smallest `δ` with `δ·√n = z₁₋α·√p + z_power·√(p − δ²)` (Connor 1987), where
/// the discordance under the difference is `p = max(discordance, δ)` (a difference of `δ` needs at
/// least that many items changing). Where that `δ` reaches the discordance, every discordant item
/// turns worse and the normal approximation no longer holds: the test then rejects when at least
/// `k = ⌈log₂(1/α)⌉` items turn, and `δ` is solved exactly from `P(Binomial(n, δ) ≥ k) = power`.
/// `None` when no difference up to every item can be found.
pub fn mcnemar_detectable(items: f64, discordance: f64, alpha: f64, power: f64) -> Option<f64> {
    let approximate = connor_detectable(items, discordance, alpha, power);
    match approximate {
        Some(delta) if delta < discordance => Some(delta),
        _ => one_way_detectable(items.floor() as u64, alpha, power).or(approximate),
    }
}

/// When every discordant item turns worse, the test needs `k` of them, the fewest whose exact
/// one-sided p-value `2⁻ᵏ` is at most `alpha`.
fn one_way_needed(alpha: f64) -> u64 {
    (1.0 / alpha).log2().ceil().max(1.0) as u64
}

/// `P(Binomial(n, δ) ≥ k)`, from `P(X < k)` summed in log space.
fn at_least(n: u64, delta: f64, k: u64) -> f64 {
    if k > n {
        return 0.0;
    }
    let (ln_p, ln_q) = (delta.ln(), (1.0 - delta).ln());
    let mut ln_choose = 0.0;
    let below: f64 = (0..k)
        .map(|i| {
            if i > 0 {
                ln_choose += ((n - i + 1) as f64).ln() - (i as f64).ln();
            }
            (ln_choose + i as f64 * ln_p + (n - i) as f64 * ln_q).exp()
        })
        .sum();
    (1.0 - below).max(0.0)
}

/// When every discordant item turns worse: the smallest `δ` with `P(Binomial(n, δ) ≥ k) ≥ power`.
fn one_way_detectable(items: u64, alpha: f64, power: f64) -> Option<f64> {
    let needed = one_way_needed(alpha);
    if items < needed {
        return None;
    }
    let (mut low, mut high) = (0.0f64, 1.0f64);
    for _ in 0..60 {
        let mid = 0.5 * (low + high);
        if at_least(items, mid, needed) >= power {
            high = mid;
        } else {
            low = mid;
        }
    }
    Some(high)
}

/// When every discordant item turns worse: the fewest items `n` with `P(Binomial(n, δ) ≥ k) ≥ power`.
fn one_way_items_needed(delta: f64, alpha: f64, power: f64) -> u64 {
    let needed = one_way_needed(alpha);
    let (mut low, mut high) = (needed.saturating_sub(1), needed.max(1));
    while at_least(high, delta, needed) < power {
        (low, high) = (high, high.saturating_mul(2));
    }
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        if at_least(mid, delta, needed) >= power {
            high = mid;
        } else {
            low = mid;
        }
    }
    high
}

fn connor_detectable(items: f64, discordance: f64, alpha: f64, power: f64) -> Option<f64> {
    let (za, zb) = (normal_quantile(1.0 - alpha), normal_quantile(power));
    let root_n = items.max(0.0).sqrt();
    let excess = |delta: f64| {
        let p = discordance.max(delta);
        delta * root_n - za * p.sqrt() - zb * (p - delta * delta).max(0.0).sqrt()
    };
    // The smallest sign change on a fine grid, then bisection inside it.
    const STEPS: usize = 4096;
    let mut low = 0.0;
    for step in 1..=STEPS {
        let high = step as f64 / STEPS as f64;
        if excess(high) >= 0.0 {
            let mut bracket = (low, high);
            for _ in 0..60 {
                let mid = 0.5 * (bracket.0 + bracket.1);
                if excess(mid) >= 0.0 {
                    bracket.1 = mid;
                } else {
                    bracket.0 = mid;
                }
            }
            return Some(bracket.1);
        }
        low = high;
    }
    None
}

/// The smallest true difference a normal test at one-sided level `alpha` finds with
/// probability `power`, for an estimate with standard error `se`: `(z₁₋α + z_power)·se`.
pub fn normal_detectable(se: f64, alpha: f64, power: f64) -> f64 {
    (normal_quantile(1.0 - alpha) + normal_quantile(power)) * se
}

/// How many items McNemar's test at one-sided level `alpha` needs to find a difference of
/// `difference` (a fraction of items) with probability `power`, when `discordance` of the items
/// differ between the two models (Connor 1987): `⌈(z₁₋α·√p + z_power·√(p − δ²))² / δ²⌉`; where
/// every discordant item turns worse (`p = δ`), exactly as [`mcnemar_detectable`] says. `None`
/// when the discordance is below the difference (no such pair of models exists) or either is
/// not in (0, 1].
pub fn mcnemar_items_needed(difference: f64, discordance: f64, alpha: f64, power: f64) -> Option<u64> {
    if !(difference > 0.0 && difference <= discordance && discordance <= 1.0) {
        return None;
    }
    if difference == discordance {
        return Some(one_way_items_needed(difference, alpha, power));
    }
    let (za, zb) = (normal_quantile(1.0 - alpha), normal_quantile(power));
    let root = za * discordance.sqrt() + zb * (discordance - difference * difference).sqrt();
    Some((root * root / (difference * difference)).ceil() as u64)
}

/// How many runs (seeds) of each of two models a one-sided two-sample normal test at level
/// `alpha` needs to find a difference of `difference` between their mean scores with
/// probability `power`, when one run's score varies by `spread` (a standard deviation, in the
/// difference's units) from seed to seed: `⌈2·(z₁₋α + z_power)²·σ² / δ²⌉`.
pub fn seeds_needed(difference: f64, spread: f64, alpha: f64, power: f64) -> Option<u64> {
    if !(difference > 0.0 && spread >= 0.0) {
        return None;
    }
    let z = normal_quantile(1.0 - alpha) + normal_quantile(power);
    Some(((2.0 * z * z * spread * spread / (difference * difference)).ceil() as u64).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Holm's adjusted p-values never fall below Benjamini–Hochberg's, nor those below the raw
    /// ones, and the adjustments keep the order of the raw p-values.
    #[test]
    fn adjustments_are_ordered_and_monotone() {
        let p = [0.01, 0.04, 0.03, 0.005, 0.5, 0.04];
        let (holm, bh, none) = (Correction::Holm.adjust(&p), Correction::Bh.adjust(&p), Correction::None.adjust(&p));
        assert_eq!(none, p);
        for i in 0..p.len() {
            assert!(holm[i] >= bh[i] && bh[i] >= p[i], "{i}: {holm:?} {bh:?}");
            for j in 0..p.len() {
                if p[i] < p[j] {
                    assert!(holm[i] <= holm[j] && bh[i] <= bh[j]);
                }
            }
        }
        assert!(Correction::Holm.adjust(&[]).is_empty());
    }

    /// The detectable difference is where the items needed equal the items there are.
    #[test]
    fn detectable_difference_inverts_items_needed() {
        for (n, discordance) in [(400.0, 0.2), (2000.0, 0.05), (100.0, 0.5)] {
            let delta = mcnemar_detectable(n, discordance, 0.05, 0.8).unwrap();
            let needed = mcnemar_items_needed(delta, discordance.max(delta), 0.05, 0.8).unwrap() as f64;
            assert!((needed - n).abs() <= 1.0, "n {n}: δ {delta} needs {needed}");
        }
        assert_eq!(mcnemar_detectable(1.0, 0.2, 0.001, 0.8), None, "one item detects nothing at 0.1 %");
        assert_eq!(mcnemar_items_needed(0.3, 0.2, 0.05, 0.8), None, "discordance below the difference");
    }

    #[test]
    fn one_sided_tests_at_their_edges() {
        assert_eq!(mcnemar_one_sided(0, 10), 1.0);
        assert!((mcnemar_one_sided(3, 0) - 0.125).abs() < 1e-15);
        assert_eq!(normal_one_sided(1.0, 0.0), 0.0);
        assert_eq!(normal_one_sided(0.0, 0.0), 1.0);
        assert!((normal_one_sided(0.0, 1.0) - 0.5).abs() < 1e-15);
    }
}
