//! Replies generated here and read by a suite's official rule (`--answer-rule generate`): the
//! scoring of NaturalBench's and VisMin's official evaluations, which generate an answer and
//! search it, for every family that implements [`LocalVqa`] (CLIP-FlanT5, an encoder-decoder,
//! generates its own way in `models/clip_t5/replies.rs`, through the same `ReplyMemo`).
//!
//! - A reply is `transformers`' `generate` with the checkpoint's `generation_config.json`
//!   ([`GenerationSettings`]) decoding greedily, at most [`GENERATED_TOKENS`] new tokens, up to
//!   the first stop token: NaturalBench's official example (`model.generate(**inputs,
//!   max_new_tokens=128)` on Qwen2.5-VL, whose configuration decodes with `top_k: 1`, so
//!   greedily, after a repetition penalty of 1.05). A configuration that samples (`do_sample`
//!   with a wider `top_k`, Gemma 3's, Qwen3-VL's) is decoded greedily here too, as the servers'
//!   path asks (`temperature: 0`): its official numbers are a random draw.
//! - The caption's prompt is read over the image's state (the prompt's keys and values up to
//!   the image, as teacher-forced scoring uses it), then each step reads one new token per row
//!   over the keys and values kept so far ([`LocalVqa::start_reply`]), as `generate`'s cache
//!   does; rows of one prompt length step as one batch, with no padding to change a result, and
//!   a row leaves the batch when its reply ends.
//! - The reply is decoded as the processors' `batch_decode(…, skip_special_tokens=True)` does and
//!   read once for each answer option asked about it ([`super::reply::names`]): the options of
//!   one question over one image share one generation.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use candle_core::{DType, Device, Tensor};

use super::local::{groups_of, LocalVqa};
use super::reply::{self, ReplyReading};
use super::{AnswerRule, GENERATED_TOKENS, LOG_ZERO};
use crate::architecture::LoadChoice;
use crate::hub::{GenerationFile, ModelFiles, GENERATION_FILE};
use crate::preprocess::Preprocessor;
use crate::{Error, ErrorKind, FusionEncoder, Result, ScoreKind};

/// How `transformers`' `generate` decodes a checkpoint by default, as far as greedy decoding
/// reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationSettings {
    /// The tokens that end a reply (`eos_token_id`, one or a list).
    pub stop: Vec<u32>,
    /// `RepetitionPenaltyLogitsProcessor`'s factor: a token already in the prompt or the reply
    /// has its logit divided by it (multiplied where negative); 1 changes nothing.
    pub repetition_penalty: f32,
    /// The longest reply.
    pub max_new_tokens: usize,
    /// The configuration's `max_length`, where it names one: the longest sequence a caller that
    /// passes no `max_new_tokens` gets (an encoder-decoder's, the start token included).
    pub max_length: Option<usize>,
}

/// Settings of `generation_config.json` that would change a greedy reply and are not applied
/// here, each with the value that leaves replies alone: a configuration setting one otherwise
/// is refused, naming it, rather than answered differently.
const NOT_APPLIED: [(&str, &str); 10] = [
    ("num_beams", "1"),
    ("no_repeat_ngram_size", "0"),
    ("encoder_no_repeat_ngram_size", "0"),
    ("min_new_tokens", "0"),
    ("bad_words_ids", "null"),
    ("suppress_tokens", "null"),
    ("begin_suppress_tokens", "null"),
    ("forced_bos_token_id", "null"),
    ("sequence_bias", "null"),
    ("penalty_alpha", "null"),
];

impl GenerationSettings {
    /// The settings of a checkpoint: its `generation_config.json`, else (as `transformers`'
    /// `GenerationConfig.from_model_config`) the stop tokens of `config.json`, at its top level
    /// or in its `text_config`.
    pub fn of(files: &ModelFiles) -> Result<Self> {
        let path = match &files.generation {
            GenerationFile::Found(path) => path.clone(),
            GenerationFile::Absent => files.config.clone(),
            GenerationFile::Unknown => {
                return Err(Error::new(
                    ErrorKind::MissingFile,
                    format!(
                        "generate replies with the model of {}: its {GENERATION_FILE} (the stop tokens, the repetition penalty) is not in the hub cache, which was read offline; run once without HF_HUB_OFFLINE, or use --answer-rule logprobs",
                        files.config.display()
                    ),
                ))
            }
        };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::caused_by(ErrorKind::MissingFile, format!("read {}: {e}", path.display()), e))?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Error::caused_by(ErrorKind::BadConfig, format!("parse {}: {e}", path.display()), e))?;
        let bad = |key: &str, why: String| {
            Error::new(ErrorKind::BadConfig, format!("read `{key}` of {}: {why}", path.display()))
        };
        if matches!(files.generation, GenerationFile::Found(_)) {
            for (key, neutral) in NOT_APPLIED {
                let value = json.get(key).filter(|v| !v.is_null());
                let neutral_value: serde_json::Value = serde_json::from_str(neutral).unwrap_or_default();
                if let Some(value) =
                    value.filter(|v| **v != neutral_value && !(v.is_array() && v.as_array().is_some_and(Vec::is_empty)))
                {
                    return Err(bad(key, format!("{value} changes greedy replies in a way benchctl does not apply (it applies eos_token_id and repetition_penalty); use --answer-rule logprobs")));
                }
            }
        }
        let eos = match json.get("eos_token_id").filter(|v| !v.is_null()) {
            Some(found) => Some(found),
            None => json.pointer("/text_config/eos_token_id").filter(|v| !v.is_null()),
        };
        let stop = match eos {
            None => Some(Vec::new()),
            Some(serde_json::Value::Array(ids)) => ids.iter().map(token_id).collect::<Option<Vec<u32>>>(),
            Some(one) => token_id(one).map(|id| vec![id]),
        }
        .ok_or_else(|| {
            bad("eos_token_id", format!("{} is not a token id or a list of them", eos.cloned().unwrap_or_default()))
        })?;
        let repetition_penalty = match json.get("repetition_penalty").filter(|v| !v.is_null()) {
            None => 1.0,
            Some(value) => value
                .as_f64()
                .filter(|p| p.is_finite() && *p > 0.0)
                .ok_or_else(|| bad("repetition_penalty", format!("{value} is not a positive number")))?
                as f32,
        };
        let max_length = match json.get("max_length").filter(|v| !v.is_null()) {
            None => None,
            Some(value) => Some(
                value
                    .as_u64()
                    .filter(|&n| n >= 1)
                    .ok_or_else(|| bad("max_length", format!("{value} is not a positive length")))?
                    as usize,
            ),
        };
        Ok(Self { stop, repetition_penalty, max_new_tokens: GENERATED_TOKENS as usize, max_length })
    }

    /// `logits` of one row after the repetition penalty over `seen` (its ids so far, in any
    /// order), as `transformers` applies it.
    pub(crate) fn penalise<'a>(&self, logits: &mut [f32], seen: impl IntoIterator<Item = &'a u32>) {
        if self.repetition_penalty == 1.0 {
            return;
        }
        let mut done = std::collections::HashSet::new();
        for &id in seen {
            if let Some(logit) = logits.get_mut(id as usize).filter(|_| done.insert(id)) {
                *logit = if *logit < 0.0 { *logit * self.repetition_penalty } else { *logit / self.repetition_penalty };
            }
        }
    }
}

fn token_id(value: &serde_json::Value) -> Option<u32> {
    value.as_u64().and_then(|id| u32::try_from(id).ok())
}

/// The index of the first largest value (`torch.argmax`'s choice among equals); NaN never wins.
pub(crate) fn first_argmax(values: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in values.iter().enumerate() {
        if v > values[best] || values[best].is_nan() && !v.is_nan() {
            best = i;
        }
    }
    best as u32
}

/// Each row's reply: the new token ids, greedily, after `prompts[i]` over `image_states` row `i`
/// (the stop token that ended it included, as `generate` returns it). `before_caption`: the ids
/// of the prompt before the caption's part, which the repetition penalty counts as seen.
pub fn generate<M: LocalVqa + ?Sized>(
    model: &M,
    image_states: &Tensor,
    prompts: &[Vec<u32>],
    before_caption: &[u32],
    settings: &GenerationSettings,
) -> candle_core::Result<Vec<Vec<u32>>> {
    let mut replies: Vec<Vec<u32>> = vec![Vec::new(); prompts.len()];
    let lengths: Vec<usize> = prompts.iter().map(Vec::len).collect();
    for group in groups_of(&lengths) {
        let rows = Tensor::new(group.iter().map(|&i| i as u32).collect::<Vec<_>>(), image_states.device())?;
        let states = image_states.index_select(&rows, 0)?;
        let inputs: Vec<Vec<u32>> = group.iter().map(|&i| prompts[i].clone()).collect();
        let prompt = lengths[group[0]];
        let step = |hidden: &Tensor, active: &[usize], replies: &mut [Vec<u32>]| -> candle_core::Result<()> {
            let last = hidden.narrow(1, hidden.dim(1)? - 1, 1)?;
            let logits = model.logits(&last)?.squeeze(1)?.to_dtype(DType::F32)?.to_vec2::<f32>()?;
            for (&i, mut row) in active.iter().zip(logits) {
                settings.penalise(&mut row, before_caption.iter().chain(&prompts[i]).chain(&replies[i]));
                replies[i].push(first_argmax(&row));
            }
            Ok(())
        };
        let ended = |replies: &[Vec<u32>], i: usize| {
            replies[i].len() >= settings.max_new_tokens || replies[i].last().is_some_and(|t| settings.stop.contains(t))
        };
        // Each step reads one new token per row over the keys and values kept so far.
        let (mut hidden, mut state) = model.start_reply(&states, &inputs, prompt)?;
        let mut active: Vec<usize> = group.clone();
        loop {
            step(&hidden, &active, &mut replies)?;
            let going: Vec<u32> = (0..active.len() as u32).filter(|&a| !ended(&replies, active[a as usize])).collect();
            if going.is_empty() {
                break;
            }
            if going.len() < active.len() {
                state = state.select(&going)?;
                active = going.iter().map(|&a| active[a as usize]).collect();
            }
            let next: Vec<u32> = active.iter().map(|&i| replies[i][replies[i].len() - 1]).collect();
            (hidden, state) = model.continue_reply(&state, &next)?;
        }
    }
    Ok(replies)
}

/// A generative family's model as `choice` asks for it: scoring by the answer's log-probability,
/// or by replies it generates (the checkpoint's generation settings read before its weights).
pub fn load_vqa<T: LocalVqa + 'static>(
    choice: LoadChoice,
    files: &ModelFiles,
    load: impl FnOnce() -> Result<T>,
) -> Result<crate::Model> {
    Ok(crate::Model::Fusion(match choice.answer_rule {
        AnswerRule::Logprobs => Box::new(load()?),
        AnswerRule::Generate => {
            let settings = GenerationSettings::of(files)?;
            Box::new(Generating::new(load()?, settings, choice.reply_reading))
        }
    }))
}

/// A generative model that scores each answer option by a reply it generates, read by the
/// suite's official rule: 0 where the reply gives the option, [`LOG_ZERO`] where not.
pub struct Generating<T> {
    model: T,
    settings: GenerationSettings,
    reading: ReplyReading,
    replies: ReplyMemo,
}

/// Replies already generated, by image state ([`digest`]) and prompt: the options of one
/// question asked in different batches read one reply (the same state and prompt in another
/// batch could round differently and give another).
#[derive(Default)]
pub(crate) struct ReplyMemo(std::sync::Mutex<HashMap<(u64, Vec<u32>), String>>);

/// Replies kept for options asked later: a question's options are asked together.
const REPLIES_HELD: usize = 4096;

impl ReplyMemo {
    /// Each pair's reply (pair `i`: `image_states` row `i` asked `prompts[i]`): held, or made by
    /// `make` from the rows and prompts of the pairs whose (state, prompt) is not held, one pair
    /// standing for each such key, and then held.
    pub(crate) fn replies(
        &self,
        image_states: &Tensor,
        prompts: &[Vec<u32>],
        make: impl FnOnce(&Tensor, &[Vec<u32>]) -> Result<Vec<String>>,
    ) -> Result<Vec<String>> {
        let compute = |e| Error::compute("generate replies", e);
        let keys: Vec<(u64, Vec<u32>)> = (0..prompts.len())
            .map(|i| Ok((digest(&image_states.get(i)?)?, prompts[i].clone())))
            .collect::<candle_core::Result<_>>()
            .map_err(compute)?;
        let held = |key: &(u64, Vec<u32>)| self.0.lock().ok().and_then(|r| r.get(key).cloned());
        let mut todo: Vec<usize> = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            if held(key).is_none() && !todo.iter().any(|&j| keys[j] == *key) {
                todo.push(i);
            }
        }
        if !todo.is_empty() {
            let rows = Tensor::new(todo.iter().map(|&i| i as u32).collect::<Vec<_>>(), image_states.device())
                .and_then(|rows| image_states.index_select(&rows, 0))
                .map_err(compute)?;
            let wanted: Vec<Vec<u32>> = todo.iter().map(|&i| prompts[i].clone()).collect();
            let made = make(&rows, &wanted)?;
            let mut replies =
                self.0.lock().map_err(|_| Error::new(ErrorKind::Compute, "generate replies: a thread panicked"))?;
            if replies.len() + made.len() > REPLIES_HELD {
                replies.clear();
            }
            for (&i, text) in todo.iter().zip(made) {
                replies.insert(keys[i].clone(), text);
            }
        }
        keys.iter()
            .map(|key| {
                held(key).ok_or_else(|| Error::new(ErrorKind::Compute, "generate replies: a reply went missing"))
            })
            .collect()
    }
}

impl<T: LocalVqa> Generating<T> {
    pub fn new(model: T, settings: GenerationSettings, reading: ReplyReading) -> Self {
        Self { model, settings, reading, replies: ReplyMemo::default() }
    }

    /// The generative model itself.
    pub fn model(&self) -> &T {
        &self.model
    }

    /// Each pair's reply, generated once per (state, prompt).
    pub fn replies(&self, image_states: &Tensor, texts: &[&str]) -> Result<Vec<String>> {
        let prompts: Vec<Vec<u32>> =
            texts.iter().map(|t| self.model.caption_ids(t).map(|(p, _)| p)).collect::<Result<_>>()?;
        self.replies.replies(image_states, &prompts, |rows, wanted| {
            // Only a repetition penalty reads them.
            let before = match self.settings.repetition_penalty == 1.0 {
                true => Vec::new(),
                false => self.model.ids_before_caption(1)?,
            };
            let ids = generate(&self.model, rows, wanted, &before, &self.settings)
                .map_err(|e| Error::compute("generate replies", e))?;
            ids.iter()
                .map(|ids| {
                    self.model
                        .tokenizer()
                        .decode(ids, true)
                        .map_err(|e| Error::new(ErrorKind::Tokenizer, format!("decode the reply {ids:?}: {e}")))
                })
                .collect()
        })
    }
}

/// A 64-bit fingerprint of a state row: its shape, its last 4,096 values and 65,536 values
/// spread evenly over it. States of different images differ at nearly every value, so two
/// rows that agree on all of these are the same image's; reading the whole row (tens of MB for
/// a large model's prompt) for each pair would cost more than the check is worth.
fn digest(row: &Tensor) -> candle_core::Result<u64> {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    row.dims().hash(&mut hasher);
    let flat = row.flatten_all()?;
    let n = flat.dim(0)?;
    let stride = (n / 65_536).max(1);
    let spread = flat.narrow(0, 0, n / stride * stride)?.reshape((n / stride, stride))?.narrow(1, 0, 1)?;
    let tail = flat.narrow(0, n - n.min(4096), n.min(4096))?;
    for part in [spread.flatten_all()?, tail] {
        for v in part.to_dtype(DType::F32)?.to_vec1::<f32>()? {
            v.to_bits().hash(&mut hasher);
        }
    }
    Ok(hasher.finish())
}

impl<T: LocalVqa> FusionEncoder for Generating<T> {
    fn device(&self) -> &Device {
        self.model.weights_device()
    }

    fn preprocessor(&self) -> &Preprocessor {
        self.model.image_preprocessor()
    }

    fn encode_images(&self, pixels: &Tensor) -> Result<Tensor> {
        FusionEncoder::encode_images(&self.model, pixels)
    }

    /// Refused where a repetition penalty would count ids the single-image prompt lacks (the
    /// together prompt's labels), which the reply's generation does not see.
    fn encode_shown_together(&self, images: &[Tensor]) -> Result<Tensor> {
        if self.settings.repetition_penalty != 1.0 {
            let set = |ids: Vec<u32>| ids.into_iter().collect::<std::collections::BTreeSet<u32>>();
            if set(self.model.ids_before_caption(images.len())?) != set(self.model.ids_before_caption(1)?) {
                return Err(Error::new(
                    ErrorKind::UnusableInput,
                    "generate replies about images shown together: this model's prompt for several images holds other tokens than for one, which its repetition penalty would count; use --answer-rule logprobs",
                ));
            }
        }
        FusionEncoder::encode_shown_together(&self.model, images)
    }

    fn score_pairs(&self, image_states: &Tensor, texts: &[&str]) -> Result<Tensor> {
        Ok(self.score_pairs_with_replies(image_states, texts)?.0)
    }

    /// Each pair's reply generated (or held) once, and its score read from it.
    fn score_pairs_with_replies(&self, image_states: &Tensor, texts: &[&str]) -> Result<(Tensor, Option<Vec<String>>)> {
        let replies = self.replies(image_states, texts)?;
        let scores: Vec<f32> = texts
            .iter()
            .zip(&replies)
            .map(|(text, reply)| {
                let answer = self.model.template().answer_for(text);
                if reply::names(self.reading, reply, &answer) {
                    0.0
                } else {
                    LOG_ZERO as f32
                }
            })
            .collect();
        let scores =
            Tensor::from_vec(scores, texts.len(), self.device()).map_err(|e| Error::compute("collect scores", e))?;
        Ok((scores, Some(replies)))
    }

    fn score_kind(&self) -> ScoreKind {
        ScoreKind::LogProbability
    }

    fn shortlister(&self) -> Option<&dyn crate::DualEncoder> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_penalty_divides_what_is_seen_once_as_transformers_does() {
        let settings =
            GenerationSettings { stop: vec![], repetition_penalty: 2.0, max_new_tokens: 1, max_length: None };
        let mut logits = vec![4.0, -1.0, 3.0, 0.5];
        settings.penalise(&mut logits, &[0, 1, 0, 7]);
        assert_eq!(logits, vec![2.0, -2.0, 3.0, 0.5]);
        assert_eq!(first_argmax(&logits), 2);
        assert_eq!(first_argmax(&[f32::NAN, 1.0, 1.0]), 1, "the first of equals; NaN never wins");
    }
}
