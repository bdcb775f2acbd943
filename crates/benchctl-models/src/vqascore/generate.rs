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
//! - The reply is decoded as the processors' `batch_decode(…, skip_special_tokens=True)` does,
//!   with the special tokens and `clean_up_tokenization_spaces` of the tokenizer's own settings
//!   ([`ReplyDecoding`]), and
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
use crate::tokenizer::added_token_text;
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
    /// The configuration's `max_new_tokens`, where it names one: the longest reply of a caller
    /// that passes none, whatever `max_length` says.
    pub config_max_new_tokens: Option<usize>,
    /// How the checkpoint's tokenizer decodes a reply (its `tokenizer_config.json`).
    pub decoding: ReplyDecoding,
}

/// How `transformers`' `decode(ids, skip_special_tokens=True)` differs from the tokenizer's own
/// decoding, as the tokenizer's `tokenizer_config.json` sets it:
/// - the special tokens it skips are also those the file names (`bos_token` and the other named
///   ones, `additional_special_tokens` / `extra_special_tokens` / `model_specific_special_tokens`,
///   `added_tokens_decoder` entries marked special), which `transformers` registers as special
///   whatever `tokenizer.json` flags;
/// - `clean_up_tokenization_spaces` removes the spaces before punctuation and in English
///   contractions (`clean_up_tokenization`), except, since transformers 5, for a BPE tokenizer
///   (where it would remove spaces the text has) unless
///   `clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output` forces it. Where
///   the file or the key is absent: off, transformers' default since 4.45.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplyDecoding {
    pub clean_up_spaces: bool,
    pub clean_up_bpe: bool,
    /// The special tokens the settings file names, by their text.
    pub special: Vec<String>,
}

/// The settings file's keys, in the order [`ReplyDecoding`]'s fields hold them.
const CLEAN_UP_KEYS: [&str; 2] =
    ["clean_up_tokenization_spaces", "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output"];

impl ReplyDecoding {
    /// The settings of `files.tokenizer_settings`, where there is one.
    pub fn of(files: &ModelFiles) -> Result<Self> {
        let Some(path) = &files.tokenizer_settings else { return Ok(Self::default()) };
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::caused_by(ErrorKind::MissingFile, format!("read {}: {e}", path.display()), e))?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Error::caused_by(ErrorKind::BadConfig, format!("parse {}: {e}", path.display()), e))?;
        let [clean_up_spaces, clean_up_bpe] = CLEAN_UP_KEYS.map(|key| match json.get(key) {
            None | Some(serde_json::Value::Null) => Ok(false),
            Some(serde_json::Value::Bool(on)) => Ok(*on),
            Some(other) => Err(Error::new(
                ErrorKind::BadConfig,
                format!("read `{key}` of {}: {other} is not true or false", path.display()),
            )),
        });
        Ok(Self {
            clean_up_spaces: clean_up_spaces?,
            clean_up_bpe: clean_up_bpe?,
            special: named_special_tokens(&json),
        })
    }

    /// `ids` as `tokenizer.decode(ids, skip_special_tokens=True)` gives them.
    pub fn decode(&self, tokenizer: &tokenizers::Tokenizer, ids: &[u32]) -> Result<String> {
        let kept: Vec<u32> = (ids.iter().copied())
            .filter(|&id| tokenizer.id_to_token(id).is_none_or(|token| !self.special.contains(&token)))
            .collect();
        let text = (tokenizer.decode(&kept, true))
            .map_err(|e| Error::new(ErrorKind::Tokenizer, format!("decode the reply {ids:?}: {e}")))?;
        let bpe = matches!(tokenizer.get_model(), tokenizers::ModelWrapper::BPE(_));
        Ok(if self.clean_up_spaces && (!bpe || self.clean_up_bpe) { clean_up_tokenization(&text) } else { text })
    }
}

/// `transformers`' named special tokens (`SPECIAL_TOKENS_ATTRIBUTES`).
const NAMED_SPECIAL_TOKENS: [&str; 7] =
    ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"];

/// The special tokens a `tokenizer_config.json` names ([`added_token_text`]).
fn named_special_tokens(json: &serde_json::Value) -> Vec<String> {
    let Some(settings) = json.as_object() else { return Vec::new() };
    let mut special = Vec::new();
    for (key, value) in settings {
        match key.as_str() {
            "additional_special_tokens" | "extra_special_tokens" | "model_specific_special_tokens" => match value {
                serde_json::Value::Array(tokens) => special.extend(tokens.iter().filter_map(added_token_text)),
                // transformers 5 also takes a map of named extra tokens.
                serde_json::Value::Object(named) => special.extend(named.values().filter_map(added_token_text)),
                _ => {}
            },
            "added_tokens_decoder" => special.extend(
                (value.as_object().into_iter().flat_map(|tokens| tokens.values()))
                    .filter(|token| token.get("special").and_then(|s| s.as_bool()) == Some(true))
                    .filter_map(added_token_text),
            ),
            key if NAMED_SPECIAL_TOKENS.contains(&key) => special.extend(added_token_text(value)),
            _ => {}
        }
    }
    special
}

/// `transformers`' `clean_up_tokenization`: each replacement over the whole text, in its order.
pub fn clean_up_tokenization(text: &str) -> String {
    const REPLACED: [(&str, &str); 10] = [
        (" .", "."),
        (" ?", "?"),
        (" !", "!"),
        (" ,", ","),
        (" ' ", "'"),
        (" n't", "n't"),
        (" 'm", "'m"),
        (" 's", "'s"),
        (" 've", "'ve"),
        (" 're", "'re"),
    ];
    REPLACED.iter().fold(text.to_string(), |text, (from, to)| text.replace(from, to))
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
        let length = |key: &str| match json.get(key).filter(|v| !v.is_null()) {
            None => Ok(None),
            Some(value) => (value.as_u64().filter(|&n| n >= 1))
                .map(|n| Some(n as usize))
                .ok_or_else(|| bad(key, format!("{value} is not a positive length"))),
        };
        Ok(Self {
            stop,
            repetition_penalty,
            max_new_tokens: GENERATED_TOKENS as usize,
            max_length: length("max_length")?,
            config_max_new_tokens: length("max_new_tokens")?,
            decoding: ReplyDecoding::of(files)?,
        })
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
            ids.iter().map(|ids| self.settings.decoding.decode(self.model.tokenizer(), ids)).collect()
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
        let settings = GenerationSettings {
            stop: vec![],
            repetition_penalty: 2.0,
            max_new_tokens: 1,
            max_length: None,
            config_max_new_tokens: None,
            decoding: ReplyDecoding::default(),
        };
        let mut logits = vec![4.0, -1.0, 3.0, 0.5];
        settings.penalise(&mut logits, &[0, 1, 0, 7]);
        assert_eq!(logits, vec![2.0, -2.0, 3.0, 0.5]);
        assert_eq!(first_argmax(&logits), 2);
        assert_eq!(first_argmax(&[f32::NAN, 1.0, 1.0]), 1, "the first of equals; NaN never wins");
    }
}
