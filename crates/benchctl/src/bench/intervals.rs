//! What the bootstrap's intervals are worth, and what they cost (`bench --part intervals`):
//!
//! - **Coverage**: [`SUITES`] simulated suites of [`CLUSTERS`] clusters of [`CLUSTER_SIZE`]
//!   items with a known intra-cluster correlation (each item right when a cluster effect plus
//!   an item effect, both normal, exceed a threshold; the latent correlation [`LATENT_ICC`]),
//!   each summarised with 1,000 resamples by the cluster bootstrap and by the item bootstrap:
//!   the share of suites whose 95 % interval holds the true accuracy, and the mean design
//!   effect. The cluster bootstrap should cover about 95 %; the item bootstrap less.
//! - **Cost**: one bootstrap of a 1,000,000-item suite in clusters of [`CLUSTER_SIZE`], by
//!   clusters that are runs of consecutive items, by the same clusters scattered over the
//!   suite, and by items; the ratios.

use std::time::Instant;

use benchctl_scoring::metrics::power::normal_cdf;
use benchctl_scoring::metrics::stats::{bootstrap_by, SplitMix64, Unit};
use benchctl_scoring::metrics::{choice, Clusters, ItemView, Summary};
use benchctl_scoring::{ScoreTensor, Tags, Truth};

use super::PartResult;
use crate::results::{BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED};
use crate::Result;

/// Simulated suites for the coverage.
pub const SUITES: usize = 1000;
/// Clusters per simulated suite, and items per cluster.
pub const CLUSTERS: usize = 50;
pub const CLUSTER_SIZE: usize = 4;
/// The correlation of two items of one cluster on the latent scale.
pub const LATENT_ICC: f64 = 0.3;
/// The latent threshold: each item is right with probability Φ(0.5) ≈ 69.1 %.
const THRESHOLD: f64 = -0.5;

/// A standard normal draw (Box–Muller).
fn normal(rng: &mut SplitMix64) -> f64 {
    let u = ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let v = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
}

/// A suite of `clusters` × `size` one-image, two-text items (choice accuracy), each right as
/// its latent value says, with each item's cluster.
fn simulated(rng: &mut SplitMix64, clusters: usize, size: usize) -> (ScoreTensor, Vec<usize>) {
    let (cluster_sd, item_sd) = (LATENT_ICC.sqrt(), (1.0 - LATENT_ICC).sqrt());
    let mut scores = ScoreTensor::new();
    let mut labels = Vec::with_capacity(clusters * size);
    for c in 0..clusters {
        let effect = cluster_sd * normal(rng);
        for _ in 0..size {
            let right = effect + item_sd * normal(rng) > THRESHOLD;
            // Scores only decide right or wrong: a push of two values cannot fail.
            let _ = scores.push(1, 2, if right { &[0.9, 0.1] } else { &[0.1, 0.9] });
            labels.push(c);
        }
    }
    (scores, labels)
}

pub(super) fn run() -> Result<(String, Vec<PartResult>)> {
    let truth = Truth::new(1, 2, vec![true, false])?;
    let tags = Tags::new();
    let summary = Summary::of(choice::FAMILY);
    let metric = "i2t_accuracy";
    let true_value = 100.0 * normal_cdf(-THRESHOLD);
    let mut rng = SplitMix64::new(50);
    let (mut covered, mut covered_items, mut effects) = (0usize, 0usize, 0.0);
    let started = Instant::now();
    for suite in 0..SUITES {
        let (scores, labels) = simulated(&mut rng, CLUSTERS, CLUSTER_SIZE);
        let views: Vec<ItemView> = (0..labels.len()).map(|_| ItemView { truth: &truth, tags: &tags }).collect();
        let clusters = Clusters::from_labels(&labels);
        let seed = BOOTSTRAP_SEED + suite as u64;
        let by_clusters =
            bootstrap_by(&summary, &scores, &views, BOOTSTRAP_RESAMPLES, seed, Unit::Clusters(&clusters))?;
        let by_items = bootstrap_by(&summary, &scores, &views, BOOTSTRAP_RESAMPLES, seed, Unit::Items)?;
        let holds = |intervals: &[benchctl_scoring::metrics::stats::Interval]| {
            intervals.iter().any(|i| i.metric == metric && i.low <= true_value && true_value <= i.high)
        };
        covered += usize::from(holds(&by_clusters));
        covered_items += usize::from(holds(&by_items));
        effects += by_clusters.iter().find(|i| i.metric == metric).and_then(|i| i.design_effect).unwrap_or(f64::NAN);
    }
    let coverage_s = started.elapsed().as_secs_f64();

    // The cost on a million items.
    let items = 1_000_000;
    let (scores, labels) = simulated(&mut rng, items / CLUSTER_SIZE, CLUSTER_SIZE);
    let views: Vec<ItemView> = (0..items).map(|_| ItemView { truth: &truth, tags: &tags }).collect();
    let clusters = Clusters::from_labels(&labels);
    // The same clusters with their items scattered over the suite (no cluster a run).
    let mut order: Vec<usize> = (0..items).collect();
    rng.shuffle(&mut order);
    let mut scattered_labels = vec![0; items];
    order.iter().zip(&labels).for_each(|(&at, &label)| scattered_labels[at] = label);
    let scattered = Clusters::from_labels(&scattered_labels);
    let timed = |unit: Unit<'_>| -> Result<f64> {
        let started = Instant::now();
        bootstrap_by(&summary, &scores, &views, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, unit)?;
        Ok(started.elapsed().as_secs_f64())
    };
    let (clustered_s, items_s) = (timed(Unit::Clusters(&clusters))?, timed(Unit::Items)?);
    let scattered_s = timed(Unit::Clusters(&scattered))?;
    let result = PartResult {
        part: "intervals",
        batch: items,
        per_second: items as f64 * BOOTSTRAP_RESAMPLES as f64 / clustered_s,
        p50_ms: clustered_s * 1e3,
        p90_ms: f64::NAN,
        max_ms: f64::NAN,
        extra: vec![
            ("coverage_clusters", covered as f64 / SUITES as f64),
            ("coverage_items", covered_items as f64 / SUITES as f64),
            ("mean_design_effect", effects / SUITES as f64),
            ("coverage_s", coverage_s),
            ("million_items_clusters_s", clustered_s),
            ("million_items_items_s", items_s),
            ("clusters_over_items", clustered_s / items_s),
            ("million_items_scattered_clusters_s", scattered_s),
            ("scattered_clusters_over_items", scattered_s / items_s),
        ],
    };
    let name = format!(
        "bootstrap intervals: coverage over {SUITES} simulated suites of {CLUSTERS} clusters × {CLUSTER_SIZE} items (latent ICC {LATENT_ICC}), cost on {items} items"
    );
    Ok((name, vec![result]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_draws_have_unit_variance() {
        let mut rng = SplitMix64::new(1);
        let draws: Vec<f64> = (0..200_000).map(|_| normal(&mut rng)).collect();
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        let var = draws.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / draws.len() as f64;
        assert!(mean.abs() < 0.01 && (var - 1.0).abs() < 0.01, "mean {mean}, variance {var}");
    }
}
