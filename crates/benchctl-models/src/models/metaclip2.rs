//! MetaCLIP 2 (Chuang et al., "Meta CLIP 2: A Worldwide Scaling Recipe", 2025,
//! <https://arxiv.org/abs/2507.22062>) in Hugging Face layout (`MetaClip2Model`), e.g.
//! <https://huggingface.co/facebook/metaclip-2-worldwide-huge-quickgelu>.
//!
//! CLIP's towers under CLIP's tensor names ([`super::clip`]); what sets it apart:
//! - a multilingual sentencepiece vocabulary: XLM-V's 901,629 pieces in the worldwide
//!   checkpoints, texts as `<s> pieces… </s>`; mT5's in the `mt5` ones, texts as
//!   `pieces… </s>` (no start token); cut to the context keeping `</s>`;
//! - the text pooled at the first `</s>` (`eos_token_id`: 2 for XLM-V, 1 for mT5), without the
//!   largest-id rule `CLIPTextModel` applies to configs whose `eos_token_id` is 2 — where the
//!   authors' `WorldWideCLIP` pools (`text == 2`) and `mT5CLIP` too (`(text > 1).sum(-1)`,
//!   the position after the text's pieces);
//! - captions as written: the authors' `get_tokenizer` calls the `transformers` tokenizer with
//!   no cleaning, as the model card does (open_clip's port of the worldwide configs cleans them
//!   with ftfy and HTML unescaping first, which benchctl does not follow).

use candle_core::{DType, Device};

use super::clip::{Clip, ClipConfig, ClipEncoder};
use crate::architecture::{Architecture, ArchitectureSpec, BenchTowers, CaptionLimit, ScoreHead, TextPrep};
use crate::hub::{ModelFiles, HF_LAYOUT};
use crate::preprocess::Preprocessor;
use crate::tokenizer::{CaptionCleaning, ClipTokenizer, StartToken};
use crate::{Error, ErrorKind, Result};

/// The start token of MetaCLIP 2's XLM-V vocabulary (its mT5 one has none) and the end token
/// of both.
const START: &str = "<s>";
const END: &str = "</s>";

/// The tokenizer of `files` for `config`, whose `eos_token_id` must be its `</s>`: the text is
/// pooled there.
fn tokenizer(files: &ModelFiles, config: &ClipConfig) -> Result<ClipTokenizer> {
    let tc = &config.text_config;
    let (path, context, start) = (&files.tokenizer, tc.max_position_embeddings, StartToken::IfInVocabulary(START));
    let tokenizer = ClipTokenizer::with_specials(path, context, CaptionCleaning::AsWritten, start, END)?;
    if tokenizer.eos() != tc.eos_token_id || tokenizer.eos() as usize >= tc.vocab_size {
        return Err(Error::new(
            ErrorKind::Tokenizer,
            format!(
                "use tokenizer {}: its `</s>` is {}, but {}'s text_config pools at eos_token_id {} of a vocabulary of {}",
                files.tokenizer.display(),
                tokenizer.eos(),
                files.config.display(),
                tc.eos_token_id,
                tc.vocab_size
            ),
        ));
    }
    Ok(tokenizer)
}

/// Loads a MetaCLIP 2 checkpoint as a CLIP [`ClipEncoder`] pooling at the first `</s>`.
pub fn load(files: &ModelFiles, dtype: DType, device: &Device) -> Result<ClipEncoder> {
    let config = ClipConfig::from_file(&files.config)?;
    let tokenizer = tokenizer(files, &config)?;
    let size = config.vision_config.image_size;
    let preprocessor = Preprocessor::for_hf_model(files, Preprocessor::hf_clip(size), size)?;
    let model = Clip::load(config, &files.weights, dtype, device)?.pooling_at_first_eos();
    Ok(ClipEncoder::from_parts(model, tokenizer, preprocessor))
}

/// MetaCLIP 2 in Hugging Face layout, as [`crate::registry::ARCHITECTURES`] lists it.
pub const ARCHITECTURE: Architecture = Architecture::declare(&ArchitectureSpec {
    name: "metaclip2",
    model_types: &["metaclip_2"],
    layout: HF_LAYOUT,
    timm_towers: &[],
    released_as_torch_checkpoint: false,
    heads: &[ScoreHead::Contrastive],
    text_preps: TextPrep::AUTHORS_ONLY,
    default_preprocessor: |size| Some(Preprocessor::hf_clip(size)),
    caption_limit: |files, _| {
        let config = ClipConfig::from_file(&files.config)?;
        let tokenizer = tokenizer(files, &config)?;
        Ok(CaptionLimit::new(config.text_config.max_position_embeddings, move |t| tokenizer.tokens_cut(t)))
    },
    load: |_, files, dtype, device| Ok(crate::Model::Dual(Box::new(load(files, dtype, device)?))),
    bench_towers: BenchTowers::Clip,
    pre_captions: false,
    patch_budget: false,
    processor_pixels: false,
    images_together: false,
    generates_replies: false,
});
