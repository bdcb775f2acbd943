//! Ranking a gallery from embeddings gives exactly the outcomes of the score rows: random
//! galleries of awkward sizes, exact ties, near-ties a quantised score cannot tell apart,
//! rows of very different magnitudes, and bad input; on every instruction-set tier this CPU
//! runs, bit for bit against the generic tier's score rows.

use benchctl_cpu::Tier;
use benchctl_scoring::gallery::{dot, dot_on, rank_gallery, rank_gallery_on};
use benchctl_scoring::metrics::retrieval::{query_outcome, query_outcome_with, QueryOutcome};
use benchctl_scoring::metrics::stats::SplitMix64;
use benchctl_scoring::metrics::Ties;

/// Reproducible draws from the crate's own generator.
struct Rng(SplitMix64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(SplitMix64::new(seed))
    }

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        (self.0.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    fn below(&mut self, n: usize) -> usize {
        self.0.below(n)
    }
}

fn normalised_rows(rng: &mut Rng, n: usize, dim: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(n * dim);
    for _ in 0..n {
        let row: Vec<f32> = (0..dim).map(|_| rng.unit()).collect();
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        out.extend(row.iter().map(|x| x / norm));
    }
    out
}

/// The outcomes from explicit score rows (the generic tier's `dot`): the definition the
/// gallery ranking must meet on every tier.
fn by_rows(
    queries: &[f32],
    gallery: &[f32],
    dim: usize,
    matches: &dyn Fn(usize) -> Vec<usize>,
    altered: &[bool],
    ties: Ties,
) -> Vec<QueryOutcome> {
    queries
        .chunks_exact(dim)
        .enumerate()
        .map(|(q, a)| {
            let scores: Vec<f32> = gallery.chunks_exact(dim).map(|g| dot_on(Tier::generic(), a, g)).collect();
            query_outcome_with(&scores, &matches(q), altered, ties).unwrap()
        })
        .collect()
}

fn check(
    queries: &[f32],
    gallery: &[f32],
    dim: usize,
    matches: &(dyn Fn(usize) -> Vec<usize> + Sync),
    altered: &[bool],
) -> Vec<QueryOutcome> {
    // Both tie rules: strict (returned) and first (RoCOCO's official argsort ranking).
    let mut outcomes = Vec::new();
    for ties in [Ties::Strict, Ties::First] {
        let fast = rank_gallery(queries, gallery, dim, matches, altered, ties).unwrap();
        let reference = by_rows(queries, gallery, dim, matches, altered, ties);
        assert_eq!(fast, reference, "{ties:?}, the current tier {:?}", Tier::current().isa());
        for tier in Tier::available() {
            let on_tier = rank_gallery_on(tier, queries, gallery, dim, matches, altered, ties).unwrap();
            assert_eq!(on_tier, reference, "{ties:?} on the {} tier", tier.isa());
        }
        outcomes.push(fast);
    }
    outcomes.swap_remove(0)
}

#[test]
fn random_galleries_of_awkward_sizes_rank_as_their_score_rows() {
    let mut rng = Rng::new(7);
    // The last case's 1,300 queries span three parallel tasks.
    for &(n_queries, n_gallery, dim) in
        &[(1, 1, 1), (13, 33, 24), (250, 97, 512), (37, 300, 37), (245, 64, 768), (1300, 45, 24)]
    {
        let queries = normalised_rows(&mut rng, n_queries, dim);
        let gallery = normalised_rows(&mut rng, n_gallery, dim);
        let matches: Vec<Vec<usize>> =
            (0..n_queries).map(|_| (0..1 + rng.below(5)).map(|_| rng.below(n_gallery)).collect()).collect();
        let altered: Vec<bool> = (0..n_gallery).map(|_| rng.below(3) == 0).collect();
        let outcomes = check(&queries, &gallery, dim, &|q| matches[q].clone(), &altered);
        check(&queries, &gallery, dim, &|q| matches[q].clone(), &[]);
        if n_gallery > 30 {
            // Not a trivial comparison: the ranks spread over the gallery.
            assert!(outcomes.iter().map(|o| o.rank).max().unwrap() > n_gallery / 4, "{outcomes:?}");
            assert!(outcomes.iter().any(|o| o.rank == 0 || o.top1_altered));
        }
    }
}

#[test]
fn exact_ties_count_against_the_model() {
    let mut rng = Rng::new(11);
    let dim = 64;
    let queries = normalised_rows(&mut rng, 20, dim);
    let mut gallery = normalised_rows(&mut rng, 40, dim);
    // Row 40 copies query 0's match (row 3); rows 41 and 42 copy row 5, one of them altered.
    let copy = |g: &mut Vec<f32>, r: usize| {
        let row = g[r * dim..(r + 1) * dim].to_vec();
        g.extend(row);
    };
    copy(&mut gallery, 3);
    copy(&mut gallery, 5);
    copy(&mut gallery, 5);
    let mut altered = vec![false; 43];
    altered[42] = true;
    let matches = |q: usize| vec![if q == 0 { 3 } else { 5 }];
    let outcomes = check(&queries, &gallery, dim, &matches, &altered);
    // Query 0 ties its match with row 40; the others tie theirs with rows 41 and 42.
    assert!(outcomes[0].rank >= 1);
    assert!(outcomes[1..].iter().all(|o| o.rank >= 2));
    // Row 5 itself as a query: its match and both copies score the same, the top, so its
    // top-1 counts as altered (a tie with the altered copy).
    let query: Vec<f32> = gallery[5 * dim..6 * dim].to_vec();
    let top = check(&query, &gallery, dim, &|_| vec![5], &altered);
    assert_eq!(top, vec![QueryOutcome { rank: 2, top1_altered: true }]);
}

#[test]
fn near_ties_below_the_quantisation_step_are_decided_by_the_fp32_scores() {
    let mut rng = Rng::new(13);
    let dim = 512;
    let queries = normalised_rows(&mut rng, 30, dim);
    let base = normalised_rows(&mut rng, 30, dim);
    let mut gallery = base.clone();
    // For each base row, copies nudged by one or a few ulps in a few components: their
    // scores differ from the original's in the last bits, far inside the quantisation error.
    for r in 0..30 {
        for (nudges, up) in [(1, true), (1, false), (3, true), (7, false)] {
            let mut row = base[r * dim..(r + 1) * dim].to_vec();
            for _ in 0..nudges {
                let i = rng.below(dim);
                row[i] = if up { row[i].next_up() } else { row[i].next_down() };
            }
            gallery.extend(row);
        }
    }
    let n = gallery.len() / dim;
    let altered: Vec<bool> = (0..n).map(|c| c >= 30 && c % 2 == 0).collect();
    // Each query's match is one base row; near-copies of it surround its score.
    let outcomes = check(&queries, &gallery, dim, &|q| vec![q % 30], &altered);
    // Queries that are themselves near a base row: the match and its nudged copies are the
    // top five, in an order only the fp32 scores know.
    let near: Vec<f32> = base.iter().take(10 * dim).map(|x| x * 0.999).collect();
    let top = check(&near, &gallery, dim, &|q| vec![q], &altered);
    assert!(top.iter().all(|o| o.rank <= 4), "{top:?}");
    assert!(top.iter().any(|o| o.rank > 0), "some nudged copy outscores its original: {top:?}");
    assert_eq!(outcomes.len(), 30);
}

#[test]
fn rows_of_very_different_magnitudes_and_sparse_rows_rank_exactly() {
    let mut rng = Rng::new(17);
    let dim = 48;
    let mut gallery = Vec::new();
    for r in 0..70 {
        let scale = [1e-3f32, 1.0, 1e3][r % 3];
        let row: Vec<f32> = match r % 5 {
            // One-hot, and all zeros: a scale with nothing to quantise.
            0 => (0..dim).map(|i| if i == r % dim { scale } else { 0.0 }).collect(),
            1 => vec![0.0; dim],
            _ => (0..dim).map(|_| rng.unit() * scale).collect(),
        };
        gallery.extend(row);
    }
    let queries: Vec<f32> = (0..25 * dim).map(|i| if i % 7 == 0 { 0.0 } else { rng.unit() * 10.0 }).collect();
    let altered: Vec<bool> = (0..70).map(|c| c % 4 == 1).collect();
    check(&queries, &gallery, dim, &|q| vec![q * 2, (q * 3 + 1) % 70], &altered);
}

#[test]
fn dot_adds_in_its_documented_order() {
    let mut rng = Rng::new(19);
    for dim in [1, 63, 64, 65, 512, 777] {
        let a: Vec<f32> = (0..dim).map(|_| rng.unit() * 1e3).collect();
        let b: Vec<f32> = (0..dim).map(|_| rng.unit() * 1e-3).collect();
        let mut lanes = [0f32; 64];
        for i in 0..dim {
            // The product rounded, then the sum: no fused multiply-add on any tier.
            let product = a[i] * b[i];
            lanes[i % 64] += product;
        }
        for width in [32, 16, 8, 4, 2, 1] {
            for l in 0..width {
                lanes[l] += lanes[l + width];
            }
        }
        assert_eq!(dot(&a, &b).to_bits(), lanes[0].to_bits(), "dimension {dim}");
        for tier in Tier::available() {
            assert_eq!(dot_on(tier, &a, &b).to_bits(), lanes[0].to_bits(), "dimension {dim}, {} tier", tier.isa());
        }
    }
}

#[test]
fn bad_embeddings_and_matches_are_named() {
    let good = vec![0.5f32; 8];
    let mut bad = good.clone();
    bad[5] = f32::NAN;
    let err = |r: Result<Vec<QueryOutcome>, benchctl_scoring::Error>| r.unwrap_err().to_string();
    assert!(err(rank_gallery(&good, &bad, 4, &|_| vec![0], &[], Ties::Strict)).contains("gallery embedding 1"));
    assert!(err(rank_gallery(&bad, &good, 4, &|_| vec![0], &[], Ties::Strict)).contains("query embedding 1"));
    assert!(err(rank_gallery(&good, &good, 4, &|_| vec![2], &[], Ties::Strict))
        .contains("matching candidate 2 is outside a gallery of 2"));
    assert!(
        err(rank_gallery(&good, &good, 4, &|_| vec![], &[], Ties::Strict)).contains("at least one matching candidate")
    );
    assert!(err(rank_gallery(&good, &good, 4, &|_| vec![0], &[true], Ties::Strict))
        .contains("1 altered flags for a gallery of 2"));
    assert!(err(rank_gallery(&good, &good, 3, &|_| vec![0], &[], Ties::Strict)).contains("rows of width 3"));
}

/// `--ties first` by hand: a stable descending sort puts tied candidates in index order, so a
/// non-match tied with the first best match counts against it only when it comes before it,
/// and the top-1 is the first candidate at the highest score.
#[test]
fn ties_first_orders_tied_candidates_by_index() {
    let first = |scores: &[f32], matches: &[usize], altered: &[bool]| {
        query_outcome_with(scores, matches, altered, Ties::First).unwrap()
    };
    // Candidates 1 and 3 tie with the match (2) at 0.7: only 1 comes before it.
    assert_eq!(first(&[0.1, 0.7, 0.7, 0.7, 0.9], &[2], &[]).rank, 2);
    assert_eq!(query_outcome(&[0.1, 0.7, 0.7, 0.7, 0.9], &[2], &[]).unwrap().rank, 3);
    // Two matches tied at the top with a non-match between them: the first match leads.
    assert_eq!(first(&[0.5, 0.9, 0.9, 0.9], &[1, 3], &[]).rank, 0);
    assert_eq!(query_outcome(&[0.5, 0.9, 0.9, 0.9], &[1, 3], &[]).unwrap().rank, 1);
    // The top-1 is altered only if the first candidate at the highest score is.
    let altered = [false, true, false];
    assert!(!first(&[0.9, 0.9, 0.1], &[2], &altered).top1_altered);
    assert!(first(&[0.1, 0.9, 0.9], &[0], &altered).top1_altered);
    assert!(
        query_outcome(&[0.9, 0.9, 0.1], &[2], &altered).unwrap().top1_altered,
        "strict: a tie goes to the altered one"
    );
}

/// Galleries built with exact duplicates (identical rows score identically) rank under
/// `first` as their score rows do, and differently from strict.
#[test]
fn ties_first_on_duplicated_gallery_rows_matches_the_rows() {
    let mut rng = Rng::new(11);
    let dim = 64;
    let base = normalised_rows(&mut rng, 40, dim);
    // Every row twice: candidates 2i and 2i + 1 are identical; queries are the base rows.
    let gallery: Vec<f32> = base.chunks_exact(dim).flat_map(|r| r.iter().chain(r.iter()).copied()).collect();
    let altered: Vec<bool> = (0..80).map(|c| c % 2 == 1).collect();
    // Query q matches the second copy of its row: the first copy ties with it and comes first.
    let strict = check(&base, &gallery, dim, &|q| vec![2 * q + 1], &altered);
    let first = rank_gallery(&base, &gallery, dim, &|q| vec![2 * q + 1], &altered, Ties::First).unwrap();
    assert!(
        strict.iter().zip(&first).all(|(s, f)| s.rank == f.rank),
        "the tied copy comes before the match either way"
    );
    // Matching the first copy: strict counts the tied second copy, first does not.
    let strict = check(&base, &gallery, dim, &|q| vec![2 * q], &altered);
    let first = rank_gallery(&base, &gallery, dim, &|q| vec![2 * q], &altered, Ties::First).unwrap();
    assert!(strict.iter().zip(&first).all(|(s, f)| s.rank == f.rank + 1));
    // Top-1: the original (even index) copy under first, the altered copy under strict.
    assert!(strict.iter().all(|o| o.top1_altered) && first.iter().all(|o| !o.top1_altered));
}
