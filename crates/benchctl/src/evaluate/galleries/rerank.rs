//! Ranking queries against a gallery: exactly from the embeddings, or (a fusion model) its
//! contrastive shortlist re-ranked pair by pair as BLIP's own retrieval evaluation does, with
//! the shortlist from the model's own contrastive head or a separate `--shortlist-model`.

use benchctl_models::registry::ScoreHead;
use benchctl_models::{DualEncoder, FusionEncoder, Model, Similarity};
use benchctl_scoring::metrics::retrieval::{self, QueryOutcome};
use benchctl_scoring::metrics::Ties;
use benchctl_suites::rococo::CaptionGallery;
use benchctl_suites::ImageSource;
use candle_core::{DType, Tensor};

use super::{compute, QUERY_BLOCK};
use crate::cache::EmbeddingCache;
use crate::encode::load_pixels;
use crate::model::{resolve_model, LoadedModel};
use crate::plan::{EvalPlan, ModelChoice};
use crate::session::Session;
use crate::{Error, ErrorKind, Result};

/// The raw inputs on one side of a retrieval, for a fusion model's re-ranking.
#[derive(Clone, Copy)]
pub(super) enum Side<'a> {
    Images(&'a [ImageSource]),
    Texts(&'a [&'a str]),
}

/// A fusion model re-scoring each query's top `k` candidates.
#[derive(Clone, Copy)]
pub(super) struct Rerank<'a> {
    pub(super) fusion: &'a dyn FusionEncoder,
    pub(super) k: usize,
    pub(super) batch: usize,
}

impl Rerank<'_> {
    /// `scores` (one query's similarities against the gallery) re-ranked as BLIP's
    /// evaluation does: the top `k` get the fusion model's re-rank score plus their
    /// similarity, the rest [`retrieval::OUTSIDE_SHORTLIST`] (`retrieval::rerank_row`).
    fn rerank(&self, scores: &[f32], query: usize, queries: Side, gallery: Side) -> Result<Vec<f32>> {
        let top = retrieval::shortlist(scores, self.k);
        let mut fused = vec![0f32; top.len()];
        let encode = |images: &[&ImageSource]| -> Result<Tensor> {
            Ok(self.fusion.encode_images(&load_pixels(self.fusion.preprocessor(), images, self.fusion.device())?)?)
        };
        // An image query is encoded once for its whole shortlist.
        let query_states = match queries {
            Side::Images(q) => Some(encode(&[&q[query]])?),
            Side::Texts(_) => None,
        };
        let prep = self.fusion.preprocessor();
        let per_chunk =
            if matches!(gallery, Side::Images(_)) { prep.images_per_batch(self.batch) } else { self.batch.max(1) };
        for (at, chunk) in top.chunks(per_chunk).enumerate() {
            let (states, texts): (Tensor, Vec<&str>) = match (queries, gallery, &query_states) {
                (Side::Images(_), Side::Texts(g), Some(one)) => {
                    let dims: Vec<usize> =
                        std::iter::once(chunk.len()).chain(one.dims()[1..].iter().copied()).collect();
                    let repeated =
                        one.broadcast_as(dims).and_then(|s| s.contiguous()).map_err(compute("repeat image states"))?;
                    (repeated, chunk.iter().map(|&c| g[c]).collect())
                }
                (Side::Texts(q), Side::Images(g), _) => {
                    let images: Vec<&ImageSource> = chunk.iter().map(|&c| &g[c]).collect();
                    (encode(&images)?, vec![q[query]; chunk.len()])
                }
                _ => {
                    return Err(Error::new(
                        ErrorKind::Compute,
                        "re-rank: a query and its gallery must be an image and texts",
                    ))
                }
            };
            let values = self
                .fusion
                .rerank_pairs(&states, &texts)?
                .to_dtype(DType::F32)
                .and_then(|s| s.to_vec1::<f32>())
                .map_err(compute("read re-ranked scores"))?;
            let start = at * per_chunk;
            fused[start..start + values.len()].copy_from_slice(&values);
        }
        Ok(retrieval::rerank_row(scores, &top, &fused))
    }
}

/// Ranks every query (rows of `queries`) against the whole `gallery`, re-ranking each
/// query's shortlist when `rerank` holds a fusion model and the raw inputs of both sides.
pub(super) fn rank_all(
    queries: &Tensor,
    gallery: &Tensor,
    matches: &(dyn Fn(usize) -> Vec<usize> + Sync),
    altered: &[bool],
    rerank: Option<(Rerank, Side, Side)>,
    ties: Ties,
) -> Result<Vec<QueryOutcome>> {
    let Some((r, q, g)) = rerank else {
        return rank_gallery(queries, gallery, matches, altered, ties);
    };
    let n = queries.dim(0).map_err(compute("size queries"))?;
    let width = gallery.dim(0).map_err(compute("size gallery"))?;
    let gallery = gallery.unsqueeze(0).map_err(compute("shape gallery"))?;
    let mut outcomes = Vec::with_capacity(n);
    for start in (0..n).step_by(QUERY_BLOCK) {
        let len = QUERY_BLOCK.min(n - start);
        let block = queries.narrow(0, start, len).and_then(|b| b.unsqueeze(0)).map_err(compute("slice queries"))?;
        // One flat buffer per block; rows are slices of it.
        let flat = Similarity::COSINE
            .rank_scores(&block, &gallery)?
            .flatten_all()
            .and_then(|s| s.to_dtype(DType::F32))
            .and_then(|s| s.to_vec1::<f32>())
            .map_err(compute("read gallery scores"))?;
        for (i, row) in flat.chunks(width).enumerate() {
            let row = r.rerank(row, start + i, q, g)?;
            outcomes.push(retrieval::query_outcome_with(&row, &matches(start + i), altered, ties)?);
        }
    }
    Ok(outcomes)
}

/// Ranks every query against the whole gallery by the embeddings' dot product, exactly and
/// without materialising the scores ([`benchctl_scoring::gallery`]): what RoCOCO scoring
/// does, exposed for `benchctl bench --part retrieval`.
pub fn rank_gallery(
    queries: &Tensor,
    gallery: &Tensor,
    matches: &(dyn Fn(usize) -> Vec<usize> + Sync),
    altered: &[bool],
    ties: Ties,
) -> Result<Vec<QueryOutcome>> {
    let dim = gallery.dim(1).map_err(compute("size gallery"))?;
    with_values(queries, |q| {
        with_values(gallery, |g| Ok(benchctl_scoring::gallery::rank_gallery(q, g, dim, matches, altered, ties)?))
    })
}

/// Runs `f` on the values of `t` as contiguous f32 on the CPU, borrowed from the tensor's
/// storage when it already is (a gallery of 50K embeddings is 100 MB not copied).
fn with_values<T>(t: &Tensor, f: impl FnOnce(&[f32]) -> Result<T>) -> Result<T> {
    let t = t
        .to_dtype(DType::F32)
        .and_then(|t| t.to_device(&candle_core::Device::Cpu))
        .and_then(|t| t.contiguous())
        .map_err(compute("read embeddings"))?;
    let (storage, layout) = t.storage_and_layout();
    match (&*storage, layout.contiguous_offsets()) {
        (candle_core::Storage::Cpu(cpu), Some((start, end))) => {
            f(&cpu.as_slice::<f32>().map_err(compute("read embeddings"))?[start..end])
        }
        _ => Err(Error::new(ErrorKind::Compute, "read embeddings: not a contiguous tensor in memory")),
    }
}

pub(super) fn rows(table: &Tensor, indices: &[usize]) -> Result<Tensor> {
    let idx: Vec<u32> = indices.iter().map(|&i| i as u32).collect();
    let idx = Tensor::from_vec(idx, indices.len(), table.device()).map_err(compute("index rows"))?;
    table.index_select(&idx, 0).map_err(compute("gather rows"))
}

/// Image-to-text: each test image against every caption of `gallery`; a hit is any of the
/// image's original captions.
pub(super) fn image_to_text(
    images: &Tensor,
    captions: &Tensor,
    gallery: &CaptionGallery,
    rerank: Option<(Rerank, Side, Side)>,
    ties: Ties,
) -> Result<Vec<QueryOutcome>> {
    let n = images.dim(0).map_err(compute("size images"))?;
    let mut originals = vec![Vec::new(); n];
    for (c, (&image, &is_altered)) in gallery.image_of.iter().zip(&gallery.altered).enumerate() {
        if !is_altered {
            originals[image].push(c);
        }
    }
    rank_all(images, captions, &|q| originals[q].clone(), &gallery.altered, rerank, ties)
}

/// A contrastive model that shortlists for a fusion or generative model (`--shortlist-model`),
/// loaded with its own embedding cache (its embeddings are its own, whatever model re-ranks).
pub(super) struct Shortlist {
    pub(super) model: LoadedModel,
    pub(super) cache: EmbeddingCache,
}

impl Shortlist {
    pub(super) fn open(plan: &EvalPlan, session: &Session) -> Result<Option<Self>> {
        let Some(source) = &plan.options.retrieval.shortlist else { return Ok(None) };
        let usage = |what: String| Error::new(ErrorKind::Usage, format!("use --shortlist-model: {what}"));
        if !session.model.is_fusion() {
            return Err(usage(
                "it serves a model that scores pairs jointly; this one ranks by its own embeddings".into(),
            ));
        }
        let choice = |head| ModelChoice {
            head,
            source: source.clone(),
            answer_rule: benchctl_models::vqascore::AnswerRule::Logprobs,
            // The scored model's image processor bounds, not the shortlist's.
            processor_pixels: None,
            ..plan.model.clone()
        };
        // The model's contrastive head: its default, or ITC for BLIP and FIBER.
        let mut resolved = resolve_model(&choice(None))?;
        if resolved.is_fusion() {
            resolved = resolve_model(&choice(Some(ScoreHead::Itc)))
                .map_err(|e| usage(format!("it has no contrastive head ({e})")))?;
        }
        let mut cache = resolved.cache(!plan.options.use_cache)?;
        let model = resolved.load(&mut cache)?;
        Ok(Some(Self { model, cache }))
    }
}

pub(super) fn dual_of(model: &Model) -> Option<&dyn DualEncoder> {
    match model {
        Model::Dual(encoder) => Some(encoder.as_ref()),
        Model::Fusion(_) => None,
    }
}
