//! Hand-computed cases for the metrics, ties included.

use benchctl_scoring::metrics::{
    answered_group, answers, choice, equivariance, evaluate, group, pairwise, ItemView, Summary, Ties,
};
use benchctl_scoring::{Report, ScoreMatrix, ScoreTensor, Tags, Truth};

/// Winoground's 2×2 scores from s(c, i): rows are images, columns captions.
fn wino(c0i0: f32, c1i0: f32, c0i1: f32, c1i1: f32) -> Vec<f32> {
    vec![c0i0, c1i0, c0i1, c1i1]
}

/// Winoground-style scoring with these breakdowns.
fn by(breakdown_keys: &[&str]) -> Summary {
    Summary::of(group::FAMILY).breakdown(breakdown_keys)
}

fn outcome(values: &[f32]) -> group::Outcome {
    group::outcome(&ScoreMatrix::new(2, 2, values).unwrap(), &Truth::diagonal(2))
}

#[test]
fn group_score_follows_the_official_definitions() {
    // Both right.
    assert_eq!(outcome(&wino(0.9, 0.1, 0.2, 0.8)), group::Outcome { text: true, image: true, group_match: Some(true) });
    // Text right (each image prefers its caption), image wrong (caption 1 prefers image 0).
    let o = outcome(&wino(0.9, 0.7, 0.2, 0.5));
    // GroupMatch holds: the diagonal's total 1.4 beats the other matching's 0.9.
    assert_eq!(o, group::Outcome { text: true, image: false, group_match: Some(true) });
    assert!(!o.group());
    // Image right, text wrong: image 1 prefers caption 0 (0.6 > 0.5), yet caption 0 still
    // prefers image 0 (0.9 > 0.6) and caption 1 prefers image 1 (0.5 > 0.1).
    assert_eq!(
        outcome(&wino(0.9, 0.1, 0.6, 0.5)),
        group::Outcome { text: false, image: true, group_match: Some(true) }
    );
    // Both wrong: everything swapped.
    assert_eq!(
        outcome(&wino(0.1, 0.9, 0.8, 0.2)),
        group::Outcome { text: false, image: false, group_match: Some(false) }
    );
}

#[test]
fn a_tie_is_a_miss() {
    // s(c0,i0) == s(c1,i0): text fails; image comparisons are strict and hold.
    assert_eq!(
        outcome(&wino(0.5, 0.5, 0.2, 0.8)),
        group::Outcome { text: false, image: true, group_match: Some(true) }
    );
    // s(c1,i1) == s(c1,i0): image fails.
    assert_eq!(
        outcome(&wino(0.9, 0.4, 0.2, 0.4)),
        group::Outcome { text: true, image: false, group_match: Some(true) }
    );
    // All equal: nothing is right.
    assert_eq!(
        outcome(&wino(1.0, 1.0, 1.0, 1.0)),
        group::Outcome { text: false, image: false, group_match: Some(false) }
    );
}

#[test]
fn generalises_to_one_image_many_texts() {
    // One image, three texts, text 1 matches: the text score needs it strictly on top;
    // the image score compares no images, so it holds trivially.
    let truth = Truth::new(1, 3, vec![false, true, false]).unwrap();
    let right = [0.1, 0.9, 0.3];
    let tied = [0.1, 0.9, 0.9];
    assert!(group::outcome(&ScoreMatrix::new(1, 3, &right).unwrap(), &truth).text);
    assert!(!group::outcome(&ScoreMatrix::new(1, 3, &tied).unwrap(), &truth).text);
    assert!(group::outcome(&ScoreMatrix::new(1, 3, &tied).unwrap(), &truth).image);
}

fn tags(collapsed: &str, secondary: &[&str]) -> Tags {
    vec![
        ("collapsed_tag".into(), vec![collapsed.into()]),
        ("secondary_tag".into(), secondary.iter().map(|s| s.to_string()).collect()),
    ]
    .into()
}

#[test]
fn evaluate_reports_percentages_and_breakdowns() {
    let truth = Truth::diagonal(2);
    let items_tags = [
        tags("Object", &["Symbolic"]),
        tags("Object", &[]),
        tags("Relation", &["Symbolic", "Series"]),
        tags("Both", &[]),
    ];
    let mut scores = ScoreTensor::new();
    scores.push(2, 2, &wino(0.9, 0.1, 0.2, 0.8)).unwrap(); // text, image, group
    scores.push(2, 2, &wino(0.9, 0.7, 0.2, 0.5)).unwrap(); // text only
    scores.push(2, 2, &wino(0.9, 0.1, 0.6, 0.5)).unwrap(); // image only
    scores.push(2, 2, &wino(0.5, 0.5, 0.5, 0.5)).unwrap(); // all ties: nothing
    let views: Vec<ItemView> = items_tags.iter().map(|t| ItemView { truth: &truth, tags: t }).collect();
    let report = evaluate(&by(&["collapsed_tag", "secondary_tag"]), &scores, &views).unwrap();
    assert_eq!(report.items, 4);
    assert_eq!(report.metric("text_score"), Some(50.0));
    assert_eq!(report.metric("image_score"), Some(50.0));
    assert_eq!(report.metric("group_score"), Some(25.0));
    let object = report.group("collapsed_tag", "Object").unwrap();
    assert_eq!(object.items, 2);
    assert_eq!(
        object.metrics,
        vec![
            ("text_score".into(), 100.0),
            ("image_score".into(), 50.0),
            ("group_score".into(), 50.0),
            ("group_match".into(), 100.0)
        ]
    );
    let both = report.group("collapsed_tag", "Both").unwrap();
    assert_eq!((both.items, both.metrics[2].1), (1, 0.0));
    // An item with two secondary tags counts in both groups; items without one in none.
    let symbolic = report.group("secondary_tag", "Symbolic").unwrap();
    assert_eq!(symbolic.items, 2);
    assert_eq!(symbolic.metrics[0].1, 50.0);
    assert_eq!(report.group("secondary_tag", "Series").unwrap().items, 1);
    let groups: Vec<&str> = report.breakdowns[0].groups.iter().map(|g| g.value.as_str()).collect();
    assert_eq!(groups, ["Both", "Object", "Relation"], "groups are sorted by value");
}

#[test]
fn report_json_round_trips_in_order() {
    let truth = Truth::diagonal(2);
    let t = tags("Object", &["Series"]);
    let mut scores = ScoreTensor::new();
    scores.push(2, 2, &wino(0.9, 0.1, 0.2, 0.8)).unwrap();
    let report = evaluate(&by(&["collapsed_tag"]), &scores, &[ItemView { truth: &truth, tags: &t }]).unwrap();
    let json = report.to_json();
    let keys: Vec<&String> = json["metrics"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["text_score", "image_score", "group_score", "group_match"]);
    assert_eq!(Report::from_json(&json).unwrap(), report);
}

#[test]
fn mismatched_scores_are_errors() {
    let truth = Truth::diagonal(2);
    let t = Tags::new();
    let view = [ItemView { truth: &truth, tags: &t }];
    let mut wrong_shape = ScoreTensor::new();
    wrong_shape.push(1, 2, &[0.1, 0.2]).unwrap();
    let err = evaluate(&by(&[]), &wrong_shape, &view).unwrap_err();
    assert!(err.to_string().contains("item 0 has 2×2 candidates but its scores are 1×2"), "{err}");
    let err = evaluate(&by(&[]), &ScoreTensor::new(), &view).unwrap_err();
    assert!(err.to_string().contains("1 items need scores, got scores for 0"), "{err}");
    let err = evaluate(&by(&[]), &ScoreTensor::new(), &[]).unwrap_err();
    assert!(err.to_string().contains("no items"), "{err}");
    let err = ScoreTensor::new().push(2, 2, &[0.1, f32::NAN, 0.3, 0.4]).unwrap_err();
    assert!(err.to_string().contains("NaN"), "{err}");
    assert!(Truth::new(2, 2, vec![true]).is_err());
}

#[test]
fn pairwise_accuracy_with_micro_and_macro_averages() {
    // One image, [caption, foil]: a hit needs the caption strictly above the foil.
    let truth = Truth::new(1, 2, vec![true, false]).unwrap();
    let piece = |p: &str| -> Tags { vec![("piece".into(), vec![p.into()])].into() };
    let tags = [piece("plurals"), piece("plurals"), piece("plurals"), piece("existence")];
    let mut scores = ScoreTensor::new();
    scores.push(1, 2, &[0.9, 0.1]).unwrap(); // hit
    scores.push(1, 2, &[0.3, 0.3]).unwrap(); // tie: miss
    scores.push(1, 2, &[0.2, 0.7]).unwrap(); // miss
    scores.push(1, 2, &[0.5, 0.4]).unwrap(); // hit
    let views: Vec<ItemView> = tags.iter().map(|t| ItemView { truth: &truth, tags: t }).collect();
    let summary = Summary::of(pairwise::FAMILY).breakdown(&["piece"]).macro_over("piece");
    let report = evaluate(&summary, &scores, &views).unwrap();
    // Micro: 2 of 4 items. Macro: mean of plurals 1/3 and existence 1/1.
    assert_eq!(report.metric("acc_r"), Some(50.0));
    let macro_avg = report.metric("acc_r_macro").unwrap();
    assert!((macro_avg - (100.0 / 3.0 + 100.0) / 2.0).abs() < 1e-9, "{macro_avg}");
    assert_eq!(report.group("piece", "existence").unwrap().metrics, vec![("acc_r".to_string(), 100.0)]);
}

#[test]
fn choice_accuracy_in_both_directions_ties_missing() {
    let i2t = Truth::new(1, 3, vec![false, false, true]).unwrap();
    let t2i = Truth::new(2, 1, vec![true, false]).unwrap();
    let subset = |s: &str| -> Tags { vec![("subset".into(), vec![s.into()])].into() };
    let (a, b) = (subset("count"), subset("existence"));
    let mut scores = ScoreTensor::new();
    scores.push(1, 3, &[0.1, 0.2, 0.9]).unwrap(); // i2t hit
    scores.push(1, 3, &[0.9, 0.2, 0.9]).unwrap(); // i2t tie with the label: miss
    scores.push(2, 1, &[0.7, 0.3]).unwrap(); // t2i hit
    scores.push(2, 1, &[0.1, 0.3]).unwrap(); // t2i miss
    let views = [
        ItemView { truth: &i2t, tags: &a },
        ItemView { truth: &i2t, tags: &b },
        ItemView { truth: &t2i, tags: &a },
        ItemView { truth: &t2i, tags: &b },
    ];
    let summary = Summary::of(choice::FAMILY).breakdown(&["subset"]).macro_over("subset");
    let report = evaluate(&summary, &scores, &views).unwrap();
    // Each direction averages only its own items.
    assert_eq!(report.metric("i2t_accuracy"), Some(50.0));
    assert_eq!(report.metric("t2i_accuracy"), Some(50.0));
    assert_eq!(report.metric("i2t_accuracy_macro"), Some(50.0));
    let count = report.group("subset", "count").unwrap();
    assert_eq!(count.metrics, vec![("i2t_accuracy".to_string(), 100.0), ("t2i_accuracy".to_string(), 100.0)]);
}

#[test]
fn eqsim_deviation_with_mean_and_quartiles() {
    use benchctl_scoring::metrics::equivariance::eqsim_deviation;
    // s11=0.9, s12=0.1, s21=0.2, s22=0.8: |(0.8) - (0.6)| + |(0.7) - (0.7)| = 0.2
    let m = wino(0.9, 0.1, 0.2, 0.8);
    let d = eqsim_deviation(&ScoreMatrix::new(2, 2, &m).unwrap()).unwrap();
    assert!((d - 0.2).abs() < 1e-6, "{d}");
    // A perfectly equivariant item: swapping either side moves the score by the same amount.
    assert_eq!(eqsim_deviation(&ScoreMatrix::new(2, 2, &wino(3.0, 1.0, 1.0, 3.0)).unwrap()), Some(0.0));
    assert_eq!(eqsim_deviation(&ScoreMatrix::new(1, 2, &[1.0, 2.0]).unwrap()), None);

    let truth = Truth::diagonal(2);
    let split = |s: &str| -> Tags { vec![("split".into(), vec![s.into()])].into() };
    let (a, b) = (split("eqbensd"), split("eqbengebc"));
    let mut scores = ScoreTensor::new();
    // Deviations 0, 1, 2, 4 (integers, so exact): s11, s12, s21, s22 = (x, 0, 0, 0) → 2|x|.
    for x in [0.0f32, 0.5, 1.0, 2.0] {
        scores.push(2, 2, &[x, 0.0, 0.0, 0.0]).unwrap();
    }
    let views = [
        ItemView { truth: &truth, tags: &a },
        ItemView { truth: &truth, tags: &a },
        ItemView { truth: &truth, tags: &a },
        ItemView { truth: &truth, tags: &b },
    ];
    let summary = Summary::of(equivariance::FAMILY).breakdown(&["split"]).macro_over("split");
    let report = evaluate(&summary, &scores, &views).unwrap();
    assert_eq!(report.metric("eqsim_deviation_mean"), Some(7.0 / 4.0));
    // Sorted 0, 1, 2, 4: q1 at position 0.75 → 0.75; median at 1.5 → 1.5; q3 at 2.25 → 2.5.
    assert_eq!(report.metric("eqsim_deviation_q1"), Some(0.75));
    assert_eq!(report.metric("eqsim_deviation_median"), Some(1.5));
    assert_eq!(report.metric("eqsim_deviation_q3"), Some(2.5));
    // Items 2–4 (x > 0) are text-correct only when s11 > s12 and s22 > s21: 0 > 0 fails, so none are.
    assert_eq!(report.metric("text_score"), Some(0.0));
    // Macro over splits: eqbensd mean deviation 1.0, eqbengebc 4.0.
    assert_eq!(report.metric("eqsim_deviation_mean_macro"), Some(2.5));
}

#[test]
fn retrieval_ranks_ties_and_altered_top1() {
    use benchctl_scoring::metrics::retrieval::{drop_rate, query_outcome, summarise, QueryOutcome};
    let none: &[bool] = &[];
    // Candidates 0..5; the match is 2.
    let o = query_outcome(&[0.1, 0.5, 0.9, 0.3, 0.2], &[2], none).unwrap();
    assert_eq!(o, QueryOutcome { rank: 0, top1_altered: false });
    // Two non-matches above the match: rank 2 (a hit at 5 and 10, a miss at 1).
    assert_eq!(query_outcome(&[0.95, 0.5, 0.9, 0.99, 0.2], &[2], none).unwrap().rank, 2);
    // A tie with a non-match counts against the model.
    assert_eq!(query_outcome(&[0.9, 0.5, 0.9], &[2], none).unwrap().rank, 1);
    // With several matches the best one counts; a tie between matches costs nothing.
    assert_eq!(query_outcome(&[0.7, 0.8, 0.8, 0.1], &[1, 2], none).unwrap().rank, 0);
    // Top-1 altered: candidate 3 is altered and on top; a tie with an original also counts.
    let altered: &[bool] = &[false, false, false, true];
    assert!(query_outcome(&[0.1, 0.5, 0.9, 0.95], &[2], altered).unwrap().top1_altered);
    assert!(query_outcome(&[0.1, 0.5, 0.9, 0.9], &[2], altered).unwrap().top1_altered);
    assert!(!query_outcome(&[0.1, 0.5, 0.9, 0.2], &[2], altered).unwrap().top1_altered);
    assert!(query_outcome(&[0.1, f32::NAN], &[0], none).is_err());
    assert!(query_outcome(&[0.1, 0.2], &[5], none).is_err());
    assert!(query_outcome(&[0.1, 0.2], &[0], &[true]).is_err(), "altered flags must cover the gallery");
    // A long gallery (the vectorised path) gives what a short one does.
    let mut long = vec![0.0f32; 50_010];
    long[7] = 0.5;
    long[40_000] = 0.6;
    long[49_999] = 0.5;
    let flags: Vec<bool> = (0..long.len()).map(|c| c >= 40_000).collect();
    assert_eq!(query_outcome(&long, &[7], &flags).unwrap(), QueryOutcome { rank: 2, top1_altered: true });

    let outcomes = [0, 1, 4, 7, 12].map(|rank| QueryOutcome { rank, top1_altered: rank == 12 });
    let s = summarise(&outcomes).unwrap();
    assert_eq!((s.r1, s.r5, s.r10, s.rsms), (20.0, 60.0, 80.0, 20.0));
    assert_eq!(drop_rate(80.0, 60.0), Some(25.0));
    assert_eq!(drop_rate(0.0, 0.0), None);
    assert!(summarise(&[]).is_err());
}

#[test]
fn valse_probability_metrics() {
    let truth = Truth::new(1, 2, vec![true, false]).unwrap();
    let piece = |p: &str| -> Tags { vec![("piece".into(), vec![p.into()])].into() };
    let (a, b) = (piece("plurals"), piece("existence"));
    let mut scores = ScoreTensor::probabilities();
    scores.push(1, 2, &[0.9, 0.2]).unwrap(); // caption > .5, foil < .5, caption > foil
    scores.push(1, 2, &[0.7, 0.6]).unwrap(); // caption ok, foil judged matching
    scores.push(1, 2, &[0.5, 0.1]).unwrap(); // exactly 0.5 is not "matching"
    scores.push(1, 2, &[0.3, 0.4]).unwrap(); // nothing right
    let views = [
        ItemView { truth: &truth, tags: &a },
        ItemView { truth: &truth, tags: &a },
        ItemView { truth: &truth, tags: &b },
        ItemView { truth: &truth, tags: &b },
    ];
    let summary = Summary::of(pairwise::FAMILY).breakdown(&["piece"]).macro_over("piece");
    let report = evaluate(&summary, &scores, &views).unwrap();
    assert_eq!(report.metric("acc_r"), Some(75.0));
    assert_eq!(report.metric("p_c"), Some(50.0));
    // Foils below 0.5: 0.2, 0.1, 0.4 (not 0.6).
    assert_eq!(report.metric("p_f"), Some(75.0));
    assert_eq!(report.metric("acc"), Some(62.5));
    assert_eq!(report.metric("min"), Some(50.0));
    let plurals = report.group("piece", "plurals").unwrap();
    // plurals: p_c 100, p_f 50 → acc 75, min 50.
    assert!(
        plurals.metrics.contains(&("acc".to_string(), 75.0)) && plurals.metrics.contains(&("min".to_string(), 50.0))
    );
    // existence: p_c 0 (0.5 and 0.3), p_f 100 → min 0; macro min = (50 + 0) / 2.
    assert_eq!(report.metric("min_macro"), Some(25.0));

    // Similarities report acc_r only; probabilities outside [0, 1] are refused.
    let mut sims = ScoreTensor::new();
    sims.push(1, 2, &[3.0, -1.0]).unwrap();
    let report = evaluate(&summary, &sims, &views[..1]).unwrap();
    assert_eq!(report.metrics.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["acc_r", "acc_r_macro"]);
    assert!(ScoreTensor::probabilities().push(1, 2, &[1.5, 0.1]).is_err());
}

/// EqBen's Table 3 "Avg" by hand: 15 numbers, text/image/group over AG, YouCook2, GEBC,
/// Kubric (the mean of its three splits) and SD.
#[test]
fn eqbens_paper_average_combines_kubric_then_averages_fifteen_numbers() {
    use benchctl_scoring::metrics::SubsetAverage;
    let average = || {
        SubsetAverage::new(
            "paper_avg",
            "split",
            &[("ag", &["ag"]), ("yc", &["yc"]), ("gebc", &["gebc"]), ("kubric", &["k1", "k2", "k3"]), ("sd", &["sd"])],
            &["text_score", "image_score", "group_score"],
        )
    };
    let summary = Summary {
        subset_average: Some(average()),
        ..Summary::of(equivariance::FAMILY).breakdown(&["split"]).macro_over("split")
    };
    let truth = Truth::diagonal(2);
    let right = wino(0.9, 0.1, 0.2, 0.8); // text, image, group all hit
    let text_only = wino(0.9, 0.7, 0.2, 0.5); // text hit only
    let wrong = wino(0.1, 0.9, 0.8, 0.2); // all miss
                                          // (split, items): ag 2 of 2 right; yc 1 right of 2; gebc 1 text-only; k1 right, k2 wrong,
                                          // k3 text-only (one item each); sd 1 wrong.
    let layout: [(&str, &[&Vec<f32>]); 7] = [
        ("ag", &[&right, &right]),
        ("yc", &[&right, &wrong]),
        ("gebc", &[&text_only]),
        ("k1", &[&right]),
        ("k2", &[&wrong]),
        ("k3", &[&text_only]),
        ("sd", &[&wrong]),
    ];
    let mut scores = ScoreTensor::new();
    let mut tags: Vec<Tags> = Vec::new();
    for (split, items) in layout {
        for values in items {
            scores.push(2, 2, values).unwrap();
            tags.push(vec![("split".into(), vec![split.into()])].into());
        }
    }
    let views: Vec<ItemView<'_>> = tags.iter().map(|t| ItemView { truth: &truth, tags: t }).collect();
    let report = evaluate(&summary, &scores, &views).unwrap();
    // Per subset (text, image, group): ag 100/100/100, yc 50/50/50, gebc 100/0/0,
    // kubric (100+0+100)/3, (100+0+0)/3, (100+0+0)/3, sd 0/0/0.
    let kubric = [200.0 / 3.0, 100.0 / 3.0, 100.0 / 3.0];
    assert_eq!(report.metric("text_score_kubric"), Some(kubric[0]));
    assert_eq!(report.metric("image_score_kubric"), Some(kubric[1]));
    let fifteen = 100.0 + 100.0 + 100.0 + 50.0 * 3.0 + 100.0 + kubric.iter().sum::<f64>();
    let avg = report.metric("paper_avg").unwrap();
    assert!((avg - fifteen / 15.0).abs() < 1e-12, "{avg}");
    assert!((avg - 45.555_555_556).abs() < 1e-6); // 683.33 / 15
                                                  // Not the macro average over the seven splits, which weighs Kubric three times.
    assert_ne!(report.metric("group_score_macro"), Some(avg));
    assert!(report.metric("text_score_ag").is_none(), "single-split subsets are the split's own numbers");

    // The paper's CLIP ViT-B/32 row: its 15 numbers sum to 505.89, so Avg = 33.73.
    assert!((505.89f64 / 15.0 - 33.726).abs() < 1e-3);

    // Averages of averages: a subset may list other subsets, and the average is then over the
    // subsets no other lists (here `video` over AG, YouCook2 and Kubric's mean; `still` over
    // GEBC and SD), each metric's by hand from the per-split numbers above.
    let nested = SubsetAverage::new(
        "nested_avg",
        "split",
        &[("kubric", &["k1", "k2", "k3"]), ("video", &["ag", "yc", "kubric"]), ("still", &["gebc", "sd"])],
        &["text_score", "image_score", "group_score"],
    );
    assert_eq!(nested.tops().collect::<Vec<_>>(), [1, 2]);
    let summary_nested = Summary { subset_average: Some(nested), ..Summary::of(equivariance::FAMILY) };
    let report = evaluate(&summary_nested, &scores, &views).unwrap();
    let (ag, yc, gebc, sd) = ([100.0; 3], [50.0; 3], [100.0, 0.0, 0.0], [0.0; 3]);
    let video: Vec<f64> = (0..3).map(|m| (ag[m] + yc[m] + kubric[m]) / 3.0).collect();
    let still: Vec<f64> = (0..3).map(|m| (gebc[m] + sd[m]) / 2.0).collect();
    assert_eq!(report.metric("text_score_video"), Some(video[0]));
    assert_eq!(report.metric("image_score_still"), Some(still[1]));
    assert_eq!(report.metric("group_score_kubric"), Some(kubric[2]));
    let expected = (video.iter().sum::<f64>() + still.iter().sum::<f64>()) / 6.0;
    let got = report.metric("nested_avg").unwrap();
    assert!((got - expected).abs() < 1e-12, "{got} against {expected}");
    assert!((got - avg).abs() > 1.0, "not the flat average over five subsets");
    // Without Kubric's splits, `video` has no mean (not one over AG and YouCook2 alone), and
    // so neither has the average.
    let no_kubric: Vec<usize> = (0..views.len()).filter(|&i| !matches!(i, 5..=7)).collect();
    let mut fewer = ScoreTensor::new();
    no_kubric.iter().for_each(|&i| fewer.push(2, 2, scores.item(i).values()).unwrap());
    let fewer_views: Vec<ItemView<'_>> = no_kubric.iter().map(|&i| views[i]).collect();
    let report = evaluate(&summary_nested, &fewer, &fewer_views).unwrap();
    assert!(report.metric("text_score_video").is_none() && report.metric("nested_avg").is_none());
    assert!(report.metric("text_score_still").is_some());

    // A missing subset leaves the average out rather than averaging fewer numbers.
    let without_sd: Vec<ItemView<'_>> = views[..views.len() - 1].to_vec();
    let mut fewer = ScoreTensor::new();
    for i in 0..without_sd.len() {
        fewer.push(2, 2, scores.item(i).values()).unwrap();
    }
    let report = evaluate(&summary, &fewer, &without_sd).unwrap();
    assert!(report.metric("paper_avg").is_none());
    assert!(report.metric("group_score_kubric").is_some());
}

/// `--ties first` on choice items: the label wins when it is numpy's argmax, the first of the
/// top-scoring candidates; strict counts every tie for the top as a miss.
#[test]
fn ties_first_reproduces_argmax_on_choice_items() {
    use benchctl_scoring::metrics::{choice::argmax_matches, Ties};
    let label = |l: usize, scores: &[f64]| scores.iter().enumerate().map(|(c, s)| (*s, c == l)).collect::<Vec<_>>();
    assert!(argmax_matches(label(0, &[0.5, 0.5, 0.1]).into_iter()), "first of tied candidates");
    assert!(!argmax_matches(label(1, &[0.5, 0.5, 0.1]).into_iter()), "second of tied candidates");
    assert!(argmax_matches(label(2, &[0.1, 0.2, 0.3]).into_iter()));
    assert!(argmax_matches(label(0, &[f64::NAN, 0.2]).into_iter()), "numpy's argmax lands on the first NaN");
    assert!(!argmax_matches(label(1, &[f64::NAN, 0.2]).into_iter()));

    let i2t = Truth::new(1, 3, vec![true, false, false]).unwrap();
    let t2i = Truth::new(3, 1, vec![false, true, false]).unwrap();
    let none = Tags::new();
    let mut scores = ScoreTensor::new();
    scores.push(1, 3, &[0.5, 0.5, 0.1]).unwrap(); // label 0 tied with 1: argmax 0, a hit under first
    scores.push(3, 1, &[0.7, 0.7, 0.1]).unwrap(); // label 1 tied with 0: argmax 0, a miss either way
    scores.push(3, 1, &[0.2, 0.7, 0.7]).unwrap(); // label 1 tied with 2: argmax 1, a hit under first
    let views = [
        ItemView { truth: &i2t, tags: &none },
        ItemView { truth: &t2i, tags: &none },
        ItemView { truth: &t2i, tags: &none },
    ];
    let strict = evaluate(&Summary::of(choice::FAMILY), &scores, &views).unwrap();
    assert_eq!((strict.metric("i2t_accuracy"), strict.metric("t2i_accuracy")), (Some(0.0), Some(0.0)));
    let first = evaluate(&Summary { ties: Ties::First, ..Summary::of(choice::FAMILY) }, &scores, &views).unwrap();
    assert_eq!((first.metric("i2t_accuracy"), first.metric("t2i_accuracy")), (Some(100.0), Some(50.0)));

    // Families whose official code is strict refuse the rule rather than reward candidate order.
    let truth = Truth::diagonal(2);
    let mut wino_scores = ScoreTensor::new();
    wino_scores.push(2, 2, &wino(0.9, 0.1, 0.2, 0.8)).unwrap();
    let err = evaluate(
        &Summary { ties: Ties::First, ..Summary::of(group::FAMILY) },
        &wino_scores,
        &[ItemView { truth: &truth, tags: &none }],
    )
    .unwrap_err();
    assert!(err.to_string().contains("official code compares strictly"), "{err}");
}

/// Saturated probabilities tie in f32 (σ(20) = σ(30) = 1.0) and ties count against the
/// model; logits keep the margin. Thresholds (VALSE's p_c, p_f) still see the probability.
#[test]
fn logits_keep_the_margins_that_saturated_probabilities_lose() {
    use benchctl_scoring::ScoreKind;
    let logits = wino(30.0, 20.0, 25.0, 35.0); // every pair's probability rounds to 1.0
    let sigmoid = |x: f32| 1.0 / (1.0 + (-x).exp());
    assert!(logits.iter().all(|&x| sigmoid(x) == 1.0), "the probabilities saturate");
    assert_eq!(outcome(&logits), group::Outcome { text: true, image: true, group_match: Some(true) });
    let probabilities: Vec<f32> = logits.iter().map(|&x| sigmoid(x)).collect();
    assert_eq!(
        outcome(&probabilities),
        group::Outcome { text: false, image: false, group_match: Some(false) },
        "saturation manufactures ties"
    );

    // VALSE's thresholds on logits: σ(0) = 0.5 is neither (as the probability would be), σ(3) > 0.5.
    let truth = Truth::first_text_matches(2);
    let tags: Tags = vec![("piece".into(), vec!["p".into()])].into();
    let mut scores = ScoreTensor::of_kind(ScoreKind::Logit);
    scores.push(1, 2, &[3.0, -3.0]).unwrap(); // caption p > 0.5, foil p < 0.5
    scores.push(1, 2, &[0.0, -40.0]).unwrap(); // caption exactly 0.5: a miss for p_c
    scores.push(1, 2, &[40.0, 30.0]).unwrap(); // both saturate to 1.0: acc_r still a hit, p_f a miss
    let views = [ItemView { truth: &truth, tags: &tags }; 3];
    let summary = Summary::of(pairwise::FAMILY);
    let report = evaluate(&summary, &scores, &views).unwrap();
    assert_eq!(report.metric("acc_r"), Some(100.0));
    assert!((report.metric("p_c").unwrap() - 200.0 / 3.0).abs() < 1e-9);
    assert!((report.metric("p_f").unwrap() - 200.0 / 3.0).abs() < 1e-9);
    // Logits must be finite.
    assert!(ScoreTensor::of_kind(ScoreKind::Logit).push(1, 2, &[f32::INFINITY, 0.0]).is_err());
}

/// Scores made elsewhere keep their f64 precision through the metrics: `0.25 + 1e-9` is not a
/// tie with `0.25` (it would be in f32), 1e300 does not become infinity, infinity is refused.
#[test]
fn external_scores_keep_f64_precision() {
    let truth = Truth::diagonal(2);
    let none = Tags::new();
    let views = [ItemView { truth: &truth, tags: &none }; 2];
    let mut scores = ScoreTensor::new();
    // c0i0, c1i0, c0i1, c1i1: each image's caption wins by 1e-9; as f32 every pair ties.
    scores.push_exact(2, 2, &[0.25 + 1e-9, 0.25, 0.25, 0.25 + 1e-9]).unwrap();
    assert_eq!((0.25f64 + 1e-9) as f32, 0.25f32, "f32 would tie them");
    // Beyond f32's range: the margins stay, nothing becomes inf.
    scores.push_exact(2, 2, &[1e300, -1e300, -1e300, 2e300]).unwrap();
    let report = evaluate(&by(&[]), &scores, &views).unwrap();
    assert_eq!(report.metric("group_score"), Some(100.0));
    assert_eq!(scores.item(0).get(0, 0), 0.25 + 1e-9);
    assert!(ScoreTensor::new().push_exact(1, 2, &[f64::INFINITY, 0.0]).is_err());
    assert!(ScoreTensor::new().push_exact(1, 2, &[f64::NAN, 0.0]).is_err());
    // Model scores (f32) read back exactly as they were.
    let mut model = ScoreTensor::new();
    model.push(1, 2, &[0.1, 0.2]).unwrap();
    assert_eq!(model.item(0).get(0, 1), f64::from(0.2f32));
}

/// Each metric family declares its facts once, and they hold: ids are unique and found by
/// name, the headline base is a name the family reports, every name a family's summary
/// reports is one it declares (derived ones included), lower-is-better metrics are its own,
/// and only families that declare it take the first of tied candidates.
#[test]
fn every_family_reports_what_it_declares() {
    use benchctl_scoring::metrics::{higher_is_better, MetricFamily, Ties, FAMILIES};
    use benchctl_scoring::ScoreKind;
    let ids: std::collections::HashSet<&str> = FAMILIES.iter().map(|f| f.id()).collect();
    assert_eq!(ids.len(), FAMILIES.len());
    // Every shape the families read: 2×2 pairs, one image with two positives and a negative,
    // one image with one positive and two negatives, one text over three images.
    let shapes: Vec<(Truth, Vec<f32>)> = vec![
        (Truth::diagonal(2), vec![0.9, 0.1, 0.2, 0.8]),
        (Truth::new(1, 3, vec![true, true, false]).unwrap(), vec![0.7, 0.6, 0.1]),
        (Truth::new(1, 3, vec![true, false, false]).unwrap(), vec![0.2, 0.6, 0.1]),
        (Truth::new(3, 1, vec![true, false, false]).unwrap(), vec![0.9, 0.1, 0.3]),
    ];
    let tags = Tags::default();
    let mut scores = ScoreTensor::of_kind(ScoreKind::Logit);
    for (truth, values) in &shapes {
        scores.push(truth.images(), truth.texts(), values).unwrap();
    }
    let views: Vec<ItemView<'_>> = shapes.iter().map(|(truth, _)| ItemView { truth, tags: &tags }).collect();
    for &family in FAMILIES {
        assert_eq!(MetricFamily::find(family.id()), Some(family));
        let declared = family.reported_names();
        assert!(declared.contains(&family.headline_base().to_string()), "{family:?}: {declared:?}");
        let report = evaluate(&Summary::of(family), &scores, &views).unwrap();
        for (name, _) in &report.metrics {
            assert!(declared.contains(name), "{family:?} reports `{name}`, which it does not declare");
        }
        assert!(report.metric(family.headline_base()).is_some(), "{family:?}: no headline on items it reads");
        for name in &declared {
            assert_eq!(higher_is_better(name), family.higher_is_better(name), "{name}");
        }
        let first = evaluate(&Summary { ties: Ties::First, ..Summary::of(family) }, &scores, &views);
        assert_eq!(first.is_ok(), family.takes_first_of_ties(), "{family:?}");
    }
    assert!(!higher_is_better("eqsim_deviation_median") && !higher_is_better("eqsim_deviation_mean_macro"));
    assert!(!higher_is_better("clean_i2t_medr") && !higher_is_better("danger_i2t_rsms"));
    assert!(higher_is_better("group_score") && higher_is_better("i2t_r1_altered_mean"));
}

/// VisMin's VQA layout: candidates image 0, image 1, both together; texts the text question's
/// options A, B, then two image questions' First, Second. Each question asked of its
/// candidates only.
fn vismin_vqa_truth() -> Truth {
    let (k, l) = (3, 6);
    let mut matches = vec![false; k * l];
    let mut asked = vec![false; k * l];
    for (cell, right) in
        [(0, true), (1, false), (6, false), (7, true), (14, true), (15, false), (16, false), (17, true)]
    {
        asked[cell] = true;
        matches[cell] = right;
    }
    Truth::with_asked(k, l, matches, asked).unwrap()
}

/// The scores of a VisMin VQA item: each question's (first, second) option's log-probability,
/// NaN where not asked.
fn vismin_vqa_scores(scores: &mut ScoreTensor, text: [(f32, f32); 2], image: [(f32, f32); 2]) {
    let n = f32::NAN;
    #[rustfmt::skip]
    let values = [
        text[0].0, text[0].1, n, n, n, n,
        text[1].0, text[1].1, n, n, n, n,
        n, n, image[0].0, image[0].1, image[1].0, image[1].1,
    ];
    scores.push_asked(&vismin_vqa_truth(), &values).unwrap();
}

#[test]
fn answered_group_scores_the_text_task_on_single_images_and_the_image_task_on_both() {
    let truth = vismin_vqa_truth();
    let none = Tags::new();
    let views = [ItemView { truth: &truth, tags: &none }; 5];
    let mut scores = ScoreTensor::of_kind(benchctl_scoring::ScoreKind::LogProbability);
    // Right: A for image 0, B for image 1, First for caption 0, Second for caption 1.
    vismin_vqa_scores(&mut scores, [(-0.1, -2.0), (-2.0, -0.1)], [(-0.1, -2.0), (-2.0, -0.1)]); // all right
    vismin_vqa_scores(&mut scores, [(-0.1, -2.0), (-0.1, -2.0)], [(-0.1, -2.0), (-2.0, -0.1)]); // image 1 says A
    vismin_vqa_scores(&mut scores, [(-0.1, -2.0), (-2.0, -0.1)], [(-0.1, -2.0), (-0.1, -2.0)]); // caption 1: First
    vismin_vqa_scores(&mut scores, [(-0.5, -0.5), (-2.0, -0.1)], [(-0.1, -2.0), (-2.0, -0.1)]); // a tie is a miss
    vismin_vqa_scores(&mut scores, [(-2.0, -0.1), (-0.1, -2.0)], [(-2.0, -0.1), (-0.1, -2.0)]); // all wrong
    let values =
        benchctl_scoring::metrics::per_item_values(&Summary::of(answered_group::FAMILY), &scores, &views).unwrap();
    let got: Vec<Vec<Option<f64>>> = (0..5).map(|i| values.iter().map(|m| m.values[i]).collect()).collect();
    let (right, wrong) = (Some(1.0), Some(0.0));
    assert_eq!(got[0], [right, right, right]);
    assert_eq!(got[1], [wrong, right, wrong]);
    assert_eq!(got[2], [right, wrong, wrong]);
    assert_eq!(got[3], [wrong, right, wrong]);
    assert_eq!(got[4], [wrong, wrong, wrong]);
    let report = evaluate(&Summary::of(answered_group::FAMILY), &scores, &views).unwrap();
    assert_eq!((report.metric("text_score"), report.metric("group_score")), (Some(40.0), Some(20.0)));
    // The answers family reads the same layout over the cells asked: image 2 (both together)
    // is asked the image questions only.
    let answers = evaluate(&Summary::of(answers::FAMILY), &scores, &views).unwrap();
    assert_eq!(answers.metric("g_acc"), Some(20.0));

    // NaN only where a question is not asked, and there it must be.
    let mut bad = ScoreTensor::of_kind(benchctl_scoring::ScoreKind::LogProbability);
    let mut values = [-1.0f32; 18];
    let err = bad.push_asked(&truth, &values).unwrap_err().to_string();
    assert!(err.contains("position 2 is not asked, so it must be NaN"), "{err}");
    (2..6).chain(8..14).for_each(|c| values[c] = f32::NAN);
    values[15] = f32::NAN;
    let err = bad.push_asked(&truth, &values).unwrap_err().to_string();
    assert!(err.contains("position 15 is NaN"), "{err}");
    values[15] = -0.5;
    assert!(bad.push_asked(&truth, &values).is_ok());
}

/// Replies read by VisMin's rule score each option 0 (named) or the log of zero (not named):
/// under `shared` ties a reply naming both options is right, one naming neither wrong, as the
/// official `is_match_with_label` counts them; under `strict` both are misses.
#[test]
fn shared_ties_count_an_option_named_with_another_but_not_one_never_named() {
    let truth = vismin_vqa_truth();
    let none = Tags::new();
    let views = [ItemView { truth: &truth, tags: &none }; 4];
    let (named, not) = (0.0, benchctl_scoring::LOG_ZERO as f32);
    let mut scores = ScoreTensor::of_kind(benchctl_scoring::ScoreKind::LogProbability);
    vismin_vqa_scores(&mut scores, [(named, not), (not, named)], [(named, not), (not, named)]); // each names its own
    vismin_vqa_scores(&mut scores, [(named, named), (not, named)], [(named, not), (named, named)]); // some name both
    vismin_vqa_scores(&mut scores, [(not, not), (not, named)], [(named, not), (not, named)]); // image 0 names none
    vismin_vqa_scores(&mut scores, [(-0.7, -0.7), (-2.0, -0.1)], [(-0.1, -2.0), (-2.0, -0.1)]); // a log-prob tie
    let rows = |ties| {
        let summary = Summary { ties, ..Summary::of(answered_group::FAMILY) };
        let values = benchctl_scoring::metrics::per_item_values(&summary, &scores, &views).unwrap();
        (0..4).map(|i| values.iter().map(|m| m.values[i].unwrap()).collect::<Vec<f64>>()).collect::<Vec<_>>()
    };
    let shared = rows(Ties::Shared);
    assert_eq!(shared, [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [1.0, 1.0, 1.0]]);
    let strict = rows(Ties::Strict);
    assert_eq!(strict, [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]);
    // The answers family shares the rule; a family without answer options refuses it.
    let summary = Summary { ties: Ties::Shared, ..Summary::of(answers::FAMILY) };
    assert_eq!(evaluate(&summary, &scores, &views).unwrap().metric("g_acc"), Some(75.0));
    let winoground = Summary { ties: Ties::Shared, ..Summary::of(group::FAMILY) };
    let (pair, pair_tags) = (Truth::diagonal(2), Tags::new());
    let mut two = ScoreTensor::new();
    two.push(2, 2, &[1.0, 0.0, 0.0, 1.0]).unwrap();
    let err = evaluate(&winoground, &two, &[ItemView { truth: &pair, tags: &pair_tags }]).unwrap_err().to_string();
    assert!(err.contains("only questions with answer options share a tie"), "{err}");
}
