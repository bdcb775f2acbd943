//! A generative model's pair scores through a scoring server (`--endpoint`): every unique
//! (image, caption) pair asked once (the answer options of one question about one image in
//! one request), a bounded number of requests in flight, each answer appended to the cache
//! the moment it arrives. A run that is killed, or stopped by a failing
//! server or its request budget, keeps every answer it got; the next run asks only the rest.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use benchctl_models::vqascore::endpoint::{Asked, AskedOptions, ImagePayload};
use benchctl_models::vqascore::Reading;
use benchctl_scoring::metrics::answers;
use benchctl_suites::ImageSource;
use image::ImageEncoder as _;

use super::progress;
use crate::cache::EmbeddingCache;
use crate::encode::pairs::{missing_pairs, reply_key, Cached, PairInputs, PairScores, PairTable};
use crate::model::EndpointModel;
use crate::replies::Replies;
use crate::results::Counts;
use crate::{Error, ErrorKind, Result};

/// The largest image file sent as it is; a larger one is refused (servers cap requests).
const MAX_IMAGE_BYTES: u64 = 64 << 20;

/// Every pair's `log P(answer)` from the server (and its reply, where kept), through the cache.
pub(crate) fn ask_pairs_through_cache(
    server: &EndpointModel,
    table: &PairTable,
    inputs: &PairInputs,
    counts: &mut Counts,
    cache: &mut EmbeddingCache,
) -> Result<PairScores> {
    let PairInputs { images, texts, pair_keys, .. } = *inputs;
    let Cached { mut values, cached, mut replies, mut todo } = missing_pairs(table, inputs, cache);
    counts.pairs_cached += cached;
    // By image (sorted in bounded memory): an image's payload is made once for all its pairs.
    benchctl_base::spill::sort_by_key(&mut todo, |&(i, _)| i);
    let left_for_later = server.request_budget.map_or(0, |budget| todo.len().saturating_sub(budget));
    todo.truncate(todo.len() - left_for_later);

    let requests = one_request_each(&todo, |pair| texts[table.pairs[pair].1]);
    let mut remaining: HashMap<usize, usize> = HashMap::new();
    requests.iter().for_each(|group| *remaining.entry(group[0].0).or_default() += 1);
    let payloads = Payloads { memo: Mutex::new(HashMap::new()), remaining: Mutex::new(remaining) };
    let (next, stop) = (AtomicUsize::new(0), AtomicBool::new(false));
    let bar = progress(todo.len(), "asking the server");
    let mut first_error: Option<Error> = None;
    // The request threads share the requests as a slice.
    let requests: &[Vec<(usize, usize)>] = &requests;
    std::thread::scope(|scope| {
        let (sender, answers) = mpsc::channel::<(usize, usize, Result<Asked>)>();
        for _ in 0..server.in_flight.clamp(1, requests.len().max(1)) {
            let sender = sender.clone();
            let (payloads, next, stop) = (&payloads, &next, &stop);
            scope.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Some(group) = requests.get(next.fetch_add(1, Ordering::Relaxed)) else { break };
                    let image = group[0].0;
                    let group_texts: Vec<&str> = group.iter().map(|&(_, pair)| texts[table.pairs[pair].1]).collect();
                    let asked = payloads
                        .get(image, || images.source(image))
                        .and_then(|payload| Ok(server.endpoint.ask_options(&payload, group_texts[0], &group_texts)?));
                    payloads.done(image);
                    // A failure stops new requests at once; those in flight still finish.
                    if asked.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    if !send_each(&sender, group, asked) {
                        break;
                    }
                }
            });
        }
        drop(sender);
        // Every answer that arrives is kept, also after the first failure stops new requests.
        for (image, pair, asked) in answers {
            let stored = asked.and_then(|asked| {
                values[pair] =
                    Some(keep_answer(&asked, pair_keys.get(pair), replies.as_mut().map(|r| (r, pair)), cache)?);
                counts.pairs_scored += 1;
                counts.requests += asked.attempts as usize;
                counts.answers_without_yes_or_no += usize::from(asked.reading == Reading::Neither);
                bar.inc(1);
                Ok(())
            });
            if let Err(e) = stored {
                stop.store(true, Ordering::Relaxed);
                if first_error.is_none() {
                    let source = images.source(image).display_name();
                    let message = format!("score image {source} with caption {:?}: {e}", texts[table.pairs[pair].1]);
                    first_error = Some(Error::caused_by(e.kind(), message, e));
                }
            }
        }
    });
    bar.finish_and_clear();
    if let Some(e) = first_error {
        let kept = match cache.is_enabled() {
            true => {
                format!("the {} answer(s) received are cached and the next run asks only the rest", counts.pairs_scored)
            }
            false => format!("the {} answer(s) received are not kept: the cache is off", counts.pairs_scored),
        };
        return Err(Error::caused_by(e.kind(), format!("{e}; {kept}"), e));
    }
    if counts.answers_without_yes_or_no > 0 {
        benchctl_base::stderr_line!(
            "warning: {} answer(s) had neither the answer nor its opposite (\"Yes\" or \"No\", or the question's options) among the server's top log-probabilities: scored as probability 0, as t2v_metrics does (more with --top-logprobs)",
            counts.answers_without_yes_or_no
        );
    }
    if left_for_later > 0 {
        return Err(Error::new(
            ErrorKind::Endpoint,
            format!(
                "score every pair within the request budget: {} pair(s) were asked and cached, {left_for_later} are left for the next run",
                counts.pairs_scored
            ),
        ));
    }
    Ok(PairScores {
        values: table.asked_values(&values, "ask the server: a pair was neither cached nor asked")?,
        replies,
    })
}

/// One pair's answer cached under `pair_key`, and its reply where replies are kept (`replies`,
/// with the pair's index): its `log P(answer)`.
fn keep_answer(
    asked: &Asked,
    pair_key: crate::cache::Key,
    replies: Option<(&mut Replies, usize)>,
    cache: &mut EmbeddingCache,
) -> Result<f32> {
    let log_p = asked.reading.log_p() as f32;
    if let Some((replies, pair)) = replies {
        let reply = asked.reply.as_deref().ok_or_else(|| {
            Error::new(ErrorKind::Compute, "keep the generated replies: the server's answer gave none")
        })?;
        // The reply before its score: a score is never cached without its reply.
        cache.append_texts(&[(reply_key(&pair_key), reply)])?;
        replies.set(pair, reply);
    }
    cache.append(&[(pair_key, std::slice::from_ref(&log_p))])?;
    Ok(log_p)
}

/// The pairs to ask, by request: the pairs of one image whose texts ask one question with
/// different answer options ([`answers::split_asked`]) share a request; any other pair is a
/// request of its own. In the order of their first pair.
fn one_request_each<'t>(todo: &[(usize, usize)], text_of: impl Fn(usize) -> &'t str) -> Vec<Vec<(usize, usize)>> {
    let mut requests: Vec<Vec<(usize, usize)>> = Vec::new();
    let mut by_question: HashMap<(usize, &str), usize> = HashMap::new();
    for &(image, pair) in todo {
        match answers::split_asked(text_of(pair)) {
            Some((question, _)) => match by_question.get(&(image, question)) {
                Some(&at) => requests[at].push((image, pair)),
                None => {
                    by_question.insert((image, question), requests.len());
                    requests.push(vec![(image, pair)]);
                }
            },
            None => requests.push(vec![(image, pair)]),
        }
    }
    requests
}

/// Sends each pair of a request its answer (the request's attempts counted with its first
/// pair); false once the receiver is gone.
fn send_each(
    sender: &mpsc::Sender<(usize, usize, Result<Asked>)>,
    group: &[(usize, usize)],
    asked: Result<AskedOptions>,
) -> bool {
    match asked {
        Ok(AskedOptions { readings, attempts, reply }) => {
            group.iter().zip(readings).enumerate().all(|(i, (&(image, pair), reading))| {
                let attempts = if i == 0 { attempts } else { 0 };
                sender.send((image, pair, Ok(Asked { reading, attempts, reply: reply.clone() }))).is_ok()
            })
        }
        Err(e) => {
            let (image, pair) = group[0];
            sender.send((image, pair, Err(e))).is_ok()
        }
    }
}

/// Image payloads shared by the requests of one image, dropped after its last request.
struct Payloads {
    memo: Mutex<HashMap<usize, Arc<ImagePayload>>>,
    remaining: Mutex<HashMap<usize, usize>>,
}

impl Payloads {
    fn get(&self, image: usize, source: impl FnOnce() -> ImageSource) -> Result<Arc<ImagePayload>> {
        if let Some(payload) = self.memo.lock().map_err(poisoned)?.get(&image) {
            return Ok(payload.clone());
        }
        // Made outside the lock; two requests racing for one image both make it, once.
        let payload = Arc::new(payload_of(&source())?);
        self.memo.lock().map_err(poisoned)?.entry(image).or_insert_with(|| payload.clone());
        Ok(payload)
    }

    fn done(&self, image: usize) {
        let (Ok(mut remaining), Ok(mut memo)) = (self.remaining.lock(), self.memo.lock()) else { return };
        if let Some(left) = remaining.get_mut(&image) {
            *left -= 1;
            if *left == 0 {
                memo.remove(&image);
            }
        }
    }
}

fn poisoned<T>(_: T) -> Error {
    Error::new(ErrorKind::Compute, "ask the server: a request thread panicked")
}

/// What is sent for an image: a PNG or JPEG (or WebP, GIF) file's own bytes, as
/// `t2v_metrics` sends them; an image benchctl makes (a frame, a crop, an altered or embedded
/// image of another format) as a lossless PNG of its pixels; images shown together, each so.
fn payload_of(source: &ImageSource) -> Result<ImagePayload> {
    if let ImageSource::Together(images) = source {
        return Ok(ImagePayload::together(images.iter().map(payload_of).collect::<Result<Vec<_>>>()?));
    }
    let name = source.display_name();
    let unreadable = |e: String| Error::new(ErrorKind::Data, format!("read image {name}: {e}"));
    let file_bytes = match source {
        ImageSource::File(path) => {
            let size = std::fs::metadata(path).map_err(|e| unreadable(e.to_string()))?.len();
            if size > MAX_IMAGE_BYTES {
                return Err(unreadable(format!(
                    "it is {size} bytes, more than the {MAX_IMAGE_BYTES} a request carries"
                )));
            }
            Some(std::fs::read(path).map_err(|e| unreadable(e.to_string()))?)
        }
        ImageSource::Embedded(embedded) => Some(embedded.bytes()?.to_vec()),
        _ => None,
    };
    if let Some(payload) = file_bytes.as_deref().and_then(ImagePayload::of_file_bytes) {
        return Ok(payload);
    }
    let rgb = source.load_rgb()?;
    let mut png = Vec::new();
    image::codecs::png::PngEncoder::new(&mut png)
        .write_image(rgb.as_raw(), rgb.width(), rgb.height(), image::ExtendedColorType::Rgb8)
        .map_err(|e| unreadable(format!("encode it as PNG: {e}")))?;
    Ok(ImagePayload::png(&png))
}
