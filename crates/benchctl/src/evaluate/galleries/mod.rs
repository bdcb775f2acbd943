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

mod altered;
mod rerank;

use std::path::Path;
use std::time::Instant;

use benchctl_base::spill::SpillVec;
use benchctl_models::registry::Architecture;
use benchctl_models::{DualEncoder, Model};
use benchctl_scoring::metrics::retrieval::{self, GalleryOutcomes, QueryOutcome};
use benchctl_scoring::metrics::Ties;
use benchctl_scoring::Report;
use benchctl_suites::rococo::{self, CaptionGallery};
use benchctl_suites::ImageSource;
use candle_core::Tensor;
use serde_json::json;

use crate::cache::{text_keys, Keys};
use crate::encode::{encode_images, encode_texts, Encoder};
use crate::inputs::{self, unique_by};
use crate::model::Needed;
use crate::plan::{CaptionNormalisation, EvalPlan};
use crate::record::{Evaluation, Outcome, Scored};
use crate::results::{self, SuiteRecord};
use crate::session::Session;
use crate::{Error, ErrorKind, Result};
use altered::{altered_record, fingerprint, AlteredGalleries};
pub use rerank::rank_gallery;
use rerank::{dual_of, image_to_text, rank_all, rows, Rerank, Shortlist, Side};

/// Queries per block of the gallery matrix product when a fusion model re-ranks (a block of
/// scores against 50K captions is 100 MB).
const QUERY_BLOCK: usize = 512;

fn compute(what: &str) -> impl Fn(candle_core::Error) -> Error + '_ {
    move |e| Error::new(ErrorKind::Compute, format!("{what}: {e}"))
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
        hub: None,
    };
    let data_fingerprint = fingerprint(&data, &plan.data_dir);
    // Retrieval metrics are over queries against shared galleries; no item bootstrap.
    let scored = Scored { suite, report, intervals: Vec::new(), bootstrap: None, data_fingerprint, image_fingerprint };
    Ok(Evaluation { run: session.run.finish(scored), outcome: Outcome::Queries { dump } })
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
) -> Result<Vec<GalleryOutcomes>> {
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
    let mut results: Vec<GalleryOutcomes> = Vec::new();
    let caption_texts: Vec<Vec<&str>> =
        inputs.galleries.iter().map(|g| g.captions.iter().map(String::as_str).collect()).collect();
    for ((g, captions), texts) in inputs.galleries.iter().zip(&gallery_rows).zip(&caption_texts) {
        let rerank = reranker.map(|r| (r, Side::Images(inputs.sources), Side::Texts(texts)));
        let outcomes = image_to_text(&image_table, captions, g, rerank, ties)?;
        let candidates = g.captions.len();
        results.push(GalleryOutcomes { name: g.name.clone(), direction: "i2t", candidates, outcomes: outcomes.into() });
    }
    // Text-to-image: the original captions against the test images, then against the test
    // images plus each altered gallery.
    let clean_captions = &gallery_rows[0];
    let image_of = &data.clean.image_of;
    let rerank = reranker.map(|r| (r, Side::Texts(&caption_texts[0]), Side::Images(inputs.sources)));
    let outcomes = rank_all(clean_captions, &image_table, &|q| vec![image_of[q]], &[], rerank, ties)?;
    results.push(GalleryOutcomes { name: "clean".into(), direction: "t2i", candidates: n, outcomes: outcomes.into() });
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
        results.push(GalleryOutcomes { name, direction: "t2i", candidates: 2 * n, outcomes: outcomes.into() });
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

/// The RoCOCO report of a run's gallery outcomes (`benchctl_scoring`'s retrieval report).
fn report(results: &[GalleryOutcomes]) -> Result<Report> {
    retrieval::rococo_report(results, &rococo::CAPTION_SETS)
        .map_err(|e| Error::new(ErrorKind::Compute, format!("report rococo: {e}")))
}

/// The RoCOCO report recomputed from a score dump of `eval --suite rococo` (one line per
/// query and gallery: `gallery`, `direction`, `query`, `rank`, `top1_altered`), exactly as
/// `eval` computed it. Each gallery's queries must be `0, 1, …` in order.
pub fn report_from_dump(path: &Path) -> Result<Report> {
    let mut results: Vec<GalleryOutcomes> = Vec::new();
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
                results.push(GalleryOutcomes {
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
