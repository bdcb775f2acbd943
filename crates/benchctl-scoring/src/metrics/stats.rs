//! Uncertainty of the metrics: bootstrap confidence intervals over items, and paired
//! comparisons of two models on the same items.
//!
//! Decisions (see the Statistics section of docs/results.md):
//! - **Bootstrap**: items are resampled with replacement (`resamples` times, default 1,000,
//!   from a seeded SplitMix64 stream, so intervals are reproducible); every headline metric,
//!   macro averages included, is recomputed on each resample; the interval is the 2.5th and
//!   97.5th percentile (percentile method, linear interpolation).
//! - **Cluster bootstrap** ([`Unit::Clusters`]): as many clusters as the suite has are drawn
//!   with replacement, each with all its items, so that items made together vary together;
//!   each per-item metric's design effect (its variance under clusters over its variance as
//!   if the items were independent, both by the usual linearisation) is reported beside.
//!   Clusters scattered over the suite are first gathered (the items copied in cluster order),
//!   so that every resample reads runs of consecutive items, as cheap as the item bootstrap.
//! - **Paired bootstrap**: both models are resampled with the same item indices; the
//!   interval is that of the difference `b − a`.
//! - **McNemar's test**, for the metrics whose per-item value is a 0/1 outcome: the exact
//!   two-sided binomial test on the discordant items (no χ² approximation, so small counts
//!   are right).

use super::{Aggregate, Clusters, ItemValues, ItemView, Summary};
use crate::{Result, ScoreTensor};

/// A metric's point estimate and 95 % interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Interval {
    pub metric: String,
    pub value: f64,
    pub low: f64,
    pub high: f64,
    /// With clusters, the metric's design effect: how many times the variance of its estimate
    /// exceeds what independent items would give (`None` for items, and for metrics that are
    /// not a mean over items: macro, subset and group averages).
    pub design_effect: Option<f64>,
}

/// What a bootstrap resamples.
#[derive(Debug, Clone, Copy)]
pub enum Unit<'a> {
    /// Items, independently, with replacement.
    Items,
    /// Whole clusters with replacement, as many as there are, each with all its items.
    Clusters(&'a Clusters),
}

/// A paired difference `b − a` and, for 0/1 metrics, McNemar's test.
#[derive(Debug, Clone, PartialEq)]
pub struct Paired {
    pub metric: String,
    pub a: f64,
    pub b: f64,
    pub delta: f64,
    pub low: f64,
    pub high: f64,
    /// `(a right b wrong, a wrong b right, exact two-sided p)`.
    pub mcnemar: Option<(usize, usize, f64)>,
    /// The standard deviation of the resampled differences: the bootstrap's standard error of
    /// `delta`.
    pub se: f64,
}

/// A per-item metric's paired difference `b − a` over the items both runs have it for,
/// overall or in one breakdown group, with its standard error by linearisation: what a
/// test of the difference and its detectable size need, without resampling.
#[derive(Debug, Clone, PartialEq)]
pub struct PairedTest {
    /// The metric as reported (a distribution's as `<name>_mean`).
    pub metric: String,
    /// `(tag key, group)` for a breakdown group; `None` over all items.
    pub group: Option<(String, String)>,
    pub items: usize,
    /// `b − a`, in the metric's units (points for a percentage of items).
    pub delta: f64,
    /// The standard error of `delta`: `√(C/(C−1) · Σ_c (D_c − d̄·n_c)²) / n` over the `C`
    /// clusters (sums `D_c` of `n_c` differences; every item its own cluster when resampling
    /// items, which is `s/√n`).
    pub se: f64,
    /// With clusters, `se²` over the variance as if the items were independent (`s²/n`).
    pub design_effect: Option<f64>,
    /// For a 0/1 metric, `(a right b wrong, a wrong b right)`.
    pub discordant: Option<(usize, usize)>,
}

/// SplitMix64: a tiny, well-mixed, seedable generator (no dependency, stable across versions).
/// The bootstrap's resampling stream; tests draw reproducible data from it too.
#[derive(Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (Lemire's multiply-shift; the bias is below 2⁻³² for n < 2³²).
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }

    /// `values` in a random order (Fisher–Yates).
    pub fn shuffle<T>(&mut self, values: &mut [T]) {
        for j in (1..values.len()).rev() {
            values.swap(j, self.below(j + 1));
        }
    }
}

/// The next resample of `n` items (`n` draws with replacement, or as many cluster draws as
/// there are clusters), as a sequence of item indices that can be replayed: the metrics read
/// it several times (overall, per group), and a million-item resample is not held. `rng`
/// moves past the draws.
fn resample<'a>(rng: &mut SplitMix64, n: usize, unit: Unit<'a>) -> impl Fn() -> Draws<'a> {
    let start = rng.clone();
    let draws = match unit {
        Unit::Items => n,
        Unit::Clusters(clusters) => clusters.count(),
    };
    (0..draws).for_each(|_| {
        rng.below(draws);
    });
    move || match unit {
        Unit::Items => Draws::Items { rng: start.clone(), left: n, n },
        Unit::Clusters(clusters) => match clusters.runs() {
            Some(starts) => Draws::Runs { rng: start.clone(), left: clusters.count(), starts, run: 0..0 },
            None => Draws::Clusters { rng: start.clone(), left: clusters.count(), clusters, cluster: [].iter() },
        },
    }
}

/// `left` more draws: items from `0..n`, or clusters whose items come out one by one.
enum Draws<'a> {
    Items {
        rng: SplitMix64,
        left: usize,
        n: usize,
    },
    Clusters {
        rng: SplitMix64,
        left: usize,
        clusters: &'a Clusters,
        /// The rest of the drawn cluster's items.
        cluster: std::slice::Iter<'a, u32>,
    },
    /// Clusters that are runs of consecutive items ([`Clusters::runs`]): the same draws.
    Runs {
        rng: SplitMix64,
        left: usize,
        starts: &'a [u32],
        run: std::ops::Range<usize>,
    },
}

impl Iterator for Draws<'_> {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        match self {
            Draws::Items { rng, left, n } => {
                *left = left.checked_sub(1)?;
                Some(rng.below(*n))
            }
            Draws::Clusters { rng, left, clusters, cluster } => loop {
                if let Some(&item) = cluster.next() {
                    return Some(item as usize);
                }
                *left = left.checked_sub(1)?;
                *cluster = clusters.members(rng.below(clusters.count())).iter();
            },
            Draws::Runs { rng, left, starts, run } => loop {
                if let Some(item) = run.next() {
                    return Some(item);
                }
                *left = left.checked_sub(1)?;
                let c = rng.below(starts.len() - 1);
                *run = starts[c] as usize..starts[c + 1] as usize;
            },
        }
    }
}

/// Clusters scattered over the suite, gathered ([`Clusters::gathered`]): a resample then reads
/// runs of consecutive items, not member lists scattered over the values (the same clusters
/// drawn, the same items summed; a real-valued mean's last bits may differ with the order).
fn scattered(unit: Unit<'_>) -> Option<(Vec<u32>, Clusters)> {
    match unit {
        Unit::Clusters(clusters) => clusters.gathered(),
        Unit::Items => None,
    }
}

/// Each of `point`'s metrics over `resamples` resamples (of `n` items by `unit`, seeded), as
/// `measure` gives the metrics of a resample's members, once per resample. A metric absent from
/// a resample (no item it applies to was drawn) adds no draw.
fn draws_of<'a>(
    point: &[(String, f64)],
    resamples: usize,
    seed: u64,
    n: usize,
    unit: Unit<'a>,
    measure: impl Fn(&dyn Fn() -> Draws<'a>) -> Vec<(String, f64)>,
) -> Vec<Vec<f64>> {
    let mut draws: Vec<Vec<f64>> = vec![Vec::with_capacity(resamples); point.len()];
    let mut rng = SplitMix64::new(seed);
    for _ in 0..resamples {
        let members = resample(&mut rng, n, unit);
        push_draws(&mut draws, point, &measure(&members));
    }
    draws
}

/// As [`draws_of`] for two runs on the same resamples: each metric's `b − a`, where both have it.
fn draws_of_pairs<'a>(
    point: &[(String, f64)],
    resamples: usize,
    seed: u64,
    n: usize,
    unit: Unit<'a>,
    measure: impl Fn(&dyn Fn() -> Draws<'a>) -> (Vec<(String, f64)>, Vec<(String, f64)>),
) -> Vec<Vec<f64>> {
    draws_of(point, resamples, seed, n, unit, |members| {
        let (ma, mb) = measure(members);
        let get = |m: &[(String, f64)], name: &str| m.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
        point.iter().filter_map(|(name, _)| Some((name.clone(), get(&mb, name)? - get(&ma, name)?))).collect()
    })
}

fn push_draws(draws: &mut [Vec<f64>], point: &[(String, f64)], metrics: &[(String, f64)]) {
    for (slot, (name, _)) in draws.iter_mut().zip(point) {
        if let Some((_, v)) = metrics.iter().find(|(n, _)| n == name) {
            slot.push(*v);
        }
    }
}

fn percentile_interval(mut draws: Vec<f64>) -> (f64, f64) {
    draws.sort_by(f64::total_cmp);
    (super::quantile(&draws, 0.025), super::quantile(&draws, 0.975))
}

/// Bootstrap 95 % intervals of every headline metric, resampling items.
pub fn bootstrap(
    summary: &Summary,
    scores: &ScoreTensor,
    items: &[ItemView<'_>],
    resamples: usize,
    seed: u64,
) -> Result<Vec<Interval>> {
    bootstrap_by(summary, scores, items, resamples, seed, Unit::Items)
}

/// Bootstrap 95 % intervals of every headline metric, resampling `unit`; with clusters, each
/// per-item metric's design effect beside its interval.
pub fn bootstrap_by(
    summary: &Summary,
    scores: &ScoreTensor,
    items: &[ItemView<'_>],
    resamples: usize,
    seed: u64,
    unit: Unit<'_>,
) -> Result<Vec<Interval>> {
    if let Some((order, clusters)) = scattered(unit) {
        let items: Vec<ItemView> = order.iter().map(|&i| items[i as usize]).collect();
        return bootstrap_by(summary, &scores.reordered(&order), &items, resamples, seed, Unit::Clusters(&clusters));
    }
    let values = ItemValues::new(summary, scores, items)?;
    let point = values.headline(|| 0..items.len(), summary, items);
    let draws =
        draws_of(&point, resamples, seed, items.len(), unit, |members| values.headline(members, summary, items));
    let effects = match unit {
        Unit::Items => Vec::new(),
        Unit::Clusters(clusters) => design_effects(&values, clusters),
    };
    Ok(point
        .into_iter()
        .zip(draws)
        .map(|((metric, value), d)| {
            let (low, high) = if d.is_empty() { (value, value) } else { percentile_interval(d) };
            let design_effect = effects.iter().find(|(name, _)| *name == metric).and_then(|(_, e)| *e);
            Interval { metric, value, low, high, design_effect }
        })
        .collect())
}

/// Each per-item metric's design effect under `clusters` (reported as the metric's name, a
/// distribution's as `<name>_mean`): for the mean `ȳ` of the `n` values where the metric
/// applies, the linearised variance with clusters, `C/(C−1) · Σ_c (Y_c − ȳ·n_c)² / n²` over the
/// `C` clusters holding such values (sums `Y_c` of `n_c` values), over the variance of a mean of
/// independent values, `s²/n`. `None` where either is not defined (fewer than two clusters or
/// values, or no spread).
fn design_effects(values: &ItemValues, clusters: &Clusters) -> Vec<(String, Option<f64>)> {
    let names = values.per_item.names();
    (0..names.len())
        .map(|m| {
            let name = match values.per_item.aggregate(m) {
                Aggregate::Percent => names[m].to_string(),
                Aggregate::Distribution => format!("{}_mean", names[m]),
            };
            let (mut n, mut sum) = (0usize, 0.0f64);
            let mut per_cluster: Vec<(usize, f64)> = Vec::with_capacity(clusters.count());
            for c in 0..clusters.count() {
                let (mut count, mut total) = (0usize, 0.0);
                for &i in clusters.members(c) {
                    if let Some(v) = values.values.get(i as usize, m) {
                        count += 1;
                        total += v;
                    }
                }
                if count > 0 {
                    per_cluster.push((count, total));
                    (n, sum) = (n + count, sum + total);
                }
            }
            let mean = sum / n as f64;
            let squares: f64 =
                (0..clusters.items()).filter_map(|i| values.values.get(i, m)).map(|v| (v - mean) * (v - mean)).sum();
            let c = per_cluster.len() as f64;
            let srs = squares / (n as f64 - 1.0) / n as f64;
            let clustered = c / (c - 1.0)
                * per_cluster.iter().map(|&(k, y)| (y - mean * k as f64).powi(2)).sum::<f64>()
                / (n as f64 * n as f64);
            let effect = (n >= 2 && per_cluster.len() >= 2 && srs > 0.0).then(|| clustered / srs);
            (name, effect.filter(|e| e.is_finite()))
        })
        .collect()
}

/// Paired comparison of two score sets on the same items: `b − a` per headline metric with
/// a paired bootstrap interval, and McNemar's exact test for the 0/1 metrics.
pub fn paired(
    summary: &Summary,
    a: &ScoreTensor,
    b: &ScoreTensor,
    items: &[ItemView<'_>],
    resamples: usize,
    seed: u64,
) -> Result<Vec<Paired>> {
    paired_by(summary, a, b, items, resamples, seed, Unit::Items)
}

/// [`paired`], resampling `unit`.
pub fn paired_by(
    summary: &Summary,
    a: &ScoreTensor,
    b: &ScoreTensor,
    items: &[ItemView<'_>],
    resamples: usize,
    seed: u64,
    unit: Unit<'_>,
) -> Result<Vec<Paired>> {
    if let Some((order, clusters)) = scattered(unit) {
        let items: Vec<ItemView> = order.iter().map(|&i| items[i as usize]).collect();
        let (a, b) = (a.reordered(&order), b.reordered(&order));
        return paired_by(summary, &a, &b, &items, resamples, seed, Unit::Clusters(&clusters));
    }
    let (va, vb) = (ItemValues::new(summary, a, items)?, ItemValues::new(summary, b, items)?);
    let all = || 0..items.len();
    let (pa, pb) = (va.headline(all, summary, items), vb.headline(all, summary, items));
    let draws = draws_of_pairs(&pa, resamples, seed, items.len(), unit, |members| {
        (va.headline(members, summary, items), vb.headline(members, summary, items))
    });
    let binary = va.binary_metrics();
    Ok(pa
        .into_iter()
        .zip(draws)
        .filter_map(|((metric, x), d)| {
            let y = pb.iter().find(|(n, _)| *n == metric).map(|(_, v)| *v)?;
            let se = standard_deviation(&d);
            let (low, high) = if d.is_empty() { (y - x, y - x) } else { percentile_interval(d) };
            let mcnemar = binary.iter().find(|(_, n)| *n == metric).map(|&(m, _)| {
                let (mut a_only, mut b_only) = (0, 0);
                for i in 0..items.len() {
                    match (va.values.get(i, m), vb.values.get(i, m)) {
                        (Some(p), Some(q)) if p > 0.5 && q < 0.5 => a_only += 1,
                        (Some(p), Some(q)) if p < 0.5 && q > 0.5 => b_only += 1,
                        _ => {}
                    }
                }
                (a_only, b_only, mcnemar_exact(a_only, b_only))
            });
            Some(Paired { metric, a: x, b: y, delta: y - x, low, high, mcnemar, se })
        })
        .collect())
}

fn standard_deviation(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    (values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (values.len() - 1) as f64).sqrt()
}

/// Every per-item metric's [`PairedTest`] over all items and in each group of the summary's
/// breakdown keys, with standard errors for `unit` (clusters, or items one by one).
pub fn paired_tests(
    summary: &Summary,
    a: &ScoreTensor,
    b: &ScoreTensor,
    items: &[ItemView<'_>],
    unit: Unit<'_>,
) -> Result<Vec<PairedTest>> {
    let (va, vb) = (ItemValues::new(summary, a, items)?, ItemValues::new(summary, b, items)?);
    let groupings: Vec<super::grouping::Grouping> =
        summary.breakdown_keys.iter().map(|key| super::grouping::Grouping::of(key, items)).collect();
    // Scope 0 is every item; then each key's groups, one after the other.
    let mut scopes: Vec<Option<(String, String)>> = vec![None];
    let mut first_scope = Vec::with_capacity(groupings.len());
    for (key, grouping) in summary.breakdown_keys.iter().zip(&groupings) {
        first_scope.push(scopes.len());
        scopes.extend(grouping.values.iter().map(|g| Some((key.clone(), g.clone()))));
    }
    let clusters: Vec<&[u32]> = match unit {
        Unit::Clusters(clusters) => (0..clusters.count()).map(|c| clusters.members(c)).collect(),
        Unit::Items => Vec::new(),
    };
    let singles: Vec<u32> = match unit {
        Unit::Items => (0..items.len() as u32).collect(),
        Unit::Clusters(_) => Vec::new(),
    };
    let clusters: Vec<&[u32]> =
        if clusters.is_empty() { singles.iter().map(std::slice::from_ref).collect() } else { clusters };
    let names = va.per_item.names();
    let mut out = Vec::new();
    for (m, name) in names.iter().enumerate() {
        let binary = va.per_item.aggregate(m) == Aggregate::Percent;
        let (scale, metric) = if binary { (100.0, name.to_string()) } else { (1.0, format!("{name}_mean")) };
        let mut sums = vec![DifferenceSums::default(); scopes.len()];
        let mut touched: Vec<(usize, usize, f64)> = Vec::new();
        for members in &clusters {
            touched.clear();
            for &i in members.iter() {
                let i = i as usize;
                let (Some(x), Some(y)) = (va.values.get(i, m), vb.values.get(i, m)) else { continue };
                let scopes_of_item = std::iter::once(0).chain(
                    groupings
                        .iter()
                        .zip(&first_scope)
                        .flat_map(|(g, &at)| g.groups_of(i).iter().map(move |&g| at + g as usize)),
                );
                for scope in scopes_of_item {
                    sums[scope].add_item(scale * x, scale * y, binary);
                    match touched.iter_mut().find(|(s, _, _)| *s == scope) {
                        Some(t) => (t.1, t.2) = (t.1 + 1, t.2 + scale * (y - x)),
                        None => touched.push((scope, 1, scale * (y - x))),
                    }
                }
            }
            touched.iter().for_each(|&(scope, n, total)| sums[scope].add_cluster(n, total));
        }
        let clustered = matches!(unit, Unit::Clusters(_));
        out.extend(sums.iter().zip(&scopes).filter(|(s, _)| s.n > 0).map(|(s, scope)| {
            let (se, design_effect) = s.standard_error(clustered);
            PairedTest {
                metric: metric.clone(),
                group: scope.clone(),
                items: s.n,
                delta: s.sum / s.n as f64,
                se,
                design_effect,
                discordant: binary.then_some((s.a_only, s.b_only)),
            }
        }));
    }
    Ok(out)
}

/// One scope's running sums of paired differences, item by item and cluster by cluster.
#[derive(Debug, Clone, Default)]
struct DifferenceSums {
    n: usize,
    sum: f64,
    squares: f64,
    a_only: usize,
    b_only: usize,
    clusters: usize,
    /// Σ D_c², Σ D_c·n_c, Σ n_c² over the clusters.
    cluster_dd: f64,
    cluster_dn: f64,
    cluster_nn: f64,
}

impl DifferenceSums {
    fn add_item(&mut self, x: f64, y: f64, binary: bool) {
        let d = y - x;
        (self.n, self.sum, self.squares) = (self.n + 1, self.sum + d, self.squares + d * d);
        if binary && x > y {
            self.a_only += 1;
        } else if binary && y > x {
            self.b_only += 1;
        }
    }

    fn add_cluster(&mut self, n: usize, total: f64) {
        self.clusters += 1;
        self.cluster_dd += total * total;
        self.cluster_dn += total * n as f64;
        self.cluster_nn += (n * n) as f64;
    }

    /// The clustered standard error, and (with `clustered`) the design effect.
    fn standard_error(&self, clustered: bool) -> (f64, Option<f64>) {
        let (n, c) = (self.n as f64, self.clusters as f64);
        if self.n < 2 || self.clusters < 2 {
            return (0.0, None);
        }
        let mean = self.sum / n;
        let between = (self.cluster_dd - 2.0 * mean * self.cluster_dn + mean * mean * self.cluster_nn).max(0.0);
        let variance = c / (c - 1.0) * between / (n * n);
        let independent = (self.squares - n * mean * mean).max(0.0) / (n - 1.0) / n;
        let effect = (clustered && independent > 0.0).then(|| variance / independent);
        (variance.sqrt(), effect)
    }
}

/// Exact two-sided McNemar p-value: `P(X ≤ min(b, c))·2` for `X ~ Binomial(b + c, ½)`, capped at 1.
pub fn mcnemar_exact(b: usize, c: usize) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    let k = b.min(c);
    // Sum C(n, i)·2⁻ⁿ for i ≤ k in log space, so large n neither overflows nor underflows.
    let ln_half_n = -(n as f64) * std::f64::consts::LN_2;
    let mut ln_choose = 0.0; // ln C(n, 0)
    let mut tail = 0.0;
    for i in 0..=k {
        if i > 0 {
            ln_choose += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        tail += (ln_choose + ln_half_n).exp();
    }
    (2.0 * tail).min(1.0)
}
