//! The zoo: model ids and what each resolves to.
//!
//! Every entry pins a hub revision (a commit), so a run names exactly the weights it used,
//! and states what `benchctl models` shows: input size and preprocessing, activation,
//! tokenizer and context length, and the score kinds it offers.

use crate::hub::{Layout, ModelFiles, HF_LAYOUT, HF_SHARDED_LAYOUT, OPEN_CLIP_LAYOUT};
use crate::models::{blip, clip::ClipEncoder, clip_openai, fiber, gemma3, paligemma, qwen3vl, siglip::SiglipEncoder};
use crate::preprocess::{Preprocessor, HALF, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD};
use crate::{Error, ErrorKind, Model, Result};

/// The architectures benchctl implements, one module each under [`crate::models`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// CLIP in Hugging Face layout ([`crate::models::clip`]).
    Clip,
    /// CLIP in OpenCLIP's own naming and files ([`crate::models::clip_openai`]).
    OpenClip,
    /// SigLIP ([`crate::models::siglip`]).
    Siglip,
    /// BLIP for retrieval, ITM and ITC heads ([`crate::models::blip`]).
    Blip,
    /// FIBER's coarse-grained model, ITM and ITC heads ([`crate::models::fiber`]).
    Fiber,
    /// Gemma 3, a generative model scored by VQAScore ([`crate::models::gemma3`]).
    Gemma3,
    /// PaliGemma, a generative model scored by VQAScore ([`crate::models::paligemma`]).
    PaliGemma,
    /// Qwen3-VL, a generative model scored by VQAScore, each image at its own size
    /// ([`crate::models::qwen3vl`]).
    Qwen3Vl,
}

impl Architecture {
    pub fn name(&self) -> &'static str {
        match self {
            Architecture::Clip => "clip",
            Architecture::OpenClip => "openclip",
            Architecture::Siglip => "siglip",
            Architecture::Blip => "blip",
            Architecture::Fiber => "fiber",
            Architecture::Gemma3 => "gemma3",
            Architecture::PaliGemma => "paligemma",
            Architecture::Qwen3Vl => "qwen3_vl",
        }
    }

    /// The files this architecture is loaded from.
    pub fn layout(&self) -> Layout {
        match self {
            Architecture::OpenClip => OPEN_CLIP_LAYOUT,
            // Gemma 3's (4B and up) and PaliGemma's checkpoints are published in shards.
            Architecture::Gemma3 | Architecture::PaliGemma => HF_SHARDED_LAYOUT,
            _ => HF_LAYOUT,
        }
    }

    /// The score heads it offers, the default first.
    pub fn heads(&self) -> &'static [ScoreHead] {
        match self {
            Architecture::Blip | Architecture::Fiber => &[ScoreHead::Itm, ScoreHead::Itc],
            Architecture::Siglip => &[ScoreHead::Sigmoid],
            Architecture::Gemma3 | Architecture::PaliGemma | Architecture::Qwen3Vl => &[ScoreHead::Vqa],
            _ => &[ScoreHead::Contrastive],
        }
    }
}

/// Which of a model's scores a run uses (`--score`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScoreHead {
    /// `exp(logit_scale) · cos`, CLIP's logits.
    Contrastive,
    /// `σ(exp(logit_scale) · cos + logit_bias)`, SigLIP's match probability.
    Sigmoid,
    /// Image-text matching: a fusion pass per pair, the match logit (BLIP, FIBER).
    Itm,
    /// Image-text contrastive: cosine of projected features (BLIP, FIBER).
    Itc,
    /// VQAScore: a generative model's `log P("Yes")` to "Does this figure show …?" (Gemma 3,
    /// or a model behind a server).
    Vqa,
}

impl ScoreHead {
    pub fn name(&self) -> &'static str {
        match self {
            ScoreHead::Contrastive => "contrastive",
            ScoreHead::Sigmoid => "sigmoid",
            ScoreHead::Itm => "itm",
            ScoreHead::Itc => "itc",
            ScoreHead::Vqa => "vqascore",
        }
    }

    /// Whether the head scores each pair jointly (a [`crate::FusionEncoder`]) rather than
    /// from two embeddings (a [`crate::DualEncoder`]).
    pub fn is_fusion(&self) -> bool {
        matches!(self, ScoreHead::Itm | ScoreHead::Vqa)
    }

    /// `itm`, `itc`, or the default head's own name.
    pub fn parse(name: &str) -> Option<Self> {
        [ScoreHead::Contrastive, ScoreHead::Sigmoid, ScoreHead::Itm, ScoreHead::Itc, ScoreHead::Vqa]
            .into_iter()
            .find(|h| h.name() == name)
    }
}

/// One zoo entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelEntry {
    pub id: &'static str,
    pub repo: &'static str,
    /// The pinned hub revision (a commit).
    pub revision: &'static str,
    pub architecture: Architecture,
    pub description: &'static str,
    /// Input size and preprocessing, as `benchctl models` lists it.
    pub preprocessing: &'static str,
    /// The MLP activation the weights were trained with.
    pub activation: &'static str,
    /// Tokenizer and context length.
    pub tokenizer: &'static str,
}

const CLIP_PREP_224: &str = "224 px, shorter side + centre crop, bicubic, OpenAI mean/std";
const CLIP_BPE: &str = "CLIP BPE, 77 tokens";

/// Every model in the zoo.
pub const MODELS: &[ModelEntry] = &[
    ModelEntry {
        id: "clip-vit-b32",
        repo: "openai/clip-vit-base-patch32",
        revision: "3d74acf9a28c67741b2f4f2ea7635f0aaf6f0268",
        architecture: Architecture::Clip,
        description: "OpenAI CLIP ViT-B/32 (Radford et al., 2021)",
        preprocessing: CLIP_PREP_224,
        activation: "quick_gelu",
        tokenizer: CLIP_BPE,
    },
    ModelEntry {
        id: "clip-vit-b16",
        repo: "openai/clip-vit-base-patch16",
        revision: "57c216476eefef5ab752ec549e440a49ae4ae5f3",
        architecture: Architecture::Clip,
        description: "OpenAI CLIP ViT-B/16 (Radford et al., 2021)",
        preprocessing: CLIP_PREP_224,
        activation: "quick_gelu",
        tokenizer: CLIP_BPE,
    },
    ModelEntry {
        id: "clip-vit-l14",
        repo: "openai/clip-vit-large-patch14",
        revision: "32bd64288804d66eefd0ccbe215aa642df71cc41",
        architecture: Architecture::Clip,
        description: "OpenAI CLIP ViT-L/14 (Radford et al., 2021)",
        preprocessing: CLIP_PREP_224,
        activation: "quick_gelu",
        tokenizer: CLIP_BPE,
    },
    ModelEntry {
        id: "clip-vit-l14-336",
        repo: "openai/clip-vit-large-patch14-336",
        revision: "ce19dc912ca5cd21c8a653c79e251e808ccabcd1",
        architecture: Architecture::Clip,
        description: "OpenAI CLIP ViT-L/14 at 336 px (Radford et al., 2021)",
        preprocessing: "336 px, shorter side + centre crop, bicubic, OpenAI mean/std",
        activation: "quick_gelu",
        tokenizer: CLIP_BPE,
    },
    ModelEntry {
        id: "openclip-vit-b32-laion2b",
        repo: "laion/CLIP-ViT-B-32-laion2B-s34B-b79K",
        revision: "1a25a446712ba5ee05982a381eed697ef9b435cf",
        architecture: Architecture::OpenClip,
        description: "OpenCLIP ViT-B/32 trained on LAION-2B (Cherti et al., 2023), open_clip naming",
        preprocessing: CLIP_PREP_224,
        activation: "gelu",
        tokenizer: CLIP_BPE,
    },
    ModelEntry {
        id: "siglip-base-patch16-224",
        repo: "google/siglip-base-patch16-224",
        revision: "7fd15f0689c79d79e38b1c2e2e2370a7bf2761ed",
        architecture: Architecture::Siglip,
        description: "SigLIP B/16 (Zhai et al., 2023), sigmoid scores with logit bias",
        preprocessing: "224 px, stretched square, bicubic, mean/std 0.5 ([-1, 1])",
        activation: "gelu_pytorch_tanh",
        tokenizer: "SigLIP sentencepiece, padded to 64 tokens",
    },
    ModelEntry {
        id: "blip-itm-base-coco",
        repo: "Salesforce/blip-itm-base-coco",
        revision: "7eaa90c11850c0b17fc38c6a11e7d88bd6ac231f",
        architecture: Architecture::Blip,
        description: "BLIP ViT-B retrieval model fine-tuned on COCO (Li et al., 2022)",
        preprocessing: "384 px, stretched square, bicubic, OpenAI mean/std",
        activation: "gelu",
        tokenizer: "BERT WordPiece (uncased), 35 tokens",
    },
    ModelEntry {
        id: "blip-itm-large-coco",
        repo: "Salesforce/blip-itm-large-coco",
        revision: "fef05cafc05298067cbbca00b125749394a77a6f",
        architecture: Architecture::Blip,
        description: "BLIP ViT-L retrieval model fine-tuned on COCO (Li et al., 2022)",
        preprocessing: "384 px, stretched square, bicubic, OpenAI mean/std",
        activation: "gelu",
        tokenizer: "BERT WordPiece (uncased), 35 tokens",
    },
    ModelEntry {
        id: "gemma-3-4b-it",
        repo: "google/gemma-3-4b-it",
        revision: "093f9f388b31de276ce2de164bdc2081324b9767",
        architecture: Architecture::Gemma3,
        description: "Gemma 3 4B instruction-tuned (Gemma Team, 2025), scored by VQAScore; gated: accept its licence on the hub and set HF_TOKEN",
        preprocessing: GEMMA3_896,
        activation: "gelu_pytorch_tanh",
        tokenizer: GEMMA3_TOKENIZER,
    },
    ModelEntry {
        id: "gemma-3-12b-it",
        repo: "google/gemma-3-12b-it",
        revision: "96b6f1eccf38110c56df3a15bffe176da04bfd80",
        architecture: Architecture::Gemma3,
        description: "Gemma 3 12B instruction-tuned (Gemma Team, 2025), t2v_metrics' default Gemma 3, scored by VQAScore; gated: accept its licence on the hub and set HF_TOKEN",
        preprocessing: GEMMA3_896,
        activation: "gelu_pytorch_tanh",
        tokenizer: GEMMA3_TOKENIZER,
    },
    ModelEntry {
        id: "paligemma-3b-mix-224",
        repo: "google/paligemma-3b-mix-224",
        revision: "d1d8734c9c3ad0ccfeea4afc270faa356c2ba515",
        architecture: Architecture::PaliGemma,
        description: "PaliGemma 3B mix at 224 px (Beyer et al., 2024), scored by VQAScore as t2v_metrics' PaliGemma; gated: accept its licence on the hub and set HF_TOKEN",
        preprocessing: "224 px, stretched square, bicubic, mean/std 0.5",
        activation: "gelu_pytorch_tanh",
        tokenizer: "Gemma SentencePiece (257k); image tokens, <bos>, the question, \\n",
    },
];

const GEMMA3_896: &str = "896 px, stretched square, bilinear, mean/std 0.5";
const GEMMA3_TOKENIZER: &str = "Gemma SentencePiece (262k); t2v_metrics' prompt and \"Yes\"";

/// A checkpoint distributed outside the Hugging Face hub: `benchctl models` lists it with
/// where to download it, and `--model-path FILE` loads the downloaded file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DownloadEntry {
    pub id: &'static str,
    /// Where its publisher's README links it.
    pub url: &'static str,
    pub architecture: Architecture,
    /// The score heads the checkpoint has (a FIBER ITC fine-tune has no ITM head).
    pub heads: &'static [ScoreHead],
    pub description: &'static str,
    pub preprocessing: &'static str,
    pub tokenizer: &'static str,
}

const FIBER_TOKENIZER: &str = "roberta-base byte-level BPE, 50 tokens";
const FIBER_384: &str = "384 px, stretched square, bicubic, ImageNet mean/std (albef)";
const FIBER_576: &str = "576 px, stretched square, bicubic, ImageNet mean/std (albef)";

/// FIBER's coarse-grained checkpoints, as `coarse_grained/README.md` of microsoft/FIBER links
/// them (PyTorch Lightning `.ckpt` files on Azure blob storage, not on the hub). The image
/// size is read from each checkpoint; ITM fine-tunes run at 384 px, ITC ones at 576 px.
pub const FIBER_CHECKPOINTS: &[DownloadEntry] = &[
    DownloadEntry {
        id: "fiber-coco-itm",
        url: "https://datarelease.blob.core.windows.net/fiber/coarse_grained/fiber_coco_irtr_itm.ckpt",
        architecture: Architecture::Fiber,
        heads: &[ScoreHead::Itm, ScoreHead::Itc],
        description: "FIBER-base fine-tuned on COCO retrieval with ITM (Dou et al., 2022)",
        preprocessing: FIBER_384,
        tokenizer: FIBER_TOKENIZER,
    },
    DownloadEntry {
        id: "fiber-coco-itc",
        url: "https://datarelease.blob.core.windows.net/fiber/coarse_grained/fiber_coco_irtr_itc.ckpt",
        architecture: Architecture::Fiber,
        heads: &[ScoreHead::Itc],
        description: "FIBER-base fine-tuned on COCO retrieval with ITC (Dou et al., 2022)",
        preprocessing: FIBER_576,
        tokenizer: FIBER_TOKENIZER,
    },
    DownloadEntry {
        id: "fiber-f30k-itm",
        url: "https://datarelease.blob.core.windows.net/fiber/coarse_grained/fiber_f30k_irtr_itm.ckpt",
        architecture: Architecture::Fiber,
        heads: &[ScoreHead::Itm, ScoreHead::Itc],
        description: "FIBER-base fine-tuned on Flickr30k retrieval with ITM (Dou et al., 2022)",
        preprocessing: FIBER_384,
        tokenizer: FIBER_TOKENIZER,
    },
    DownloadEntry {
        id: "fiber-f30k-itc",
        url: "https://datarelease.blob.core.windows.net/fiber/coarse_grained/fiber_f30k_irtr_itc.ckpt",
        architecture: Architecture::Fiber,
        heads: &[ScoreHead::Itc],
        description: "FIBER-base fine-tuned on Flickr30k retrieval with ITC (Dou et al., 2022)",
        preprocessing: FIBER_576,
        tokenizer: FIBER_TOKENIZER,
    },
    DownloadEntry {
        id: "fiber-pretrain",
        url: "https://datarelease.blob.core.windows.net/fiber/coarse_grained/fiber_pretrain.ckpt",
        architecture: Architecture::Fiber,
        heads: &[ScoreHead::Itm, ScoreHead::Itc],
        description: "FIBER-base pre-trained on GCC+SBU+COCO+VG (Dou et al., 2022); 40 text tokens in pretraining",
        preprocessing: FIBER_384,
        tokenizer: FIBER_TOKENIZER,
    },
];

/// The entry with this id, or an error listing the known ones (and, for a checkpoint that
/// is not on the hub, where to download it).
pub fn find(id: &str) -> Result<&'static ModelEntry> {
    if let Some(download) = FIBER_CHECKPOINTS.iter().find(|m| m.id == id) {
        return Err(Error::new(
            ErrorKind::MissingFile,
            format!(
                "find model `{id}`: it is not on the Hugging Face hub; download {} and pass --model-path with the file (roberta-base's tokenizer.json, or vocab.json and merges.txt, beside it)",
                download.url
            ),
        ));
    }
    MODELS.iter().find(|m| m.id == id).ok_or_else(|| {
        let known: Vec<&str> = MODELS.iter().map(|m| m.id).chain(FIBER_CHECKPOINTS.iter().map(|m| m.id)).collect();
        Error::new(
            ErrorKind::UnknownModel,
            format!("find model `{id}`: known models are {} (or pass --model-path DIR)", known.join(", ")),
        )
    })
}

/// The preprocessing a zoo entry's checkpoint ships with, at the size its `preprocessing`
/// line starts with (the checkpoint's own `preprocessor_config.json` can still change it
/// when the model loads); for benchmarks that run without the checkpoint's files.
pub fn default_preprocessor(id: &str) -> Result<Preprocessor> {
    let (architecture, line) = match MODELS.iter().find(|m| m.id == id) {
        Some(m) => (m.architecture, m.preprocessing),
        None => FIBER_CHECKPOINTS
            .iter()
            .find(|m| m.id == id)
            .map(|m| (m.architecture, m.preprocessing))
            .ok_or_else(|| find(id).err().unwrap_or_else(|| Error::new(ErrorKind::UnknownModel, id.to_string())))?,
    };
    let size = line.split(' ').next().and_then(|n| n.parse().ok()).unwrap_or(224);
    Ok(match architecture {
        Architecture::Clip => Preprocessor::hf_clip(size),
        Architecture::OpenClip => Preprocessor::openai_clip(size),
        Architecture::Siglip => Preprocessor::stretch(size, HALF, HALF),
        Architecture::Blip => Preprocessor::stretch(size, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD),
        Architecture::Fiber => crate::models::fiber::preprocessor(size),
        Architecture::Gemma3 => Preprocessor::stretch(size, HALF, HALF).bilinear(),
        Architecture::PaliGemma => Preprocessor::stretch(size, HALF, HALF),
        Architecture::Qwen3Vl => {
            return Err(Error::new(
                ErrorKind::BadConfig,
                format!("use {id}: a Qwen3-VL preprocessor comes from its config"),
            ))
        }
    })
}

/// The architecture of local model files: a PyTorch checkpoint without a `config.json` is
/// FIBER (the only zoo architecture released that way), else [`detect_architecture`].
pub fn architecture_of(files: &ModelFiles) -> Result<Architecture> {
    if !files.config.exists() && crate::hub::is_torch_checkpoint(&files.weights) {
        return Ok(Architecture::Fiber);
    }
    detect_architecture(&files.config)
}

/// The architecture of a local model directory: OpenCLIP when its config is
/// `open_clip_config.json`, else from `model_type` in `config.json`.
pub fn detect_architecture(config: &std::path::Path) -> Result<Architecture> {
    if config.file_name().is_some_and(|n| n == OPEN_CLIP_LAYOUT.config) {
        return Ok(Architecture::OpenClip);
    }
    let value: serde_json::Value = crate::models::read_config(config)?;
    match value.get("model_type").and_then(|v| v.as_str()) {
        Some("clip") => Ok(Architecture::Clip),
        Some("siglip") => Ok(Architecture::Siglip),
        Some("blip") => Ok(Architecture::Blip),
        Some("fiber") => Ok(Architecture::Fiber),
        Some("gemma3") => Ok(Architecture::Gemma3),
        Some("paligemma") => Ok(Architecture::PaliGemma),
        Some("qwen3_vl") => Ok(Architecture::Qwen3Vl),
        Some(other) => Err(Error::new(
            ErrorKind::BadConfig,
            format!(
                "use {}: model_type `{other}` is not supported (supported: clip, siglip, blip, fiber, gemma3, paligemma, qwen3_vl)",
                config.display()
            ),
        )),
        None => Err(Error::new(ErrorKind::BadConfig, format!("use {}: it has no `model_type` key", config.display()))),
    }
}

/// The head to use: `requested` if the architecture has it, else its default.
pub fn choose_head(architecture: Architecture, requested: Option<&str>) -> Result<ScoreHead> {
    let heads = architecture.heads();
    match requested {
        None => Ok(heads[0]),
        Some(name) => ScoreHead::parse(name).filter(|h| heads.contains(h)).ok_or_else(|| {
            let names: Vec<&str> = heads.iter().map(ScoreHead::name).collect();
            Error::new(
                ErrorKind::BadConfig,
                format!("use --score {name}: a {} model offers {}", architecture.name(), names.join(", ")),
            )
        }),
    }
}

/// Loads a model of `architecture` from its files, scoring with `head`.
pub fn load(
    architecture: Architecture,
    head: ScoreHead,
    files: &ModelFiles,
    dtype: candle_core::DType,
    device: &candle_core::Device,
) -> Result<Model> {
    Ok(match (architecture, head) {
        (Architecture::Clip, _) => Model::Dual(Box::new(ClipEncoder::load(files, dtype, device)?)),
        (Architecture::OpenClip, _) => Model::Dual(Box::new(clip_openai::load_open_clip(files, dtype, device)?)),
        (Architecture::Siglip, _) => Model::Dual(Box::new(SiglipEncoder::load(files, dtype, device)?)),
        (Architecture::Blip, head) if head.is_fusion() => {
            Model::Fusion(Box::new(blip::BlipItm::load(files, dtype, device)?))
        }
        (Architecture::Blip, _) => Model::Dual(Box::new(blip::BlipItc::load(files, dtype, device)?)),
        (Architecture::Fiber, head) if head.is_fusion() => {
            Model::Fusion(Box::new(fiber::FiberItm::load(files, dtype, device)?))
        }
        (Architecture::Fiber, _) => Model::Dual(Box::new(fiber::FiberItc::load(files, dtype, device)?)),
        (Architecture::Gemma3, _) => Model::Fusion(Box::new(gemma3::Gemma3Vqa::load(files, dtype, device)?)),
        (Architecture::PaliGemma, _) => Model::Fusion(Box::new(paligemma::PaliGemmaVqa::load(files, dtype, device)?)),
        (Architecture::Qwen3Vl, _) => Model::Fusion(Box::new(qwen3vl::Qwen3VlVqa::load(files, dtype, device)?)),
    })
}

/// How a model's tokenizer fits captions to its context: read from its config and tokenizer
/// files alone (no weights), so a run that finds every embedding cached still counts the
/// captions its model truncates.
pub struct CaptionLimit {
    /// Tokens the context holds, special tokens included (CLIP 77, SigLIP 64, BLIP 35); 0
    /// when unknown.
    pub context: usize,
    cut: TokensCut,
}

/// A tokenizer's count of the tokens it drops from a caption.
type TokensCut = Box<dyn Fn(&str) -> Result<usize> + Send + Sync>;

impl CaptionLimit {
    /// No limit known (a model behind a server, whose tokenizer benchctl does not have).
    pub fn unlimited() -> Self {
        CaptionLimit { context: 0, cut: Box::new(|_| Ok(0)) }
    }

    /// The number of the caption's tokens the model's tokenizer drops (0 when it fits).
    pub fn tokens_cut(&self, caption: &str) -> Result<usize> {
        (self.cut)(caption)
    }
}

impl std::fmt::Debug for CaptionLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptionLimit").field("context", &self.context).finish()
    }
}

/// The caption limit of a model of this architecture with these files.
pub fn caption_limit(architecture: Architecture, files: &ModelFiles) -> Result<CaptionLimit> {
    use crate::tokenizer::{BertTokenizer, ClipTokenizer, SiglipTokenizer};
    Ok(match architecture {
        Architecture::Clip | Architecture::OpenClip => {
            let context = match architecture {
                Architecture::OpenClip => {
                    crate::models::clip_openai::OpenClipFile::from_file(&files.config)?
                        .clip_config()
                        .text_config
                        .max_position_embeddings
                }
                _ => crate::models::clip::ClipConfig::from_file(&files.config)?.text_config.max_position_embeddings,
            };
            let tokenizer = ClipTokenizer::from_file(&files.tokenizer, context)?;
            CaptionLimit { context, cut: Box::new(move |t| tokenizer.tokens_cut(t)) }
        }
        Architecture::Siglip => {
            let config = crate::models::siglip::SiglipConfig::from_file(&files.config)?;
            let tc = &config.text_config;
            let tokenizer = SiglipTokenizer::from_file(&files.tokenizer, tc.max_position_embeddings, tc.pad_token_id)?;
            CaptionLimit { context: tc.max_position_embeddings, cut: Box::new(move |t| tokenizer.tokens_cut(t)) }
        }
        Architecture::Blip => {
            let config = crate::models::blip::BlipConfig::from_file(&files.config)?;
            let context = crate::models::blip::BLIP_MAX_TEXT_LEN.min(config.text_config.max_position_embeddings);
            let tokenizer = BertTokenizer::from_file(&files.tokenizer, context)?;
            CaptionLimit { context, cut: Box::new(move |t| tokenizer.tokens_cut(t)) }
        }
        Architecture::Fiber => {
            let config = fiber::FiberConfig::from_file_or_default(&files.config)?;
            let context = config.text_context();
            let tokenizer = crate::tokenizer::RobertaTokenizer::from_file(&files.tokenizer, context)?;
            CaptionLimit { context, cut: Box::new(move |t| tokenizer.tokens_cut(t)) }
        }
        // A prompt of a few hundred tokens in a context of 8k or more: no caption is cut.
        Architecture::Gemma3 => CaptionLimit {
            context: gemma3::Gemma3Config::from_file(&files.config)?.text_config.max_position_embeddings,
            cut: Box::new(|_| Ok(0)),
        },
        Architecture::PaliGemma => CaptionLimit {
            context: paligemma::PaliGemmaConfig::from_file(&files.config)?.text_config.max_position_embeddings,
            cut: Box::new(|_| Ok(0)),
        },
        Architecture::Qwen3Vl => CaptionLimit {
            context: qwen3vl::Qwen3VlConfig::from_file(&files.config)?.text_config.max_position_embeddings,
            cut: Box::new(|_| Ok(0)),
        },
    })
}
