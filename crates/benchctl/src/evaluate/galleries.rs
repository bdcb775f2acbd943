//! `benchctl eval --suite rococo`: retrieval against whole galleries.
//!
//! Each unique image and caption is encoded once; every query of each gallery is reduced to
//! its outcome (rank of its best match, whether its top-1 is altered) by
//! `benchctl_scoring::gallery`: blocked integer products of the quantised embeddings, with
//! the fp32 dot product deciding every candidate the quantisation error could misplace, so
//! the outcomes are those of the fp32 scores (`benchctl_scoring::metrics::retrieval`). The
//! dump holds one line per query and gallery, from which every metric can be recomputed.
//!
//! A fusion model (BLIP ITM) ranks as BLIP's own retrieval evaluation does: its contrastive
//! head scores the whole gallery, the top `--rerank-k` (default 128) candidates of each
//! query score the ITM head's class-1 logit plus their ITC cosine, and everything outside
//! that shortlist scores −100, below it (`benchctl_scoring::metrics::retrieval::rerank_row`).

use std::path::Path;
use std::time::Instant;

use benchctl_base::spill::SpillVec;
use benchctl_scoring::metrics::retrieval::{self, QueryOutcome, RetrievalScores};
use benchctl_scoring::metrics::Ties;
use benchctl_scoring::Report;
use benchctl_suites::image::AlteredSource;
use benchctl_suites::rococo::{self, altered, CaptionGallery};
use benchctl_suites::ImageSource;
use candle_core::{DType, Tensor};
use serde_json::json;

use crate::cache::{text_keys, EmbeddingCache, Keys};
use crate::encode::load_pixels;
use crate::encode::{encode_images, encode_texts, Encoder};
use crate::inputs::{self, unique_by};
use crate::model::{resolve_model, LoadedModel, Needed};
use crate::plan::{AlteredImages, CaptionNormalisation, EvalPlan, ModelChoice};
use crate::record::{Evaluation, Outcome, Scored};
use crate::results::{self, SuiteRecord};
use crate::session::Session;
use crate::{Error, ErrorKind, Result};
use benchctl_models::registry::{Architecture, ScoreHead};
use benchctl_models::{DualEncoder, FusionEncoder, Model, Similarity};

/// Queries per block of the gallery matrix product when a fusion model re-ranks (a block of
/// scores against 50K captions is 100 MB).
const QUERY_BLOCK: usize = 512;

fn compute(what: &str) -> impl Fn(candle_core::Error) -> Error + '_ {
    move |e| Error::new(ErrorKind::Compute, format!("{what}: {e}"))
}

/// The raw inputs on one side of a retrieval, for a fusion model's re-ranking.
#[derive(Clone, Copy)]
enum Side<'a> {
    Images(&'a [ImageSource]),
    Texts(&'a [&'a str]),
}

/// A fusion model re-scoring each query's top `k` candidates.
#[derive(Clone, Copy)]
struct Rerank<'a> {
    fusion: &'a dyn FusionEncoder,
    k: usize,
    batch: usize,
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
fn rank_all(
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

/// One gallery's outcomes, named for the report and dump.
struct GalleryResult {
    name: String,
    direction: &'static str,
    /// How many candidates each query was ranked against (a rank is always below it).
    candidates: usize,
    /// By query (spilled: a dump given to `score` can hold any number).
    outcomes: SpillVec<QueryOutcome>,
}

fn rows(table: &Tensor, indices: &[usize]) -> Result<Tensor> {
    let idx: Vec<u32> = indices.iter().map(|&i| i as u32).collect();
    let idx = Tensor::from_vec(idx, indices.len(), table.device()).map_err(compute("index rows"))?;
    table.index_select(&idx, 0).map_err(compute("gather rows"))
}

/// Image-to-text: each test image against every caption of `gallery`; a hit is any of the
/// image's original captions.
fn image_to_text(
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

/// Runs the RoCOCO evaluation.
pub fn run(plan: &EvalPlan, ties: Ties) -> Result<Evaluation> {
    let options = &plan.options.retrieval;
    let mut data = rococo::load(&plan.data_dir)?;
    let missing: Vec<String> =
        data.images.iter().filter(|p| !p.is_file()).take(5).map(|p| p.display().to_string()).collect();
    if !missing.is_empty() {
        return Err(Error::new(ErrorKind::Data, format!("find rococo image(s): {}", missing.join(", "))));
    }
    let mut session = Session::open(plan)?;
    if session.model.endpoint().is_some() {
        return Err(Error::new(
            ErrorKind::Usage,
            "use --endpoint on rococo: its retrieval re-ranks a contrastive shortlist, which a scoring server does not give",
        ));
    }
    let mut shortlist = Shortlist::open(plan, &session)?;
    let caption_normalisation =
        normalise_captions(&mut data, options.caption_normalisation, session.model.architecture());

    // Every input and its cache key: each caption of every gallery once, the test images, and
    // each altered gallery's images.
    let galleries: Vec<&CaptionGallery> = std::iter::once(&data.clean).chain(&data.caption_sets).collect();
    let (slots, unique_texts) = unique_by(galleries.iter().flat_map(|g| g.captions.iter().map(String::as_str)));
    let text_keys = text_keys(&unique_texts);
    let sources: Vec<ImageSource> = data.images.iter().cloned().map(ImageSource::File).collect();
    let source_keys = Keys::from(inputs::image_keys(&session, &sources[..])?);
    let altered = AlteredGalleries::of(&session, &data)?;
    inputs::remember_file_keys(&mut session);
    let image_fingerprint = results::image_fingerprint(
        source_keys.wanted(None).chain(altered.galleries.iter().flat_map(|(_, _, keys)| keys.wanted(None))),
    );
    session.run.counts.unique_images = sources.len();
    session.run.counts.unique_texts = unique_texts.len();
    inputs::check_captions(&mut session, &unique_texts)?;
    let mut needed: Vec<Needed> = vec![(&text_keys, None), (&source_keys, None)];
    needed.extend(altered.galleries.iter().map(|(_, _, keys)| (keys, None)));
    // A re-run whose embeddings are all cached ranks without reading the weights; a fusion
    // model re-ranks, so it always needs them.
    let loaded = if session.model.is_fusion() {
        Some(session.model.load(&mut session.cache)?)
    } else {
        session.model.load_unless_cached(&mut session.cache, &needed)?.0
    };
    session.run.timings.load_model_s = loaded.as_ref().map_or(0.0, |l| l.load_s);
    let inputs = Inputs {
        galleries: &galleries,
        slots: &slots,
        texts: &unique_texts,
        text_keys: &text_keys,
        sources: &sources,
        source_keys: &source_keys,
    };
    let shortlist_id = shortlist.as_ref().map(|s| s.model.record.id.clone());
    let model = loaded.as_ref().map(|l| &l.model);
    let results = rank_every_gallery(&mut session, model, shortlist.as_mut(), &inputs, &data, altered.galleries, ties)?;
    let report = report(&results)?;
    let dump = results
        .iter()
        .flat_map(|r| {
            r.outcomes.iter().enumerate().map(|(q, o)| {
                json!({"gallery": r.name, "direction": r.direction, "query": q, "candidates": r.candidates, "rank": o.rank, "top1_altered": o.top1_altered})
                .to_string()
            })
        })
        .collect();
    let suite = SuiteRecord {
        id: "rococo".into(),
        data_dir: plan.data_dir.display().to_string(),
        items: sources.len(),
        ties: ties.name().into(),
        incomplete: Vec::new(),
        altered_images: Some(altered_record(&altered.from_release, &altered.generated, &options.seeds)),
        caption_normalisation,
        manifest: None,
        shortlist: shortlist_id,
    };
    let data_fingerprint = fingerprint(&data, &plan.data_dir);
    // Retrieval metrics are over queries against shared galleries; no item bootstrap.
    let scored = Scored { suite, report, intervals: Vec::new(), data_fingerprint, image_fingerprint };
    Ok(Evaluation { run: session.run.finish(scored), outcome: Outcome::Queries { dump } })
}

/// A contrastive model that shortlists for a fusion or generative model (`--shortlist-model`),
/// loaded with its own embedding cache (its embeddings are its own, whatever model re-ranks).
struct Shortlist {
    model: LoadedModel,
    cache: EmbeddingCache,
}

impl Shortlist {
    fn open(plan: &EvalPlan, session: &Session) -> Result<Option<Self>> {
        let Some(source) = &plan.options.retrieval.shortlist else { return Ok(None) };
        let usage = |what: String| Error::new(ErrorKind::Usage, format!("use --shortlist-model: {what}"));
        if !session.model.is_fusion() {
            return Err(usage(
                "it serves a model that scores pairs jointly; this one ranks by its own embeddings".into(),
            ));
        }
        let choice =
            |head| ModelChoice { source: source.clone(), head, device: plan.model.device, dtype: plan.model.dtype };
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

fn dual_of(model: &Model) -> Option<&dyn DualEncoder> {
    match model {
        Model::Dual(encoder) => Some(encoder.as_ref()),
        Model::Fusion(_) => None,
    }
}

/// The altered image galleries a run ranks against: each method × λ from its release folder
/// (`mix_images.py`) or generated for each seed, with their images' keys.
struct AlteredGalleries<'k> {
    /// `(name, images, keys)`: names `<method><λ/10>_seed<seed>` (`_seedrelease` for a folder).
    galleries: Vec<(String, Vec<ImageSource>, Keys<'k>)>,
    from_release: Vec<String>,
    generated: Vec<String>,
}

impl AlteredGalleries<'_> {
    fn of(session: &Session, data: &rococo::Rococo) -> Result<Self> {
        let options = &session.plan.options.retrieval;
        let mut out = AlteredGalleries { galleries: Vec::new(), from_release: Vec::new(), generated: Vec::new() };
        let n = data.images.len();
        for &method in &options.methods {
            for &lambda in &options.lambdas {
                let folder = rococo::release_folder(&session.plan.data_dir.join("images"), method, lambda);
                if options.altered == AlteredImages::Release
                    || (options.altered == AlteredImages::Auto && folder.is_dir())
                {
                    let altered_sources = release_gallery(data, &folder)?;
                    let keys = Keys::from(inputs::image_keys(session, &altered_sources[..])?);
                    out.galleries.push((
                        format!("{}{}_seedrelease", method.name(), lambda / 10),
                        altered_sources,
                        keys,
                    ));
                    out.from_release
                        .push(folder.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default());
                    continue;
                }
                out.generated.push(format!("{}_{}", method.name(), rococo::python_float(lambda)));
                for &seed in &options.seeds {
                    let altered_sources: Vec<ImageSource> = altered::gallery(n, method, lambda, seed)?
                        .iter()
                        .map(|spec| {
                            ImageSource::Altered(Box::new(AlteredSource {
                                base: data.images[spec.base].clone(),
                                other: data.images[spec.other].clone(),
                                spec: *spec,
                            }))
                        })
                        .collect();
                    let keys = Keys::from(inputs::image_keys(session, &altered_sources[..])?);
                    out.galleries.push((format!("{}{}_seed{seed}", method.name(), lambda / 10), altered_sources, keys));
                }
            }
        }
        Ok(out)
    }
}

/// The unique inputs of a RoCOCO run: every gallery's captions (their slots into the unique
/// texts) and the test images, with their keys.
struct Inputs<'a> {
    galleries: &'a [&'a CaptionGallery],
    slots: &'a [usize],
    texts: &'a [&'a str],
    text_keys: &'a Keys<'a>,
    sources: &'a [ImageSource],
    source_keys: &'a Keys<'a>,
}

/// Encodes every input through the cache and ranks every query of every gallery: image to
/// text against each caption gallery, text to image against the test images, then against
/// them plus each altered gallery.
fn rank_every_gallery(
    session: &mut Session,
    model: Option<&Model>,
    shortlist: Option<&mut Shortlist>,
    inputs: &Inputs,
    data: &rococo::Rococo,
    altered_galleries: Vec<(String, Vec<ImageSource>, Keys)>,
    ties: Ties,
) -> Result<Vec<GalleryResult>> {
    // A separate shortlist model brings its own embedding cache.
    let (separate, shortlist_cache) = match shortlist {
        Some(Shortlist { model, cache }) => (dual_of(&model.model), Some(cache)),
        None => (None, None),
    };
    let (model, reranker): (Option<&dyn DualEncoder>, Option<Rerank>) = match model {
        None => (None, None),
        Some(Model::Dual(e)) => (Some(e.as_ref()), None),
        Some(Model::Fusion(f)) => {
            let shortlister = separate.or_else(|| f.shortlister()).ok_or_else(|| {
                Error::new(
                    ErrorKind::Usage,
                    "rank a retrieval gallery with this model: it has no contrastive head to shortlist with; pass --shortlist-model (a contrastive model, e.g. clip-vit-b32)",
                )
            })?;
            let k = session.plan.options.retrieval.rerank_k;
            (Some(shortlister), Some(Rerank { fusion: f.as_ref(), k, batch: session.batch() }))
        }
    };
    let batch = session.batch();
    let Session { model: resolved, cache, run, .. } = session;
    let cache = match shortlist_cache {
        Some(own) => own,
        None => cache,
    };
    let (counts, timings) = (&mut run.counts, &mut run.timings);
    let encoder = Encoder { model, device: resolved.device() };
    let n = inputs.sources.len();

    let t = Instant::now();
    let text_table = encode_texts(encoder, inputs.texts, inputs.text_keys, batch, counts, cache)?;
    timings.encode_texts_s = t.elapsed().as_secs_f64();
    let mut gallery_rows = Vec::new();
    let mut offset = 0;
    for g in inputs.galleries {
        gallery_rows.push(rows(&text_table, &inputs.slots[offset..offset + g.captions.len()])?);
        offset += g.captions.len();
    }
    let t = Instant::now();
    let image_table = encode_images(encoder, inputs.sources, inputs.source_keys, batch, counts, cache)?;
    timings.encode_images_s = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let mut results: Vec<GalleryResult> = Vec::new();
    let caption_texts: Vec<Vec<&str>> =
        inputs.galleries.iter().map(|g| g.captions.iter().map(String::as_str).collect()).collect();
    for ((g, captions), texts) in inputs.galleries.iter().zip(&gallery_rows).zip(&caption_texts) {
        let rerank = reranker.map(|r| (r, Side::Images(inputs.sources), Side::Texts(texts)));
        let outcomes = image_to_text(&image_table, captions, g, rerank, ties)?;
        let candidates = g.captions.len();
        results.push(GalleryResult { name: g.name.clone(), direction: "i2t", candidates, outcomes: outcomes.into() });
    }
    // Text-to-image: the original captions against the test images, then against the test
    // images plus each altered gallery.
    let clean_captions = &gallery_rows[0];
    let image_of = &data.clean.image_of;
    let rerank = reranker.map(|r| (r, Side::Texts(&caption_texts[0]), Side::Images(inputs.sources)));
    let outcomes = rank_all(clean_captions, &image_table, &|q| vec![image_of[q]], &[], rerank, ties)?;
    results.push(GalleryResult { name: "clean".into(), direction: "t2i", candidates: n, outcomes: outcomes.into() });
    timings.score_s = t.elapsed().as_secs_f64();
    for (name, altered_sources, keys) in altered_galleries {
        let t = Instant::now();
        let altered_table = encode_images(encoder, &altered_sources[..], &keys, batch, counts, cache)?;
        timings.encode_images_s += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let gallery = Tensor::cat(&[&image_table, &altered_table], 0).map_err(compute("join galleries"))?;
        let altered_flags: Vec<bool> = (0..2 * n).map(|c| c >= n).collect();
        let both: Vec<ImageSource> = inputs.sources.iter().chain(&altered_sources).cloned().collect();
        let rerank = reranker.map(|r| (r, Side::Texts(&caption_texts[0]), Side::Images(&both)));
        let outcomes = rank_all(clean_captions, &gallery, &|q| vec![image_of[q]], &altered_flags, rerank, ties)?;
        results.push(GalleryResult { name, direction: "t2i", candidates: 2 * n, outcomes: outcomes.into() });
        timings.score_s += t.elapsed().as_secs_f64();
    }
    Ok(results)
}

/// BLIP's `pre_caption` on every caption when asked, or (`auto`) when a BLIP model is
/// evaluated; returns what was applied, for the run record.
fn normalise_captions(
    data: &mut rococo::Rococo,
    asked: CaptionNormalisation,
    architecture: Option<Architecture>,
) -> Option<String> {
    let apply = match asked {
        CaptionNormalisation::Blip => true,
        CaptionNormalisation::None => false,
        CaptionNormalisation::Auto => architecture.is_some_and(|a| a.spec().pre_captions),
    };
    if !apply {
        return None;
    }
    for gallery in std::iter::once(&mut data.clean).chain(&mut data.caption_sets) {
        for caption in &mut gallery.captions {
            *caption = rococo::pre_caption(caption, rococo::BLIP_MAX_WORDS);
        }
    }
    Some(format!("blip (pre_caption, {} words)", rococo::BLIP_MAX_WORDS))
}

/// The altered gallery `mix_images.py` wrote into `folder`: one image per test image, under
/// its file name. Every one must be there.
fn release_gallery(data: &rococo::Rococo, folder: &Path) -> Result<Vec<ImageSource>> {
    let sources: Vec<ImageSource> =
        data.images.iter().map(|image| ImageSource::File(folder.join(image.file_name().unwrap_or_default()))).collect();
    let missing: Vec<String> =
        sources.iter().filter(|s| !s.path().is_file()).take(3).map(|s| s.path().display().to_string()).collect();
    if !missing.is_empty() {
        let count = sources.iter().filter(|s| !s.path().is_file()).count();
        return Err(Error::new(
            ErrorKind::Data,
            format!(
                "find the altered images of {} ({count} of {} missing, e.g. {}): make them with RoCOCO's mix_images.py, or pass --rococo-altered generate",
                folder.display(),
                sources.len(),
                missing.join(", ")
            ),
        ));
    }
    Ok(sources)
}

/// Where a run's altered images came from, in words for the run record.
fn altered_record(from_release: &[String], generated: &[String], seeds: &[u64]) -> String {
    let mut parts = Vec::new();
    if !from_release.is_empty() {
        parts.push(format!("release folders {} (mix_images.py)", from_release.join(", ")));
    }
    if !generated.is_empty() {
        let seeds: Vec<String> = seeds.iter().map(u64::to_string).collect();
        parts.push(format!("generated by benchctl for {} (seeds {})", generated.join(", "), seeds.join(", ")));
    }
    parts.join("; ")
}

/// SHA-256 (hex) of the RoCOCO data as loaded: image paths (relative to the data
/// directory), then every gallery's name and captions with their image and altered flags.
fn fingerprint(data: &rococo::Rococo, data_dir: &Path) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for path in &data.images {
        hash.update(path.strip_prefix(data_dir).unwrap_or(path).to_string_lossy().as_bytes());
        hash.update([0]);
    }
    for g in std::iter::once(&data.clean).chain(&data.caption_sets) {
        hash.update(g.name.as_bytes());
        for ((caption, image), altered) in g.captions.iter().zip(&g.image_of).zip(&g.altered) {
            hash.update(caption.as_bytes());
            hash.update((*image as u64).to_le_bytes());
            hash.update([*altered as u8]);
        }
    }
    crate::cache::hex(&hash.finalize())
}

/// The RoCOCO report: R@k (and RSMS, drop rate) per gallery, altered image galleries
/// averaged over seeds, plus the means over the altered galleries of each direction.
fn report(results: &[GalleryResult]) -> Result<Report> {
    let find = |name: &str, direction: &str| results.iter().find(|r| r.name == name && r.direction == direction);
    let summary = |r: &GalleryResult| retrieval::summarise(&r.outcomes).map_err(Error::from);
    let mut metrics: Vec<(String, f64)> = Vec::new();
    fn push(metrics: &mut Vec<(String, f64)>, prefix: &str, s: &RetrievalScores, clean_r1: Option<f64>) {
        metrics.push((format!("{prefix}_r1"), s.r1));
        metrics.push((format!("{prefix}_r5"), s.r5));
        metrics.push((format!("{prefix}_r10"), s.r10));
        metrics.push((format!("{prefix}_r_mean"), s.r_mean));
        metrics.push((format!("{prefix}_medr"), s.medr));
        if let Some(clean) = clean_r1 {
            metrics.push((format!("{prefix}_rsms"), s.rsms));
            if let Some(drop) = retrieval::drop_rate(clean, s.r1) {
                metrics.push((format!("{prefix}_drop"), drop));
            }
        }
    }
    let clean = |direction: &str| {
        find("clean", direction)
            .ok_or_else(|| {
                Error::new(ErrorKind::Compute, format!("report rococo: the clean {direction} gallery was not scored"))
            })
            .and_then(summary)
    };
    let (clean_i2t, clean_t2i) = (clean("i2t")?, clean("t2i")?);
    push(&mut metrics, "clean_i2t", &clean_i2t, None);
    push(&mut metrics, "clean_t2i", &clean_t2i, None);
    let rsum = clean_i2t.r1 + clean_i2t.r5 + clean_i2t.r10 + clean_t2i.r1 + clean_t2i.r5 + clean_t2i.r10;
    metrics.push(("clean_rsum".into(), rsum));
    let mut i2t_r1 = Vec::new();
    for set in rococo::CAPTION_SETS {
        if let Some(r) = find(set, "i2t") {
            let s = summary(r)?;
            i2t_r1.push(s.r1);
            push(&mut metrics, &format!("{set}_i2t"), &s, Some(clean_i2t.r1));
        }
    }
    // Altered image galleries `<method><λ/10>_seed<s>`, averaged over seeds, in the order
    // they were scored (methods, then λ, then seeds, as the flags list them).
    let mut t2i_r1 = Vec::new();
    let mut groups: Vec<(String, Vec<&GalleryResult>)> = Vec::new();
    for r in results.iter().filter(|r| r.direction == "t2i" && r.name != "clean") {
        let group = r.name.rsplit_once("_seed").map(|(g, _)| g).ok_or_else(|| {
            Error::new(ErrorKind::Data, format!("report rococo: gallery `{}` is not <method><λ>_seed<seed>", r.name))
        })?;
        match groups.iter_mut().find(|(g, _)| g == group) {
            Some((_, members)) => members.push(r),
            None => groups.push((group.to_string(), vec![r])),
        }
    }
    for (group, members) in &groups {
        let per_seed = members.iter().map(|r| summary(r)).collect::<Result<Vec<_>>>()?;
        let k = per_seed.len() as f64;
        let mean = |f: fn(&RetrievalScores) -> f64| per_seed.iter().map(f).sum::<f64>() / k;
        let s = RetrievalScores {
            r1: mean(|s| s.r1),
            r5: mean(|s| s.r5),
            r10: mean(|s| s.r10),
            r_mean: mean(|s| s.r_mean),
            medr: mean(|s| s.medr),
            rsms: mean(|s| s.rsms),
        };
        t2i_r1.push(s.r1);
        push(&mut metrics, &format!("{group}_t2i"), &s, Some(clean_t2i.r1));
    }
    for (name, values) in [("i2t_r1_altered_mean", &i2t_r1), ("t2i_r1_altered_mean", &t2i_r1)] {
        if !values.is_empty() {
            metrics.push((name.to_string(), values.iter().sum::<f64>() / values.len() as f64));
        }
    }
    let items = find("clean", "i2t").map(|r| r.outcomes.len()).unwrap_or(0);
    Ok(Report { items, metrics, breakdowns: Vec::new() })
}

/// The RoCOCO report recomputed from a score dump of `eval --suite rococo` (one line per
/// query and gallery: `gallery`, `direction`, `query`, `rank`, `top1_altered`), exactly as
/// `eval` computed it. Each gallery's queries must be `0, 1, …` in order.
pub fn report_from_dump(path: &Path) -> Result<Report> {
    let mut results: Vec<GalleryResult> = Vec::new();
    for line in results::json_lines(path, "the file given to `--scores`", ErrorKind::Data)? {
        let (at, v) = line?;
        let bad = |what: &str| Error::new(ErrorKind::Data, format!("parse {at}: {what}"));
        let name = v.get("gallery").and_then(|g| g.as_str()).ok_or_else(|| bad("missing string `gallery`"))?;
        let direction = match v.get("direction").and_then(|d| d.as_str()) {
            Some("i2t") => "i2t",
            Some("t2i") => "t2i",
            _ => return Err(bad("`direction` must be \"i2t\" or \"t2i\"")),
        };
        let query = v.get("query").and_then(|q| q.as_u64()).ok_or_else(|| bad("missing number `query`"))? as usize;
        let rank = v.get("rank").and_then(|r| r.as_u64()).ok_or_else(|| bad("missing number `rank`"))? as usize;
        let top1_altered =
            v.get("top1_altered").and_then(|t| t.as_bool()).ok_or_else(|| bad("missing boolean `top1_altered`"))?;
        // Dumps before benchctl 0.1's `candidates` field carry no gallery size to check.
        let candidates = match v.get("candidates") {
            None => usize::MAX,
            Some(c) => {
                c.as_u64().filter(|&c| c > 0).ok_or_else(|| bad("`candidates` must be a positive integer"))? as usize
            }
        };
        if rank >= candidates {
            return Err(bad(&format!("rank {rank} is impossible in a gallery of {candidates} candidates")));
        }
        let index = match results.iter().position(|r| r.name == name && r.direction == direction) {
            Some(i) => i,
            None => {
                results.push(GalleryResult {
                    name: name.to_string(),
                    direction,
                    candidates,
                    outcomes: SpillVec::new(),
                });
                results.len() - 1
            }
        };
        let gallery = &mut results[index];
        if gallery.candidates != candidates {
            return Err(bad(&format!(
                "{name} {direction} has {} candidates on its first line, {candidates} here",
                gallery.candidates
            )));
        }
        if query != gallery.outcomes.len() {
            return Err(bad(&format!(
                "query {query} of {name} {direction} is out of order (expected {})",
                gallery.outcomes.len()
            )));
        }
        gallery.outcomes.push(QueryOutcome { rank, top1_altered });
    }
    // A dump that lacks a gallery the report needs is bad data, not a failed computation.
    report(&results).map_err(|e| Error::caused_by(ErrorKind::Data, format!("score {}: {e}", path.display()), e))
}
