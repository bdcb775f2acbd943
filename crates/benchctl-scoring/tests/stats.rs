//! Bootstrap intervals, paired comparisons and McNemar's test.

use benchctl_scoring::metrics::stats::{bootstrap, mcnemar_exact, paired};
use benchctl_scoring::metrics::{evaluate, group, ItemView, Summary};
use benchctl_scoring::{ScoreTensor, Tags, Truth};

fn group_summary() -> Summary {
    Summary::of(group::FAMILY)
}

/// `n` Winoground items with scores from a small deterministic generator.
fn items(n: usize, seed: u64) -> (ScoreTensor, Vec<Truth>, Vec<Tags>) {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut next = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 40) as f32 / (1u64 << 24) as f32
    };
    let mut scores = ScoreTensor::new();
    for _ in 0..n {
        let v: Vec<f32> = (0..4).map(|_| next()).collect();
        scores.push(2, 2, &v).unwrap();
    }
    let tags: Vec<Tags> = (0..n).map(|i| vec![("piece".to_string(), vec![format!("p{}", i % 3)])].into()).collect();
    (scores, (0..n).map(|_| Truth::diagonal(2)).collect(), tags)
}

fn views<'a>(truths: &'a [Truth], tags: &'a [Tags]) -> Vec<ItemView<'a>> {
    truths.iter().zip(tags).map(|(truth, tags)| ItemView { truth, tags }).collect()
}

#[test]
fn every_interval_contains_its_point_estimate() {
    // A property over many random suites, sizes and both micro and macro metrics.
    let with_macro = &group_summary().macro_over("piece");
    for seed in 0..40u64 {
        let n = 5 + (seed as usize * 7) % 60;
        let (scores, truths, tags) = items(n, seed);
        let v = views(&truths, &tags);
        let report = evaluate(with_macro, &scores, &v).unwrap();
        let intervals = bootstrap(with_macro, &scores, &v, 200, seed).unwrap();
        assert_eq!(intervals.len(), report.metrics.len());
        for (i, (name, value)) in intervals.iter().zip(&report.metrics) {
            assert_eq!((&i.metric, i.value), (name, *value));
            assert!(
                i.low <= i.value + 1e-9 && i.value <= i.high + 1e-9,
                "seed {seed}, {name}: {} not in [{}, {}]",
                i.value,
                i.low,
                i.high
            );
            assert!(0.0 <= i.low && i.high <= 100.0);
        }
    }
}

#[test]
fn intervals_are_reproducible_and_narrow_with_more_items() {
    let (scores, truths, tags) = items(400, 1);
    let v = views(&truths, &tags);
    let a = bootstrap(&group_summary(), &scores, &v, 1000, 7).unwrap();
    assert_eq!(a, bootstrap(&group_summary(), &scores, &v, 1000, 7).unwrap(), "same seed, same intervals");
    assert_ne!(a, bootstrap(&group_summary(), &scores, &v, 1000, 8).unwrap());
    let (small, st, sg) = items(40, 1);
    let b = bootstrap(&group_summary(), &small, &views(&st, &sg), 1000, 7).unwrap();
    let width = |i: &[benchctl_scoring::metrics::stats::Interval]| i[0].high - i[0].low;
    assert!(width(&a) < width(&b), "400 items: {}, 40 items: {}", width(&a), width(&b));
    // A binomial proportion's 95 % interval is about ±1.96·√(p(1−p)/n).
    let p = a[0].value / 100.0;
    let expected = 2.0 * 1.96 * (p * (1.0 - p) / 400.0).sqrt() * 100.0;
    assert!((width(&a) - expected).abs() < 0.25 * expected, "width {} vs {expected}", width(&a));
}

#[test]
fn a_model_compared_with_itself_differs_by_nothing() {
    let (scores, truths, tags) = items(100, 3);
    let v = views(&truths, &tags);
    for p in paired(&group_summary(), &scores, &scores, &v, 300, 0).unwrap() {
        assert_eq!((p.delta, p.low, p.high), (0.0, 0.0, 0.0), "{}", p.metric);
        assert_eq!(p.mcnemar, Some((0, 0, 1.0)));
    }
}

#[test]
fn paired_differences_count_the_discordant_items() {
    // b gets every item right (strong diagonal); a's outcomes come from random scores.
    let (a, truths, tags) = items(60, 5);
    let v = views(&truths, &tags);
    let mut b = ScoreTensor::new();
    for _ in 0..60 {
        b.push(2, 2, &[0.9, 0.1, 0.1, 0.9]).unwrap();
    }
    let report_a = evaluate(&group_summary(), &a, &v).unwrap();
    let results = paired(&group_summary(), &a, &b, &v, 500, 0).unwrap();
    let group = results.iter().find(|p| p.metric == "group_score").unwrap();
    assert_eq!(group.b, 100.0);
    assert!((group.delta - (100.0 - report_a.metric("group_score").unwrap())).abs() < 1e-9);
    assert!(group.low <= group.delta && group.delta <= group.high && group.low > 0.0);
    let (a_only, b_only, p) = group.mcnemar.unwrap();
    assert_eq!(a_only, 0);
    assert_eq!(b_only as f64, 60.0 - 60.0 * report_a.metric("group_score").unwrap() / 100.0);
    assert!(p < 1e-6, "{p}");
}

#[test]
fn mcnemar_exact_matches_the_binomial() {
    assert_eq!(mcnemar_exact(0, 0), 1.0);
    assert_eq!(mcnemar_exact(3, 3), 1.0);
    assert!((mcnemar_exact(0, 5) - 0.0625).abs() < 1e-12);
    assert!((mcnemar_exact(9, 1) - 2.0 * 11.0 / 1024.0).abs() < 1e-12);
    // Large counts stay finite and symmetric.
    let p = mcnemar_exact(480, 520);
    assert!(p > 0.2 && p < 0.25 && (p - mcnemar_exact(520, 480)).abs() < 1e-12, "{p}");
}

/// Clusters of `size` items with one outcome each (each cluster's items all right or all
/// wrong): perfectly correlated, so a resample of items sees `size` times as many independent
/// draws as there are. The cluster bootstrap's interval is wider, by about √size, and the
/// design effect is `size`; with every cluster one item, it is 1.
#[test]
fn a_cluster_bootstrap_widens_intervals_by_the_design_effect() {
    use benchctl_scoring::metrics::stats::{bootstrap_by, Unit};
    use benchctl_scoring::metrics::Clusters;
    let (clusters, size) = (60, 5);
    let mut scores = ScoreTensor::new();
    let mut labels = Vec::new();
    for c in 0..clusters {
        let right = (c * 7) % 3 != 0;
        for _ in 0..size {
            let s = if right { [0.9, 0.1, 0.2, 0.8] } else { [0.1, 0.9, 0.8, 0.2] };
            scores.push(2, 2, &s).unwrap();
            labels.push(c);
        }
    }
    let n = clusters * size;
    let truths: Vec<Truth> = (0..n).map(|_| Truth::diagonal(2)).collect();
    let tags: Vec<Tags> = (0..n).map(|_| Tags::new()).collect();
    let v = views(&truths, &tags);
    let summary = group_summary();
    let by_items = bootstrap(&summary, &scores, &v, 1000, 3).unwrap();
    let grouped = Clusters::from_labels(&labels);
    let by_clusters = bootstrap_by(&summary, &scores, &v, 1000, 3, Unit::Clusters(&grouped)).unwrap();
    let width = |i: &[benchctl_scoring::metrics::stats::Interval]| {
        let g = i.iter().find(|x| x.metric == "group_score").unwrap();
        g.high - g.low
    };
    let ratio = width(&by_clusters) / width(&by_items);
    assert!((1.8..2.7).contains(&ratio), "width ratio {ratio} (√5 = 2.24)");
    // `size`, with the linearised variances' finite-sample factors C/(C−1) and (n−1)/n.
    let effect = by_clusters.iter().find(|x| x.metric == "group_score").unwrap().design_effect.unwrap();
    let expected = size as f64 * clusters as f64 / (clusters - 1) as f64 * (n - 1) as f64 / n as f64;
    assert!((effect - expected).abs() < 1e-9, "design effect {effect}, expected {expected}");
    assert!(by_items.iter().all(|i| i.design_effect.is_none()));
    // Singleton clusters: the item bootstrap's draws exactly, design effect 1.
    let singles = Clusters::from_labels(&(0..n).collect::<Vec<_>>());
    let alone = bootstrap_by(&summary, &scores, &v, 1000, 3, Unit::Clusters(&singles)).unwrap();
    let effect = alone.iter().find(|x| x.metric == "group_score").unwrap().design_effect.unwrap();
    assert!((effect - 1.0).abs() < 1e-12, "{effect}");
}

/// The gate's per-item tests: McNemar's discordant counts and the mean difference per metric,
/// overall and in each breakdown group; the standard error `s/√n` by items, and by clusters the
/// linearised one, which the paired bootstrap's spread of differences agrees with (two
/// independent routes to the same quantity), with the design effect of clusters that move
/// together.
#[test]
fn paired_tests_count_discordant_items_and_agree_with_the_bootstrap() {
    use benchctl_scoring::metrics::stats::{paired_by, paired_tests, Unit};
    use benchctl_scoring::metrics::Clusters;
    let (a, truths, tags) = items(600, 11);
    let (b, _, _) = items(600, 12);
    let v = views(&truths, &tags);
    let summary = group_summary().breakdown(&["piece"]);
    let tests = paired_tests(&summary, &a, &b, &v, Unit::Items).unwrap();
    let report_a = evaluate(&summary, &a, &v).unwrap();
    let report_b = evaluate(&summary, &b, &v).unwrap();
    for test in &tests {
        let (x, y) = match &test.group {
            None => (report_a.metric(&test.metric).unwrap(), report_b.metric(&test.metric).unwrap()),
            Some((key, value)) => {
                let of = |r: &benchctl_scoring::report::Report| {
                    r.group(key, value).unwrap().metrics.iter().find(|(n, _)| *n == test.metric).unwrap().1
                };
                (of(&report_a), of(&report_b))
            }
        };
        assert!((test.delta - (y - x)).abs() < 1e-9, "{test:?}: {x} → {y}");
        let (a_only, b_only) = test.discordant.unwrap();
        assert!((test.delta - 100.0 * (b_only as f64 - a_only as f64) / test.items as f64).abs() < 1e-9, "{test:?}");
        // s/√n with differences of ±100 on the discordant items and 0 elsewhere.
        let n = test.items as f64;
        let d = test.delta;
        let squares = (a_only + b_only) as f64 * 100.0 * 100.0 - n * d * d;
        assert!((test.se - (squares / (n - 1.0) / n).sqrt()).abs() < 1e-9, "{test:?}");
        assert!(test.design_effect.is_none());
    }
    assert_eq!(tests.iter().filter(|t| t.group.is_none()).count(), 4, "text, image and group score, GroupMatch");
    assert_eq!(tests.len(), 4 * 4, "overall and three pieces");
    // In clusters of ten consecutive items, the linearised error and the cluster bootstrap's
    // spread agree within 10 %.
    let labels: Vec<usize> = (0..600).map(|i| i / 10).collect();
    let clusters = Clusters::from_labels(&labels);
    let clustered = paired_tests(&summary, &a, &b, &v, Unit::Clusters(&clusters)).unwrap();
    let bootstrap = paired_by(&summary, &a, &b, &v, 2000, 5, Unit::Clusters(&clusters)).unwrap();
    for metric in ["text_score", "image_score", "group_score", "group_match"] {
        let linear = clustered.iter().find(|t| t.metric == metric && t.group.is_none()).unwrap();
        let resampled = bootstrap.iter().find(|p| p.metric == metric).unwrap();
        assert!((linear.se / resampled.se - 1.0).abs() < 0.1, "{metric}: {} against {}", linear.se, resampled.se);
        assert!(linear.design_effect.is_some());
    }
    // The same scores by items: the bootstrap by items agrees with s/√n too.
    let by_items = paired_by(&summary, &a, &b, &v, 2000, 5, Unit::Items).unwrap();
    for p in &by_items {
        let linear = tests.iter().find(|t| t.metric == p.metric && t.group.is_none()).unwrap();
        assert!((linear.se / p.se - 1.0).abs() < 0.1, "{}: {} against {}", p.metric, linear.se, p.se);
    }
}

/// Clusters scattered over the suite are resampled as if their items sat side by side (what
/// makes them as cheap as runs): the same clusters are drawn, so the intervals, design effects
/// and paired intervals equal those of the same suite laid out cluster by cluster.
#[test]
fn scattered_clusters_resample_as_the_same_clusters_side_by_side() {
    use benchctl_scoring::metrics::stats::{bootstrap_by, paired_by, Unit};
    use benchctl_scoring::metrics::Clusters;
    let n = 300;
    let (a, truths, tags) = items(n, 21);
    let (b, _, _) = items(n, 22);
    let labels: Vec<usize> = (0..n).map(|i| (i * 7) % 60).collect();
    let scattered = Clusters::from_labels(&labels);
    assert!(scattered.runs().is_none(), "the clusters are scattered");
    let summary = group_summary().macro_over("piece");
    let v = views(&truths, &tags);
    let intervals = bootstrap_by(&summary, &a, &v, 400, 9, Unit::Clusters(&scattered)).unwrap();
    let paired = paired_by(&summary, &a, &b, &v, 400, 9, Unit::Clusters(&scattered)).unwrap();
    // The same items laid out cluster by cluster, clusters in the order of their first item.
    let mut first_seen: Vec<usize> = Vec::new();
    for &label in &labels {
        if !first_seen.contains(&label) {
            first_seen.push(label);
        }
    }
    let labels = &labels;
    let order: Vec<usize> = first_seen.iter().flat_map(|&c| (0..n).filter(move |&i| labels[i] == c)).collect();
    let reorder = |scores: &ScoreTensor| {
        let mut out = ScoreTensor::new();
        for &i in &order {
            let m = scores.item(i);
            out.push(m.images(), m.texts(), m.values()).unwrap();
        }
        out
    };
    let (ga, gb) = (reorder(&a), reorder(&b));
    let (gt, gtags): (Vec<Truth>, Vec<Tags>) = order.iter().map(|&i| (truths[i].clone(), tags[i].clone())).unzip();
    let gv = views(&gt, &gtags);
    let side_by_side = Clusters::from_labels(&order.iter().map(|&i| labels[i]).collect::<Vec<_>>());
    assert!(side_by_side.runs().is_some());
    assert_eq!(intervals, bootstrap_by(&summary, &ga, &gv, 400, 9, Unit::Clusters(&side_by_side)).unwrap());
    assert_eq!(paired, paired_by(&summary, &ga, &gb, &gv, 400, 9, Unit::Clusters(&side_by_side)).unwrap());
    assert!(intervals.iter().any(|i| i.design_effect.is_some()));
}
