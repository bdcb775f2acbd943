//! The model-agnostic half of VQAScore computed here, on a generative model's own weights
//! (Gemma 3, PaliGemma, Qwen2.5-VL, Qwen3-VL, InternVL): what every such family shares, so that
//! a family is its config, its towers, its decoder and a short [`LocalVqa`] impl.
//!
//! - [`LocalVqa`]: what a family provides (its image state, its prompt for a caption, a batched
//!   decoder pass that keeps its keys and values and continues one token at a time, its
//!   vocabulary's logits); every `LocalVqa` is a [`FusionEncoder`] through one blanket impl,
//!   whose pair scores are `log P(answer)` (and through [`super::generate::Generating`], whose
//!   scores read generated replies);
//! - the teacher-forced scoring loop ([`score_teacher_forced`]): the answer's tokens fed
//!   after the prompt, pairs of one prompt and answer length decoded as one batch (no padding
//!   that could change a result), each row's mean log-probability of its answer tokens;
//! - [`KvLayout`]: a prompt prefix's keys and values flattened into one image-state row and
//!   back (the state a [`FusionEncoder`] hands the runner per image).

use candle_core::{DType, Device, Tensor};

use super::Template;
use crate::hub::ModelFiles;
use crate::preprocess::Preprocessor;
use crate::{Error, ErrorKind, FusionEncoder, Result, ScoreKind};

/// One decoder layer's keys and values, `(b, kv_heads, t, head_dim)` each.
pub type LayerCache = (Tensor, Tensor);

/// A batch of replies' decoder state ([`LocalVqa::start_reply`]): every layer's keys and values
/// so far, and the position the next token takes.
pub struct ReplyState {
    pub caches: Vec<LayerCache>,
    pub next: usize,
}

impl ReplyState {
    /// The state of the rows `rows` only (replies that have not ended).
    pub fn select(&self, rows: &[u32]) -> candle_core::Result<Self> {
        let Some((first, _)) = self.caches.first() else { return Ok(Self { caches: Vec::new(), next: self.next }) };
        let rows = Tensor::new(rows, first.device())?;
        let caches = (self.caches.iter())
            .map(|(k, v)| Ok((k.index_select(&rows, 0)?, v.index_select(&rows, 0)?)))
            .collect::<candle_core::Result<_>>()?;
        Ok(Self { caches, next: self.next })
    }
}

/// A generative model scored here: its per-image state, its prompt for a caption and one
/// batched decoder pass. The blanket [`FusionEncoder`] impl runs the scoring loop over it.
pub trait LocalVqa {
    /// Loads the model from its files, asking with `template`.
    fn with_template(files: &ModelFiles, dtype: DType, device: &Device, template: Template) -> Result<Self>
    where
        Self: Sized;

    /// Loads the model from its files, asking `t2v_metrics`' question.
    fn load(files: &ModelFiles, dtype: DType, device: &Device) -> Result<Self>
    where
        Self: Sized,
    {
        Self::with_template(files, dtype, device, Template::t2v_metrics())
    }

    /// Where its weights live.
    fn weights_device(&self) -> &Device;

    fn image_preprocessor(&self) -> &Preprocessor;

    /// What is computed once per image, `(b, …)` for `(b, C, H, W)` pixels.
    fn image_states(&self, pixels: &Tensor) -> candle_core::Result<Tensor>;

    /// The state of images shown together in one prompt (each `(1, C, H, W)`, in order),
    /// `(1, …)`, for a family whose prompt takes several images; `None` for one that takes one.
    fn shown_together_states(&self, _images: &[Tensor]) -> Option<candle_core::Result<Tensor>> {
        None
    }

    /// The prompt's token ids for `caption` that follow what an image state holds, and the
    /// answer's ids.
    fn caption_ids(&self, caption: &str) -> Result<(Vec<u32>, Vec<u32>)>;

    /// The final hidden states `(b, s, hidden)` of `inputs` (`b` rows of one length `s`: a
    /// caption's prompt ids, `prompt` of them, then a reply or an answer but its last token),
    /// row `i` over `image_states` row `i`, and the decoder's state after them: the start of
    /// replies continued one token at a time ([`LocalVqa::continue_reply`]).
    fn start_reply(
        &self,
        image_states: &Tensor,
        inputs: &[Vec<u32>],
        prompt: usize,
    ) -> candle_core::Result<(Tensor, ReplyState)>;

    /// [`LocalVqa::start_reply`]'s hidden states alone: one batched decoder pass.
    fn decode_group(&self, image_states: &Tensor, inputs: &[Vec<u32>], prompt: usize) -> candle_core::Result<Tensor> {
        Ok(self.start_reply(image_states, inputs, prompt)?.0)
    }

    /// The hidden states `(b, 1, hidden)` of one new token per row after `state`, and the state
    /// after them.
    fn continue_reply(&self, state: &ReplyState, ids: &[u32]) -> candle_core::Result<(Tensor, ReplyState)>;

    /// Logits over the vocabulary at final hidden states `(…, hidden)`, in f32.
    fn logits(&self, hidden: &Tensor) -> candle_core::Result<Tensor>;

    /// Log-probabilities over the vocabulary at final hidden states `(…, hidden)`, in f32.
    fn log_probs(&self, hidden: &Tensor) -> candle_core::Result<Tensor> {
        candle_nn::ops::log_softmax(&self.logits(hidden)?, candle_core::D::Minus1)
    }

    /// Its tokenizer, which decodes a generated reply.
    fn tokenizer(&self) -> &tokenizers::Tokenizer;

    /// The question and answer it asks with.
    fn template(&self) -> &Template;

    /// The ids the whole prompt holds before the caption's part ([`LocalVqa::caption_ids`]),
    /// for one image or several shown together, in any order: what `transformers`' repetition
    /// penalty counts as seen besides the caption's ids and the reply's.
    fn ids_before_caption(&self, images: usize) -> Result<Vec<u32>>;
}

impl<T: LocalVqa> FusionEncoder for T {
    fn device(&self) -> &Device {
        self.weights_device()
    }

    fn preprocessor(&self) -> &Preprocessor {
        self.image_preprocessor()
    }

    fn encode_images(&self, pixels: &Tensor) -> Result<Tensor> {
        self.image_states(pixels).map_err(|e| Error::compute("encode images", e))
    }

    fn encode_shown_together(&self, images: &[Tensor]) -> Result<Tensor> {
        match self.shown_together_states(images) {
            Some(states) => states.map_err(|e| Error::compute("encode images shown together", e)),
            None => Err(crate::one_image_per_prompt()),
        }
    }

    fn score_pairs(&self, image_states: &Tensor, texts: &[&str]) -> Result<Tensor> {
        let scores = score_teacher_forced(self, image_states, texts)?;
        Tensor::from_vec(scores, texts.len(), self.device()).map_err(|e| Error::compute("collect scores", e))
    }

    fn score_kind(&self) -> ScoreKind {
        ScoreKind::LogProbability
    }

    fn shortlister(&self) -> Option<&dyn crate::DualEncoder> {
        None
    }
}

/// Each pair's `log P(answer)`, pair `i` being `(image_states[i], texts[i])`: the answer
/// teacher-forced after the caption's prompt, pairs of one prompt and answer length in one
/// batch over their images' states, each row's mean log-probability of its answer's tokens.
pub fn score_teacher_forced<M: LocalVqa + ?Sized>(
    model: &M,
    image_states: &Tensor,
    texts: &[&str],
) -> Result<Vec<f32>> {
    let ids: Vec<(Vec<u32>, Vec<u32>)> = texts.iter().map(|t| model.caption_ids(t)).collect::<Result<_>>()?;
    // Every answer token but the last is input too.
    let inputs: Vec<Vec<u32>> = ids.iter().map(|(p, a)| [p.as_slice(), &a[..a.len() - 1]].concat()).collect();
    let keys: Vec<(usize, usize)> = ids.iter().map(|(p, a)| (p.len(), a.len())).collect();
    let mut scores = vec![0.0f32; keys.len()];
    for group in groups_of(&keys) {
        let score_group = || -> candle_core::Result<Vec<f32>> {
            let rows = Tensor::new(group.iter().map(|&i| i as u32).collect::<Vec<_>>(), image_states.device())?;
            let batch: Vec<Vec<u32>> = group.iter().map(|&i| inputs[i].clone()).collect();
            let (prompt, answer) = keys[group[0]];
            let hidden = model.decode_group(&image_states.index_select(&rows, 0)?, &batch, prompt)?;
            // The answer's first token is predicted at the prompt's last position.
            let log_probs = model.log_probs(&hidden.narrow(1, prompt - 1, answer)?)?;
            let answers: Vec<&[u32]> = group.iter().map(|&i| ids[i].1.as_slice()).collect();
            mean_answer_log_ps(&log_probs, &answers)
        };
        let got = score_group().map_err(|e| Error::compute("score captions", e))?;
        group.iter().zip(got).for_each(|(&i, score)| scores[i] = score);
    }
    Ok(scores)
}

/// Each row's mean of its answer tokens' entries in `log_probs` `(b, answer length, vocab)`,
/// gathered on the device and read back in one copy.
pub fn mean_answer_log_ps(log_probs: &Tensor, answers: &[&[u32]]) -> candle_core::Result<Vec<f32>> {
    let n = answers.first().map_or(0, |a| a.len());
    let tokens = Tensor::from_vec(answers.concat(), (answers.len(), n, 1), log_probs.device())?;
    let picked = log_probs.gather(&tokens, 2)?.squeeze(2)?.to_vec2::<f32>()?;
    Ok(picked.iter().map(|row| (row.iter().map(|&lp| f64::from(lp)).sum::<f64>() / n as f64) as f32).collect())
}

/// Positions of `keys` grouped by equal key (a prompt's and an answer's lengths), groups in
/// the order of their first member: rows of one shape run as one batch, with no padding to
/// change a result.
pub fn groups_of<K: PartialEq + Copy>(keys: &[K]) -> Vec<Vec<usize>> {
    let mut groups: Vec<(K, Vec<usize>)> = Vec::new();
    for (i, &key) in keys.iter().enumerate() {
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(i),
            None => groups.push((key, vec![i])),
        }
    }
    groups.into_iter().map(|(_, members)| members).collect()
}

/// How a decoder's per-layer keys and values lie in one flat image-state row: layer by layer,
/// keys then values, each `(kv_heads, len, head_dim)`; with `positioned`, the rows are f32
/// and end with the position the caption starts at (exact in f32, not in half precision).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvLayout {
    pub layers: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub positioned: bool,
}

impl KvLayout {
    /// Per-layer caches of a batch `(b, …)` as `(b, flat)` rows, then `caption_start` (the
    /// position the caption's first token takes) where the layout is positioned.
    pub fn flatten(&self, caches: &[LayerCache], caption_start: u32) -> candle_core::Result<Tensor> {
        let dtype = |t: Tensor| if self.positioned { t.to_dtype(DType::F32) } else { Ok(t) };
        let mut flat = Vec::with_capacity(2 * caches.len() + 1);
        for (k, v) in caches {
            flat.push(dtype(k.flatten_from(1)?)?);
            flat.push(dtype(v.flatten_from(1)?)?);
        }
        if self.positioned {
            let b = caches.first().map_or(Ok(1), |(k, _)| k.dim(0))?;
            let device = caches.first().map_or(Device::Cpu, |(k, _)| k.device().clone());
            flat.push(Tensor::full(caption_start as f32, (b, 1), &device)?);
        }
        Tensor::cat(&flat, 1)
    }

    /// Rows of [`KvLayout::flatten`] back into per-layer caches in `dtype`, the number of
    /// positions they hold, and the caption's start position (0 where not positioned).
    pub fn unflatten(&self, states: &Tensor, dtype: DType) -> candle_core::Result<(Vec<LayerCache>, usize, u32)> {
        let (b, width) = states.dims2()?;
        let per_position = self.kv_heads * self.head_dim;
        let cached = if self.positioned { width.saturating_sub(1) } else { width };
        let per_layer = 2 * self.layers * per_position;
        if width == 0 || per_layer == 0 || cached % per_layer != 0 {
            candle_core::bail!("an image state of {width} values does not fit this model");
        }
        let len = cached / per_layer;
        let per = len * per_position;
        let caches = (0..self.layers)
            .map(|l| {
                let part = |i: usize| {
                    states
                        .narrow(1, (2 * l + i) * per, per)?
                        .reshape((b, self.kv_heads, len, self.head_dim))?
                        .to_dtype(dtype)
                };
                Ok((part(0)?, part(1)?))
            })
            .collect::<candle_core::Result<_>>()?;
        let first = if self.positioned {
            states.narrow(1, cached, 1)?.flatten_all()?.get(0)?.to_scalar::<f32>()? as u32
        } else {
            0
        };
        Ok((caches, len, first))
    }
}

/// `state` of each image of a `(b, …)` batch (a family whose images each have their own prompt
/// length), the rows concatenated: `(b, …)`.
pub fn each_image(
    pixels: &Tensor,
    state: impl Fn(&Tensor) -> candle_core::Result<Tensor>,
) -> candle_core::Result<Tensor> {
    let rows = (0..pixels.dim(0)?).map(|i| state(&pixels.get(i)?)).collect::<candle_core::Result<Vec<_>>>()?;
    Tensor::cat(&rows, 0)
}

/// The vision tower's output for the last few images a model ran through it, found again by
/// the pixels themselves: an image shown together with others in one prompt (VisMin's image
/// task: each item's images, then them together) has just been encoded alone, and its tower
/// then runs once, not twice. The same pixels through the same tower give the same output, so a
/// state is the same either way. Each output is held with its pixels (a reference, not a copy,
/// where the pixels are a whole tensor), and pixels are found equal by comparing every value on
/// their device, only when a model asks (no hashing on the way in, no copy to the host). At most
/// [`TowerMemo::IMAGES`] outputs are held.
#[derive(Debug)]
pub(crate) struct TowerMemo<T> {
    /// Each held output with its pixels, the oldest first.
    held: std::sync::Mutex<std::collections::VecDeque<(Tensor, T)>>,
    runs: std::sync::atomic::AtomicUsize,
}

impl<T> Default for TowerMemo<T> {
    fn default() -> Self {
        Self { held: Default::default(), runs: Default::default() }
    }
}

impl<T: Clone> TowerMemo<T> {
    /// Images kept: an item's images shown together are its last few encoded.
    const IMAGES: usize = 4;

    /// The tower's output for `pixels`: held, else `tower()` run and held.
    pub(crate) fn get_or(
        &self,
        pixels: &Tensor,
        tower: impl FnOnce() -> candle_core::Result<T>,
    ) -> candle_core::Result<T> {
        if let Some(held) = self.held(pixels)? {
            return Ok(held);
        }
        let output = tower()?;
        self.hold(pixels.clone(), output.clone());
        Ok(output)
    }

    /// The tower's output for each image of `images` `(b, …)`: those held, the others from one
    /// `tower` run over just them (`(m, …)` in, `m` outputs out; all `b` as given when none is
    /// held, so that a batch is computed as it would be without the memo).
    pub(crate) fn get_each_or(
        &self,
        images: &Tensor,
        tower: impl FnOnce(&Tensor) -> candle_core::Result<Vec<T>>,
    ) -> candle_core::Result<Vec<T>> {
        let rows = (0..images.dim(0)?).map(|i| images.get(i)).collect::<candle_core::Result<Vec<_>>>()?;
        let mut found: Vec<Option<T>> = rows.iter().map(|row| self.held(row)).collect::<candle_core::Result<_>>()?;
        let missing: Vec<u32> = (0..rows.len() as u32).filter(|&i| found[i as usize].is_none()).collect();
        if missing.is_empty() {
            return Ok(found.into_iter().flatten().collect());
        }
        let batch = match missing.len() == rows.len() {
            true => images.clone(),
            false => images.index_select(&Tensor::new(missing.as_slice(), images.device())?, 0)?,
        };
        let outputs = tower(&batch)?;
        if outputs.len() != missing.len() {
            candle_core::bail!("the tower gave {} outputs for {} images", outputs.len(), missing.len());
        }
        for (&i, output) in missing.iter().zip(outputs) {
            // A row is a view of the whole batch: held as its own copy, so that the batch goes.
            self.hold(rows[i as usize].copy()?, output.clone());
            found[i as usize] = Some(output);
        }
        Ok(found.into_iter().flatten().collect())
    }

    /// The output held for pixels equal to `pixels`, value for value.
    fn held(&self, pixels: &Tensor) -> candle_core::Result<Option<T>> {
        // A poisoned lock (a panic elsewhere) only costs the reuse.
        let Ok(held) = self.held.lock() else { return Ok(None) };
        for (theirs, output) in held.iter() {
            if theirs.dims() == pixels.dims() && theirs.dtype() == pixels.dtype() && same_values(theirs, pixels)? {
                return Ok(Some(output.clone()));
            }
        }
        Ok(None)
    }

    /// Holds one new tower output, letting the oldest go.
    fn hold(&self, pixels: Tensor, output: T) {
        self.runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Ok(mut held) = self.held.lock() {
            if held.len() == Self::IMAGES {
                held.pop_front();
            }
            held.push_back((pixels, output));
        }
    }

    /// How many images the tower ran on.
    pub(crate) fn runs(&self) -> usize {
        self.runs.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl TowerMemo<Tensor> {
    /// The tower's output `(b, …)` for `images` `(b, …)`, one `(…)` row per image: [`TowerMemo::get_each_or`]
    /// with `tower` giving a batch's output whole, which is returned as it is when no image was
    /// held (no copy of the rows into a new batch).
    pub(crate) fn get_batch_or(
        &self,
        images: &Tensor,
        tower: impl FnOnce(&Tensor) -> candle_core::Result<Tensor>,
    ) -> candle_core::Result<Tensor> {
        let mut whole = None;
        let rows = self.get_each_or(images, |batch| {
            let output = tower(batch)?;
            let rows = (0..output.dim(0)?).map(|i| output.get(i)).collect::<candle_core::Result<Vec<_>>>()?;
            if batch.dim(0)? == images.dim(0)? {
                whole = Some(output);
            }
            Ok(rows)
        })?;
        match whole {
            Some(output) => Ok(output),
            None => Tensor::stack(&rows, 0),
        }
    }
}

/// Whether two tensors of one shape hold the same values, computed where they are: their first
/// 4,096 values first (another image differs there at once), then all. A NaN equals nothing.
fn same_values(a: &Tensor, b: &Tensor) -> candle_core::Result<bool> {
    let (a, b) = (a.flatten_all()?.to_dtype(DType::F32)?, b.flatten_all()?.to_dtype(DType::F32)?);
    let equal = |a: &Tensor, b: &Tensor| -> candle_core::Result<bool> {
        Ok((a - b)?.abs()?.max(0)?.to_scalar::<f32>()? == 0.0)
    };
    let head = a.dim(0)?.min(4096);
    Ok(equal(&a.narrow(0, 0, head)?, &b.narrow(0, 0, head)?)? && equal(&a, &b)?)
}

/// A checkpoint's `tokenizer.json`.
pub fn load_tokenizer(path: &std::path::Path) -> Result<tokenizers::Tokenizer> {
    tokenizers::Tokenizer::from_file(path)
        .map_err(|e| Error::new(ErrorKind::Tokenizer, format!("load the tokenizer {}: {e}", path.display())))
}

/// `text`'s token ids, without special tokens added.
pub fn encode(tokenizer: &tokenizers::Tokenizer, text: &str) -> Result<Vec<u32>> {
    tokenizer
        .encode(text, false)
        .map(|e| e.get_ids().to_vec())
        .map_err(|e| Error::new(ErrorKind::Tokenizer, format!("tokenize {text:?}: {e}")))
}

/// `text`, the part of a prompt that holds `caption`, tokenised; refused where it holds one of
/// `markers`, the tokens that stand for the image in the family's prompt: its own processor or
/// model refuses such a caption (transformers: "Prompt contained 2 image tokens but received 1
/// images", "Image features and image tokens do not match") or moves the image there
/// (PaliGemma's `<image>`), so no score would be its. Other special tokens' text becomes those
/// tokens, as the processors make it.
pub fn encode_caption_prompt(
    tokenizer: &tokenizers::Tokenizer,
    text: &str,
    caption: &str,
    markers: &[u32],
) -> Result<Vec<u32>> {
    let ids = encode(tokenizer, text)?;
    match ids.iter().find(|id| markers.contains(id)) {
        None => Ok(ids),
        Some(&id) => Err(image_marker_in_caption(caption, &tokenizer.id_to_token(id).unwrap_or_default())),
    }
}

/// The refusal of a caption holding `marker`, the text that stands for the image in a family's
/// prompt (see [`encode_caption_prompt`]).
pub fn image_marker_in_caption(caption: &str, marker: &str) -> Error {
    Error::new(
        ErrorKind::UnusableInput,
        format!(
            "score the caption {caption:?}: it holds `{marker}`, which stands for the image in this model's prompt \
             (its reference would refuse the caption or place an image there); write it without that text"
        ),
    )
}

/// The ids of the answer whose probability scores `caption`.
pub fn answer_ids(tokenizer: &tokenizers::Tokenizer, template: &Template, caption: &str) -> Result<Vec<u32>> {
    let answer = encode(tokenizer, &template.answer_for(caption))?;
    if answer.is_empty() {
        return Err(Error::new(ErrorKind::Tokenizer, "tokenize the answer: it has no tokens"));
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caches_flatten_and_come_back_whole() -> candle_core::Result<()> {
        let device = Device::Cpu;
        let caches: Vec<LayerCache> = (0..3)
            .map(|l| {
                let k = Tensor::arange(0f32, 2. * 2. * 5. * 4., &device)?.reshape((2, 2, 5, 4))?;
                Ok(((&k + l as f64)?, (&k * -(l as f64 + 1.0))?))
            })
            .collect::<candle_core::Result<_>>()?;
        for positioned in [false, true] {
            let layout = KvLayout { layers: 3, kv_heads: 2, head_dim: 4, positioned };
            let flat = layout.flatten(&caches, 41)?;
            assert_eq!(flat.dims2()?, (2, 3 * 2 * 2 * 5 * 4 + usize::from(positioned)));
            let (back, len, first) = layout.unflatten(&flat, DType::F32)?;
            assert_eq!((len, first), (5, if positioned { 41 } else { 0 }));
            for ((k, v), (bk, bv)) in caches.iter().zip(&back) {
                assert_eq!(k.flatten_all()?.to_vec1::<f32>()?, bk.flatten_all()?.to_vec1::<f32>()?);
                assert_eq!(v.flatten_all()?.to_vec1::<f32>()?, bv.flatten_all()?.to_vec1::<f32>()?);
            }
            let wrong = KvLayout { head_dim: 3, ..layout };
            assert!(wrong.unflatten(&flat, DType::F32).is_err());
        }
        Ok(())
    }

    #[test]
    fn rows_of_one_shape_group_in_order_of_first_member() {
        assert_eq!(groups_of(&[(3, 1), (2, 1), (3, 1), (2, 2)]), vec![vec![0, 2], vec![1], vec![3]]);
    }
}
