//! CLIP-FlanT5's generated replies (`--answer-rule generate`), as `t2v_metrics` v3.0 means them:
//! `CLIPT5Model.generate` splices the image into the prompt's embeddings and hands only those
//! (and their mask) to `transformers`' T5 `generate`, dropping the sampling settings it is
//! given, so a reply is greedy and at most the checkpoint's `max_length` decoder positions long
//! (20 unless its generation_config.json says otherwise; the start token is one), or
//! `max_new_tokens` tokens where the configuration sets that, decoded without special tokens
//! (cleaned up where the tokenizer's `clean_up_tokenization_spaces` says so) and stripped. (That call fails as published under transformers 4.40
//! and 4.46; `scripts/fixtures/gen_clip_flant5_replies_fixture.py` takes its two steps itself.)
//!
//! The encoder reads each prompt once and the decoder's keys and values over its output are
//! made once; each step then runs the decoder over the reply so far, which at ≤ 19 tokens
//! costs far less than the encoder's one pass.

use candle_core::Tensor;

use super::ClipT5Vqa;
use crate::hub::ModelFiles;
use crate::vqascore::generate::{first_argmax, GenerationSettings, ReplyMemo};
use crate::vqascore::local::groups_of;
use crate::vqascore::reply::{self, ReplyReading};
use crate::vqascore::LOG_ZERO;
use crate::{Error, Result};

/// `transformers`' `max_length` where a checkpoint's configuration names none.
const DEFAULT_MAX_LENGTH: usize = 20;

/// How replies are generated and read, and those generated so far.
pub(super) struct Replying {
    settings: GenerationSettings,
    reading: ReplyReading,
    memo: ReplyMemo,
}

impl Replying {
    /// The checkpoint's generation settings (its stop token, repetition penalty and
    /// `max_length`), replies read as `reading`.
    pub(super) fn of(files: &ModelFiles, reading: ReplyReading) -> Result<Self> {
        let mut settings = GenerationSettings::of(files)?;
        settings.max_new_tokens = (settings.config_max_new_tokens)
            .unwrap_or_else(|| settings.max_length.unwrap_or(DEFAULT_MAX_LENGTH).saturating_sub(1));
        Ok(Self { settings, reading, memo: ReplyMemo::default() })
    }
}

impl ClipT5Vqa {
    /// Each pair's reply (generated once per distinct image row and prompt) and the score read
    /// from it for the pair's answer: 0 where the reply gives it, [`LOG_ZERO`] where not.
    pub(super) fn read_replies(
        &self,
        replying: &Replying,
        image_states: &Tensor,
        texts: &[&str],
    ) -> Result<(Tensor, Vec<String>)> {
        let compute = |e| Error::compute("generate replies", e);
        let prompts: Vec<Vec<u32>> =
            texts.iter().map(|t| self.caption_ids(t).map(|(p, _)| p)).collect::<Result<_>>()?;
        let replies = replying.memo.replies(image_states, &prompts, |rows, wanted| {
            let ids = rows
                .reshape((wanted.len(), (), self.d_model))
                .and_then(|images| self.generate(&images, wanted, &replying.settings))
                .map_err(compute)?;
            ids.iter().map(|ids| self.decode(&replying.settings, ids)).collect()
        })?;
        let mut scores = Vec::with_capacity(texts.len());
        for (text, reply) in texts.iter().zip(&replies) {
            let answer = self.prompt.template.answer_for(text);
            scores.push(if reply::names(replying.reading, reply, &answer) { 0.0 } else { LOG_ZERO as f32 });
        }
        let scores = Tensor::from_vec(scores, texts.len(), &self.device).map_err(compute)?;
        Ok((scores, replies))
    }

    /// A reply as `CLIPT5Model.generate` returns it: decoded without special tokens (and
    /// cleaned up where the tokenizer says so), a trailing space dropped, then stripped.
    fn decode(&self, settings: &GenerationSettings, ids: &[u32]) -> Result<String> {
        Ok(settings.decoding.decode(&self.prompt.tokenizer, ids)?.trim().to_string())
    }

    /// Each row's reply ids, greedily, after `prompts[i]` (its ids after the image) over
    /// `images` row `i` (the end token kept where a reply ended). Rows of one prompt length run
    /// as one batch, without padding; a row leaves it when its reply ends.
    fn generate(
        &self,
        images: &Tensor,
        prompts: &[Vec<u32>],
        settings: &GenerationSettings,
    ) -> candle_core::Result<Vec<Vec<u32>>> {
        let mut replies: Vec<Vec<u32>> = vec![Vec::new(); prompts.len()];
        if settings.max_new_tokens == 0 {
            return Ok(replies);
        }
        let lengths: Vec<usize> = prompts.iter().map(Vec::len).collect();
        for group in groups_of(&lengths) {
            let rows = Tensor::new(group.iter().map(|&i| i as u32).collect::<Vec<_>>(), images.device())?;
            let after: Vec<Vec<u32>> = group.iter().map(|&i| prompts[i].clone()).collect();
            let encoded = self.encode_prompts(&images.index_select(&rows, 0)?, &after)?;
            let mut memory = self.decoder.memory(&encoded)?;
            let mut active = group.clone();
            while !active.is_empty() {
                let inputs: Vec<Vec<u32>> =
                    active.iter().map(|&i| [&[self.decoder_start][..], &replies[i]].concat()).collect();
                let hidden = self.decoder.forward_over(&self.embed(&inputs)?, Some(&memory))?;
                let last = hidden.narrow(1, hidden.dim(1)? - 1, 1)?;
                let logits = self.logits(&last)?.squeeze(1)?.to_vec2::<f32>()?;
                for (&i, mut row) in active.iter().zip(logits) {
                    // The penalty of an encoder-decoder counts the decoder's ids only.
                    let seen = [self.decoder_start].into_iter().chain(replies[i].iter().copied()).collect::<Vec<_>>();
                    settings.penalise(&mut row, &seen);
                    replies[i].push(first_argmax(&row));
                }
                let going: Vec<u32> = (0..active.len() as u32)
                    .filter(|&a| {
                        let reply = &replies[active[a as usize]];
                        reply.len() < settings.max_new_tokens
                            && reply.last().is_some_and(|t| !settings.stop.contains(t))
                    })
                    .collect();
                if going.len() < active.len() && !going.is_empty() {
                    let keep = Tensor::new(going.as_slice(), images.device())?;
                    memory = (memory.iter())
                        .map(|(k, v)| Ok((k.index_select(&keep, 0)?, v.index_select(&keep, 0)?)))
                        .collect::<candle_core::Result<_>>()?;
                }
                active = going.iter().map(|&a| active[a as usize]).collect();
            }
        }
        Ok(replies)
    }
}
