//! GroupMatch (Zhu, Zhang, Tang, "Test-Time Matching", ICLR 2026,
//! <https://arxiv.org/abs/2510.07632>; code: <https://github.com/yinglunz/test-time-matching>):
//! a k × k group whose truth matches each image to one text is right when that matching's
//! total score is strictly larger than every other matching's of its images to its texts.
//! Winoground's group score asks more (each correct pair above its row and its column), which
//! random scores meet with probability (k − 1)!/(2k − 1)!, against 1/k! here.
//!
//! Arithmetic (docs/metrics.md, "GroupMatch"): a 2 × 2 group as the official code computes it
//! (`evaluate.py`): `((s00 + s11) − s01) − s10 > 0` in float32, the truth's two pairs first;
//! larger groups (the official code has only 2 × 2) by the paper's definition, each matching's
//! total summed in f64 in image order, every one of the k! matchings up to
//! [`ENUMERATED_UP_TO`] × [`ENUMERATED_UP_TO`], by assignment beyond. A tie is a miss, as
//! benchctl's rule and the official `> 0` have it.

use crate::{ScoreMatrix, Truth};

/// The largest group whose every matching is enumerated (8! = 40,320 matchings).
pub const ENUMERATED_UP_TO: usize = 8;

/// Whether the truth's matching strictly outscores every other; `None` where the item is not
/// a k × k group (k ≥ 2) with one matching text per image and one matching image per text.
pub fn group_match(scores: &ScoreMatrix<'_>, truth: &Truth) -> Option<bool> {
    let matching = one_to_one(truth)?;
    let k = matching.len();
    if k < 2 {
        return None;
    }
    if k == 2 {
        // The official 2 × 2 margin, in float32 and its order of operations.
        let s = |i: usize, t: usize| scores.get(i, t) as f32;
        let (right, wrong) = ((s(0, matching[0]), s(1, matching[1])), (s(0, matching[1]), s(1, matching[0])));
        return Some(((right.0 + right.1) - wrong.0) - wrong.1 > 0.0);
    }
    let total = |texts: &[usize]| texts.iter().enumerate().map(|(i, &t)| scores.get(i, t)).sum::<f64>();
    let truth_total = total(&matching);
    if k <= ENUMERATED_UP_TO {
        let mut beaten = true;
        for_each_permutation(k, |texts| {
            if texts != matching.as_slice() && total(texts) >= truth_total {
                beaten = false;
            }
        });
        return Some(beaten);
    }
    // Every other matching leaves some image's true text: the best one that leaves image i's
    // is an assignment with that pair forbidden.
    Some((0..k).all(|i| {
        let best = best_assignment(k, |image, text| {
            if image == i && text == matching[i] {
                f64::NEG_INFINITY
            } else {
                scores.get(image, text)
            }
        });
        total(&best) < truth_total
    }))
}

/// The text of each image where the truth is a one-to-one matching of a square item.
fn one_to_one(truth: &Truth) -> Option<Vec<usize>> {
    let k = truth.images();
    if truth.texts() != k {
        return None;
    }
    let mut matching = Vec::with_capacity(k);
    for i in 0..k {
        let mut texts = (0..k).filter(|&t| truth.is_match(i, t));
        let (Some(t), None) = (texts.next(), texts.next()) else { return None };
        matching.push(t);
    }
    let mut seen = vec![false; k];
    matching.iter().all(|&t| !std::mem::replace(&mut seen[t], true)).then_some(matching)
}

/// Calls `visit` with every permutation of `0..n` (Heap's algorithm).
fn for_each_permutation(n: usize, mut visit: impl FnMut(&[usize])) {
    let mut items: Vec<usize> = (0..n).collect();
    let mut counters = vec![0; n];
    visit(&items);
    let mut i = 1;
    while i < n {
        if counters[i] < i {
            let j = if i % 2 == 0 { 0 } else { counters[i] };
            items.swap(j, i);
            visit(&items);
            counters[i] += 1;
            i = 1;
        } else {
            counters[i] = 0;
            i += 1;
        }
    }
}

/// The text of each image in a matching of largest total `score` (the Hungarian method with
/// potentials, O(k³)); a `-inf` pair is never taken while another matching exists.
fn best_assignment(k: usize, score: impl Fn(usize, usize) -> f64) -> Vec<usize> {
    // Minimise cost = −score; a forbidden pair costs a finite amount above any real matching.
    let finite: Vec<f64> = (0..k * k).map(|c| score(c / k, c % k)).filter(|s| s.is_finite()).map(f64::abs).collect();
    let forbidden = 1.0 + 2.0 * k as f64 * finite.iter().cloned().fold(0.0, f64::max);
    let cost = |i: usize, j: usize| {
        let s = score(i, j);
        if s.is_finite() {
            -s
        } else {
            forbidden
        }
    };
    // Rows are images 1..=k, columns texts 1..=k; index 0 is the virtual start.
    let (mut u, mut v) = (vec![0.0; k + 1], vec![0.0; k + 1]);
    let (mut owner, mut way) = (vec![0usize; k + 1], vec![0usize; k + 1]);
    for row in 1..=k {
        owner[0] = row;
        let mut column = 0;
        let mut min_to = vec![f64::INFINITY; k + 1];
        let mut used = vec![false; k + 1];
        loop {
            used[column] = true;
            let (current, mut delta, mut next) = (owner[column], f64::INFINITY, 0);
            for j in 1..=k {
                if !used[j] {
                    let reduced = cost(current - 1, j - 1) - u[current] - v[j];
                    if reduced < min_to[j] {
                        min_to[j] = reduced;
                        way[j] = column;
                    }
                    if min_to[j] < delta {
                        delta = min_to[j];
                        next = j;
                    }
                }
            }
            for j in 0..=k {
                if used[j] {
                    u[owner[j]] += delta;
                    v[j] -= delta;
                } else {
                    min_to[j] -= delta;
                }
            }
            column = next;
            if owner[column] == 0 {
                break;
            }
        }
        loop {
            let previous = way[column];
            owner[column] = owner[previous];
            column = previous;
            if column == 0 {
                break;
            }
        }
    }
    let mut texts = vec![0; k];
    for j in 1..=k {
        texts[owner[j] - 1] = j - 1;
    }
    texts
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reproducible stream of scores (a linear congruential generator), some repeated so
    /// that matchings tie.
    fn scores(k: usize, seed: u64) -> Vec<f32> {
        let mut state = seed;
        (0..k * k)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let v = (state >> 40) as f32 / (1u64 << 24) as f32;
                if seed.is_multiple_of(3) {
                    (v * 3.0).floor()
                } else {
                    v
                }
            })
            .collect()
    }

    fn brute_best(k: usize, s: &[f32]) -> f64 {
        let mut best = f64::NEG_INFINITY;
        for_each_permutation(k, |p| best = best.max(p.iter().enumerate().map(|(i, &t)| f64::from(s[i * k + t])).sum()));
        best
    }

    #[test]
    fn heaps_algorithm_visits_every_permutation_once() {
        let mut seen = std::collections::HashSet::new();
        for_each_permutation(5, |p| assert!(seen.insert(p.to_vec())));
        assert_eq!(seen.len(), 120);
    }

    #[test]
    fn the_assignment_finds_the_best_matching() {
        for k in 1..=7 {
            for seed in 0..20 {
                let s = scores(k, seed);
                let best = best_assignment(k, |i, t| f64::from(s[i * k + t]));
                let total: f64 = best.iter().enumerate().map(|(i, &t)| f64::from(s[i * k + t])).sum();
                assert_eq!(total, brute_best(k, &s), "k = {k}, seed {seed}");
            }
        }
    }

    /// Past [`ENUMERATED_UP_TO`] the verdict comes from assignments: the same as enumerating
    /// all 9! matchings, ties included.
    #[test]
    fn large_groups_decide_by_assignment_as_enumeration_does() {
        let k = ENUMERATED_UP_TO + 1;
        let truth = Truth::diagonal(k);
        let mut verdicts = std::collections::HashSet::new();
        for seed in 0..6 {
            let mut s = scores(k, seed);
            // Lift the diagonal on some seeds so that both verdicts occur.
            if seed % 2 == 1 {
                (0..k).for_each(|i| s[i * k + i] += 2.0);
            }
            let matrix = ScoreMatrix::new(k, k, &s).unwrap();
            let truth_total: f64 = (0..k).map(|i| f64::from(s[i * k + i])).sum();
            let mut enumerated = true;
            for_each_permutation(k, |p| {
                let total: f64 = p.iter().enumerate().map(|(i, &t)| f64::from(s[i * k + t])).sum();
                if p.iter().enumerate().any(|(i, &t)| i != t) && total >= truth_total {
                    enumerated = false;
                }
            });
            assert_eq!(group_match(&matrix, &truth), Some(enumerated), "seed {seed}");
            verdicts.insert(enumerated);
        }
        assert_eq!(verdicts.len(), 2, "both verdicts are exercised");
    }
}
