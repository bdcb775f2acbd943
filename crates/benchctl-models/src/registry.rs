//! The zoo: model ids and what each resolves to.
//!
//! Every entry pins a hub revision (a commit), so a run names exactly the weights it used, or,
//! where no commit could be verified when it was added (the hub was out of reach), names
//! `main`: the hub cache then keeps the commit `main` resolved to at its first download
//! (`refs/main`), and each run records that commit. Every entry states what `benchctl models` shows: input size and preprocessing, activation,
//! tokenizer and context length, and the score kinds it offers.

use crate::hub::ModelFiles;
use crate::models::eva::{eva02, pe_core};
use crate::models::{
    blip, clip, clip_openai, clip_t5, fiber, gemma3, metaclip2, paligemma, qwen25vl, qwen3vl, siglip, siglip2_naflex,
};
use crate::preprocess::Preprocessor;
use crate::{Error, ErrorKind, Result};

pub use crate::architecture::{
    Architecture, ArchitectureSpec, BenchTowers, CaptionLimit, LoadChoice, ScoreHead, TextPrep,
};

mod downloads;
pub use downloads::{DownloadEntry, FIBER_CHECKPOINTS};

/// Every architecture benchctl implements, each declared once in its own module.
pub const ARCHITECTURES: &[Architecture] = &[
    clip::ARCHITECTURE,
    clip_openai::ARCHITECTURE,
    pe_core::ARCHITECTURE,
    eva02::ARCHITECTURE,
    siglip::ARCHITECTURE,
    siglip2_naflex::ARCHITECTURE,
    metaclip2::ARCHITECTURE,
    blip::ARCHITECTURE,
    fiber::ARCHITECTURE,
    gemma3::ARCHITECTURE,
    paligemma::ARCHITECTURE,
    qwen3vl::ARCHITECTURE,
    qwen25vl::ARCHITECTURE,
    clip_t5::ARCHITECTURE,
];

/// The architecture with this name.
pub fn architecture(name: &str) -> Option<Architecture> {
    ARCHITECTURES.iter().copied().find(|a| a.name() == name)
}

/// One zoo entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelEntry {
    pub id: &'static str,
    pub repo: &'static str,
    /// The pinned hub revision (a commit), or `main` ([`ModelEntry::is_pinned`]).
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

impl ModelEntry {
    /// Whether it pins a commit; else it names `main`, whose commit at first download the
    /// hub cache keeps.
    pub fn is_pinned(&self) -> bool {
        benchctl_base::hub_names::is_commit_hash(self.revision)
    }

    /// The revision as `benchctl models` lists it: the commit's first 12 digits, or what an
    /// unpinned entry resolves to.
    pub fn revision_label(&self) -> String {
        if self.is_pinned() {
            self.revision[..12].to_string()
        } else {
            format!("{} (the commit of the first download, kept)", self.revision)
        }
    }
}

const CLIP_PREP_224: &str = "224 px, shorter side + centre crop, bicubic, OpenAI mean/std";
const CLIP_BPE: &str = "CLIP BPE, 77 tokens";
/// OpenCLIP's: the repo's `tokenizer.json`, else OpenAI's BPE as open_clip ships it.
const OPEN_CLIP_BPE: &str = "CLIP BPE, 77 tokens (the repo's tokenizer.json, else OpenAI's, as open_clip uses)";

/// Every model in the zoo.
pub const MODELS: &[ModelEntry] = &[
    ModelEntry {
        id: "clip-vit-b32",
        repo: "openai/clip-vit-base-patch32",
        revision: "3d74acf9a28c67741b2f4f2ea7635f0aaf6f0268",
        architecture: clip::ARCHITECTURE,
        description: "OpenAI CLIP ViT-B/32 (Radford et al., 2021)",
        preprocessing: CLIP_PREP_224,
        activation: "quick_gelu",
        tokenizer: CLIP_BPE,
    },
    ModelEntry {
        id: "clip-vit-b16",
        repo: "openai/clip-vit-base-patch16",
        revision: "57c216476eefef5ab752ec549e440a49ae4ae5f3",
        architecture: clip::ARCHITECTURE,
        description: "OpenAI CLIP ViT-B/16 (Radford et al., 2021)",
        preprocessing: CLIP_PREP_224,
        activation: "quick_gelu",
        tokenizer: CLIP_BPE,
    },
    ModelEntry {
        id: "clip-vit-l14",
        repo: "openai/clip-vit-large-patch14",
        revision: "32bd64288804d66eefd0ccbe215aa642df71cc41",
        architecture: clip::ARCHITECTURE,
        description: "OpenAI CLIP ViT-L/14 (Radford et al., 2021)",
        preprocessing: CLIP_PREP_224,
        activation: "quick_gelu",
        tokenizer: CLIP_BPE,
    },
    ModelEntry {
        id: "clip-vit-l14-336",
        repo: "openai/clip-vit-large-patch14-336",
        revision: "ce19dc912ca5cd21c8a653c79e251e808ccabcd1",
        architecture: clip::ARCHITECTURE,
        description: "OpenAI CLIP ViT-L/14 at 336 px (Radford et al., 2021)",
        preprocessing: "336 px, shorter side + centre crop, bicubic, OpenAI mean/std",
        activation: "quick_gelu",
        tokenizer: CLIP_BPE,
    },
    ModelEntry {
        id: "openclip-vit-b32-laion2b",
        repo: "laion/CLIP-ViT-B-32-laion2B-s34B-b79K",
        revision: "1a25a446712ba5ee05982a381eed697ef9b435cf",
        architecture: clip_openai::ARCHITECTURE,
        description: "OpenCLIP ViT-B/32 trained on LAION-2B (Cherti et al., 2023), open_clip naming",
        preprocessing: CLIP_PREP_224,
        activation: "gelu",
        tokenizer: CLIP_BPE,
    },
    ModelEntry {
        id: "openclip-vit-bigg14-laion2b",
        repo: "laion/CLIP-ViT-bigG-14-laion2B-39B-b160k",
        revision: "main",
        architecture: clip_openai::ARCHITECTURE,
        description: "OpenCLIP ViT-bigG/14 trained on LAION-2B (Cherti et al., 2023): heads of 104, MLP 8192",
        preprocessing: "224 px as the repo's preprocess_cfg says (open_clip's default: shorter side + centre crop), bicubic, OpenAI mean/std",
        activation: "gelu",
        tokenizer: OPEN_CLIP_BPE,
    },
    ModelEntry {
        id: "dfn5b-h14-378",
        repo: "apple/DFN5B-CLIP-ViT-H-14-378",
        revision: "main",
        architecture: clip_openai::ARCHITECTURE,
        description: "Apple DFN-5B CLIP ViT-H/14 at 378 px (Fang et al., 2023), open_clip naming",
        preprocessing: "378 px as the repo's preprocess_cfg says (open_clip's DFN config: squashed to a square, no crop), bicubic, OpenAI mean/std",
        activation: "quick_gelu",
        tokenizer: OPEN_CLIP_BPE,
    },
    ModelEntry {
        id: "dfn2b-l14",
        repo: "apple/DFN2B-CLIP-ViT-L-14",
        revision: "main",
        architecture: clip_openai::ARCHITECTURE,
        description: "Apple DFN-2B CLIP ViT-L/14 (Fang et al., 2023), open_clip naming",
        preprocessing: "224 px as the repo's preprocess_cfg says (open_clip's DFN-2B config: shorter side + centre crop), bicubic, OpenAI mean/std",
        activation: "quick_gelu",
        tokenizer: OPEN_CLIP_BPE,
    },
    ModelEntry {
        id: "pe-core-b16-224",
        repo: "timm/PE-Core-B-16",
        revision: "main",
        architecture: pe_core::ARCHITECTURE,
        description: "Perception Encoder PE-Core B/16 at 224 px (Bolya et al., 2025), open_clip with timm's tower",
        preprocessing: "224 px squashed (both sides), bilinear, mean/std 0.5, from the repo's preprocess_cfg",
        activation: "gelu",
        tokenizer: PE_CORE_TOKENIZER,
    },
    ModelEntry {
        id: "pe-core-l14-336",
        repo: "timm/PE-Core-L-14-336",
        revision: "main",
        architecture: pe_core::ARCHITECTURE,
        description: "Perception Encoder PE-Core L/14 at 336 px (Bolya et al., 2025)",
        preprocessing: "336 px squashed (both sides), bilinear, mean/std 0.5, from the repo's preprocess_cfg",
        activation: "gelu",
        tokenizer: PE_CORE_TOKENIZER,
    },
    ModelEntry {
        id: "pe-core-g14-448",
        repo: "timm/PE-Core-bigG-14-448",
        revision: "main",
        architecture: pe_core::ARCHITECTURE,
        description: "Perception Encoder PE-Core G/14 at 448 px (Bolya et al., 2025): no class token",
        preprocessing: "448 px squashed (both sides), bilinear, mean/std 0.5, from the repo's preprocess_cfg",
        activation: "gelu",
        tokenizer: "CLIP BPE (open_clip's), 72 tokens, cleaned as open_clip does",
    },
    ModelEntry {
        id: "eva02-clip-b16",
        repo: "timm/eva02_base_patch16_clip_224.merged2b_s8b_b131k",
        revision: "main",
        architecture: eva02::ARCHITECTURE,
        description: "EVA02-CLIP B/16 (Sun et al., 2023), open_clip with timm's tower",
        preprocessing: "224 px as the repo's preprocess_cfg says (open_clip's default: shorter side + centre crop), bicubic, OpenAI mean/std",
        activation: "swiglu (image), gelu (text)",
        tokenizer: OPEN_CLIP_BPE,
    },
    ModelEntry {
        id: "eva02-clip-l14",
        repo: "timm/eva02_large_patch14_clip_224.merged2b_s4b_b131k",
        revision: "main",
        architecture: eva02::ARCHITECTURE,
        description: "EVA02-CLIP L/14 (Sun et al., 2023)",
        preprocessing: "224 px as the repo's preprocess_cfg says (shorter side + centre crop), bicubic, OpenAI mean/std",
        activation: "swiglu (image), gelu (text)",
        tokenizer: OPEN_CLIP_BPE,
    },
    ModelEntry {
        id: "eva02-clip-l14-336",
        repo: "timm/eva02_large_patch14_clip_336.merged2b_s6b_b61k",
        revision: "main",
        architecture: eva02::ARCHITECTURE,
        description: "EVA02-CLIP L/14 at 336 px (Sun et al., 2023)",
        preprocessing: "336 px as the repo's preprocess_cfg says (shorter side + centre crop), bicubic, OpenAI mean/std",
        activation: "swiglu (image), gelu (text)",
        tokenizer: OPEN_CLIP_BPE,
    },
    ModelEntry {
        id: "siglip-base-patch16-224",
        repo: "google/siglip-base-patch16-224",
        revision: "7fd15f0689c79d79e38b1c2e2e2370a7bf2761ed",
        architecture: siglip::ARCHITECTURE,
        description: "SigLIP B/16 (Zhai et al., 2023), sigmoid scores with logit bias",
        preprocessing: "224 px, stretched square, bicubic, mean/std 0.5 ([-1, 1])",
        activation: "gelu_pytorch_tanh",
        tokenizer: "SigLIP sentencepiece, padded to 64 tokens",
    },
    ModelEntry {
        id: "siglip2-base-patch16-224",
        repo: "google/siglip2-base-patch16-224",
        revision: "main",
        architecture: siglip::ARCHITECTURE,
        description: "SigLIP 2 B/16 at 224 px, fixed resolution (Tschannen et al., 2025), sigmoid scores with logit bias",
        preprocessing: SIGLIP2_PREP_224,
        activation: "gelu_pytorch_tanh",
        tokenizer: SIGLIP2_TOKENIZER,
    },
    ModelEntry {
        id: "siglip2-large-patch16-256",
        repo: "google/siglip2-large-patch16-256",
        revision: "main",
        architecture: siglip::ARCHITECTURE,
        description: "SigLIP 2 L/16 at 256 px, fixed resolution (Tschannen et al., 2025)",
        preprocessing: "256 px, stretched square, from the checkpoint's preprocessor_config.json, mean/std 0.5",
        activation: "gelu_pytorch_tanh",
        tokenizer: SIGLIP2_TOKENIZER,
    },
    ModelEntry {
        id: "siglip2-so400m-patch14-384",
        repo: "google/siglip2-so400m-patch14-384",
        revision: "main",
        architecture: siglip::ARCHITECTURE,
        description: "SigLIP 2 So400m/14 at 384 px, fixed resolution (Tschannen et al., 2025)",
        preprocessing: "384 px, stretched square, from the checkpoint's preprocessor_config.json, mean/std 0.5",
        activation: "gelu_pytorch_tanh",
        tokenizer: SIGLIP2_TOKENIZER,
    },
    ModelEntry {
        id: "siglip2-base-patch16-naflex",
        repo: "google/siglip2-base-patch16-naflex",
        revision: "main",
        architecture: siglip2_naflex::ARCHITECTURE,
        description: "SigLIP 2 B/16 NaFlex (Tschannen et al., 2025): images near their aspect ratio, sigmoid scores",
        preprocessing: SIGLIP2_NAFLEX_PREP,
        activation: "gelu_pytorch_tanh",
        tokenizer: SIGLIP2_TOKENIZER,
    },
    ModelEntry {
        id: "siglip2-so400m-patch16-naflex",
        repo: "google/siglip2-so400m-patch16-naflex",
        revision: "main",
        architecture: siglip2_naflex::ARCHITECTURE,
        description: "SigLIP 2 So400m/16 NaFlex (Tschannen et al., 2025): images near their aspect ratio",
        preprocessing: SIGLIP2_NAFLEX_PREP,
        activation: "gelu_pytorch_tanh",
        tokenizer: SIGLIP2_TOKENIZER,
    },
    ModelEntry {
        id: "metaclip2-worldwide-l14",
        repo: "facebook/metaclip-2-worldwide-l14",
        revision: "main",
        architecture: metaclip2::ARCHITECTURE,
        description: "MetaCLIP 2 ViT-L/14 on worldwide data (Chuang et al., 2025)",
        preprocessing: CLIP_PREP_224,
        activation: "gelu",
        tokenizer: METACLIP2_TOKENIZER,
    },
    ModelEntry {
        id: "metaclip2-worldwide-huge-quickgelu",
        repo: "facebook/metaclip-2-worldwide-huge-quickgelu",
        revision: "main",
        architecture: metaclip2::ARCHITECTURE,
        description: "MetaCLIP 2 ViT-H/14 on worldwide data (Chuang et al., 2025), QuickGELU",
        preprocessing: CLIP_PREP_224,
        activation: "quick_gelu",
        tokenizer: METACLIP2_TOKENIZER,
    },
    ModelEntry {
        id: "metaclip2-worldwide-huge-378",
        repo: "facebook/metaclip-2-worldwide-huge-378",
        revision: "main",
        architecture: metaclip2::ARCHITECTURE,
        description: "MetaCLIP 2 ViT-H/14 at 378 px on worldwide data (Chuang et al., 2025)",
        preprocessing: "378 px, shorter side + centre crop, bicubic, OpenAI mean/std",
        activation: "gelu",
        tokenizer: METACLIP2_TOKENIZER,
    },
    ModelEntry {
        id: "metaclip2-mt5-worldwide-m16",
        repo: "facebook/metaclip-2-mt5-worldwide-m16",
        revision: "main",
        architecture: metaclip2::ARCHITECTURE,
        description: "MetaCLIP 2 ViT-M/16 on worldwide data with mT5's vocabulary (Chuang et al., 2025)",
        preprocessing: CLIP_PREP_224,
        activation: "from config.json",
        tokenizer: "mT5 sentencepiece (250k), 77 tokens, no start token, pooled at </s>; captions as written",
    },
    ModelEntry {
        id: "blip-itm-base-coco",
        repo: "Salesforce/blip-itm-base-coco",
        revision: "7eaa90c11850c0b17fc38c6a11e7d88bd6ac231f",
        architecture: blip::ARCHITECTURE,
        description: "BLIP ViT-B retrieval model fine-tuned on COCO (Li et al., 2022)",
        preprocessing: "384 px, stretched square, bicubic, OpenAI mean/std",
        activation: "gelu",
        tokenizer: "BERT WordPiece (uncased), 35 tokens",
    },
    ModelEntry {
        id: "blip-itm-large-coco",
        repo: "Salesforce/blip-itm-large-coco",
        revision: "fef05cafc05298067cbbca00b125749394a77a6f",
        architecture: blip::ARCHITECTURE,
        description: "BLIP ViT-L retrieval model fine-tuned on COCO (Li et al., 2022)",
        preprocessing: "384 px, stretched square, bicubic, OpenAI mean/std",
        activation: "gelu",
        tokenizer: "BERT WordPiece (uncased), 35 tokens",
    },
    ModelEntry {
        id: "gemma-3-4b-it",
        repo: "google/gemma-3-4b-it",
        revision: "093f9f388b31de276ce2de164bdc2081324b9767",
        architecture: gemma3::ARCHITECTURE,
        description: "Gemma 3 4B instruction-tuned (Gemma Team, 2025), scored by VQAScore; gated: accept its licence on the hub and set HF_TOKEN",
        preprocessing: GEMMA3_896,
        activation: "gelu_pytorch_tanh",
        tokenizer: GEMMA3_TOKENIZER,
    },
    ModelEntry {
        id: "gemma-3-12b-it",
        repo: "google/gemma-3-12b-it",
        revision: "96b6f1eccf38110c56df3a15bffe176da04bfd80",
        architecture: gemma3::ARCHITECTURE,
        description: "Gemma 3 12B instruction-tuned (Gemma Team, 2025), t2v_metrics' default Gemma 3, scored by VQAScore; gated: accept its licence on the hub and set HF_TOKEN",
        preprocessing: GEMMA3_896,
        activation: "gelu_pytorch_tanh",
        tokenizer: GEMMA3_TOKENIZER,
    },
    ModelEntry {
        id: "paligemma-3b-mix-224",
        repo: "google/paligemma-3b-mix-224",
        revision: "d1d8734c9c3ad0ccfeea4afc270faa356c2ba515",
        architecture: paligemma::ARCHITECTURE,
        description: "PaliGemma 3B mix at 224 px (Beyer et al., 2024), scored by VQAScore as t2v_metrics' PaliGemma; gated: accept its licence on the hub and set HF_TOKEN",
        preprocessing: "224 px, stretched square, bicubic, mean/std 0.5",
        activation: "gelu_pytorch_tanh",
        tokenizer: "Gemma SentencePiece (257k); image tokens, <bos>, the question, \\n",
    },
    ModelEntry {
        id: "qwen3-vl-2b",
        repo: "Qwen/Qwen3-VL-2B-Instruct",
        revision: "main",
        architecture: qwen3vl::ARCHITECTURE,
        description: "Qwen3-VL 2B Instruct (Qwen Team, 2025), scored by VQAScore as t2v_metrics' Qwen3VLModel",
        preprocessing: QWEN3_PREP,
        activation: "silu",
        tokenizer: QWEN_TOKENIZER,
    },
    ModelEntry {
        id: "qwen3-vl-8b",
        repo: "Qwen/Qwen3-VL-8B-Instruct",
        revision: "main",
        architecture: qwen3vl::ARCHITECTURE,
        description: "Qwen3-VL 8B Instruct (Qwen Team, 2025), scored by VQAScore as t2v_metrics' Qwen3VLModel; sharded",
        preprocessing: QWEN3_PREP,
        activation: "silu",
        tokenizer: QWEN_TOKENIZER,
    },
    ModelEntry {
        id: "qwen2.5-vl-3b",
        repo: "Qwen/Qwen2.5-VL-3B-Instruct",
        revision: "main",
        architecture: qwen25vl::ARCHITECTURE,
        description: "Qwen2.5-VL 3B Instruct (Qwen Team, 2025), scored by VQAScore as t2v_metrics' Qwen2VLModel; sharded",
        preprocessing: QWEN25_PREP,
        activation: "silu",
        tokenizer: QWEN_TOKENIZER,
    },
    ModelEntry {
        id: "qwen2.5-vl-7b",
        repo: "Qwen/Qwen2.5-VL-7B-Instruct",
        revision: "main",
        architecture: qwen25vl::ARCHITECTURE,
        description: "Qwen2.5-VL 7B Instruct (Qwen Team, 2025), t2v_metrics' default Qwen2.5-VL, scored by VQAScore; sharded",
        preprocessing: QWEN25_PREP,
        activation: "silu",
        tokenizer: QWEN_TOKENIZER,
    },
    ModelEntry {
        id: "clip-flant5-xl",
        repo: "zhiqiulin/clip-flant5-xl",
        revision: "main",
        architecture: clip_t5::ARCHITECTURE,
        description: "CLIP-FlanT5-XL (Lin et al., 2024), the VQAScore paper's model: FlanT5-XL over CLIP ViT-L/14-336 patches, scored as t2v_metrics v3.0 does",
        preprocessing: CLIP_T5_PREP,
        activation: "gelu_new (T5), quick_gelu (CLIP)",
        tokenizer: CLIP_T5_TOKENIZER,
    },
    ModelEntry {
        id: "clip-flant5-xxl",
        repo: "zhiqiulin/clip-flant5-xxl",
        revision: "main",
        architecture: clip_t5::ARCHITECTURE,
        description: "CLIP-FlanT5-XXL (Lin et al., 2024), t2v_metrics' recommended VQAScore model: FlanT5-XXL over CLIP ViT-L/14-336 patches",
        preprocessing: CLIP_T5_PREP,
        activation: "gelu_new (T5), quick_gelu (CLIP)",
        tokenizer: CLIP_T5_TOKENIZER,
    },
];

const SIGLIP2_PREP_224: &str = "224 px, stretched square, from the checkpoint's preprocessor_config.json, mean/std 0.5";
const PE_CORE_TOKENIZER: &str = "CLIP BPE (open_clip's), 32 tokens, cleaned as open_clip does";
const SIGLIP2_NAFLEX_PREP: &str = "aspect ratio kept, at most max_num_patches (256) patches of 16 px, bilinear, mean/std 0.5, from the checkpoint's preprocessor_config.json";
const SIGLIP2_TOKENIZER: &str =
    "Gemma SentencePiece (256k), 64 tokens; captions canonicalised as big_vision does (--text-prep transformers: as the processor)";
const METACLIP2_TOKENIZER: &str = "XLM-V sentencepiece (901,629), 77 tokens, pooled at </s>; captions as written";
const GEMMA3_896: &str = "896 px, stretched square, bilinear, mean/std 0.5";
const QWEN3_PREP: &str =
    "each image at about its own size: qwen_vl_utils' resize to multiples of 32 (4-16,384 image tokens), bicubic, mean/std 0.5";
const QWEN25_PREP: &str =
    "each image at about its own size: qwen_vl_utils' resize to multiples of 28 (4-16,384 image tokens), bicubic, OpenAI mean/std";
const QWEN_TOKENIZER: &str =
    "Qwen byte-level BPE (151,665); the Instruct chat format, t2v_metrics' question and \"Yes\"";
const CLIP_T5_PREP: &str =
    "336 px: convert(\"RGB\"), padded to a square of the mean colour, shorter side + centre crop, bicubic, OpenAI mean/std";
const CLIP_T5_TOKENIZER: &str =
    "FlanT5 SentencePiece (32,100; google/flan-t5-xl's); LLaVA's chat prompt, \"yes or no\", each side of the image ending in </s>";
const GEMMA3_TOKENIZER: &str = "Gemma SentencePiece (262k); t2v_metrics' prompt and \"Yes\"";

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
            format!(
                "find model `{id}`: known models are {} (or pass --model hf:ORG/NAME for any hub checkpoint of a supported architecture, or --model-path DIR)",
                known.join(", ")
            ),
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
    (architecture.spec().default_preprocessor)(size).ok_or_else(|| {
        Error::new(
            ErrorKind::BadConfig,
            format!("use {id}: a {} preprocessor comes from its checkpoint's config", architecture.name()),
        )
    })
}

/// A hub checkpoint named by id, outside the zoo: `hf:ORG/NAME` or `hf:ORG/NAME@REVISION`
/// (a branch, tag or commit; default `main`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubModelId {
    pub repo: String,
    pub revision: String,
}

impl HubModelId {
    pub const PREFIX: &'static str = "hf:";

    /// `id` as a hub checkpoint id, if it starts with `hf:` (`None` for a zoo id); a
    /// malformed one is an error saying the form.
    pub fn parse(id: &str) -> Option<Result<Self>> {
        let rest = id.strip_prefix(Self::PREFIX)?;
        let (repo, revision) = rest.split_once('@').unwrap_or((rest, "main"));
        use benchctl_base::hub_names::{is_repo_id, is_repo_path};
        if !is_repo_id(repo) || !is_repo_path(revision) {
            return Some(Err(Error::new(
                ErrorKind::UnknownModel,
                format!(
                    "use --model {id}: a hub checkpoint is hf:ORG/NAME or hf:ORG/NAME@REVISION, as on huggingface.co"
                ),
            )));
        }
        Some(Ok(HubModelId { repo: repo.to_string(), revision: revision.to_string() }))
    }

    /// The id runs record: `hf:ORG/NAME` (the revision and commit are recorded beside it).
    pub fn id(&self) -> String {
        format!("{}{}", Self::PREFIX, self.repo)
    }
}

/// A hub checkpoint's files and architecture: the repo's file list (offline: the cache) gives
/// its config file (`config.json`, else a layout's own such as `open_clip_config.json`), the
/// config gives the architecture ([`detect_architecture`]), and the files that architecture's
/// layout needs are checked in the list, then downloaded (or found in the cache). Nothing but
/// the config is downloaded before the repo is known to hold everything the model needs.
pub fn resolve_hub_model(id: &HubModelId, settings: &crate::hub::HubSettings) -> Result<(ModelFiles, Architecture)> {
    use crate::hub;
    let (repo, revision) = (id.repo.as_str(), id.revision.as_str());
    let named = |e: Error| Error::new(e.kind(), format!("use --model {}: {e}", id.id()));
    let listed: Option<(String, Vec<String>)> =
        if settings.offline { None } else { Some(hub::list_model(repo, revision, settings).map_err(named)?) };
    let has = |name: &str| match &listed {
        Some((_, files)) => files.iter().any(|f| f == name),
        None => hub::cached_file(&settings.cache_dir, repo, revision, name).is_some(),
    };
    let mut configs: Vec<&str> = Vec::new();
    for config in ARCHITECTURES.iter().map(|a| a.layout().config) {
        if !configs.contains(&config) {
            configs.push(config);
        }
    }
    let Some(config_name) = configs.iter().copied().find(|c| has(c)) else {
        return Err(match &listed {
            Some((commit, files)) => Error::new(
                ErrorKind::MissingFile,
                format!(
                    "use --model {}: {repo} at commit {commit} is not a checkpoint benchctl loads: it has none of {} ({} files: {})",
                    id.id(),
                    configs.join(", "),
                    files.len(),
                    shown_files(files)
                ),
            ),
            None => named(hub::offline_miss(repo, revision, configs[0], settings)),
        });
    };
    // Online, everything is read at the commit the listing resolved, not an older cached one.
    let at = listed.as_ref().map_or(revision, |(commit, _)| commit.as_str());
    let config = hub::model_file(repo, at, config_name, settings).map_err(named)?;
    let architecture = detect_architecture(&config).map_err(named)?;
    let mut layout = architecture.layout().with_weights_found(has);
    if has(layout.tokenizer) {
        layout.tokenizer_instead = None;
    }
    if let Some((commit, files)) = &listed {
        let missing: Vec<&str> = layout.repo_files().into_iter().filter(|f| !has(f)).collect();
        if !missing.is_empty() {
            return Err(Error::new(
                ErrorKind::MissingFile,
                format!(
                    "use --model {}: {repo} at commit {commit} lacks {} that a {} checkpoint needs (it has {})",
                    id.id(),
                    missing.join(", "),
                    architecture.name(),
                    shown_files(files)
                ),
            ));
        }
    }
    let files = match &listed {
        Some((commit, _)) => hub::from_hub_at(repo, revision, commit, layout, settings),
        None => hub::from_hub_with(repo, revision, layout, settings),
    };
    Ok((files.map_err(named)?, architecture))
}

/// A repo's file list in a message: the first few names.
fn shown_files(files: &[String]) -> String {
    let mut shown: Vec<&str> = files.iter().map(String::as_str).take(8).collect();
    if files.len() > shown.len() {
        shown.push("…");
    }
    shown.join(", ")
}

/// The architecture of local model files: a PyTorch checkpoint without a `config.json` is
/// the architecture released that way (FIBER), else [`detect_architecture`].
pub fn architecture_of(files: &ModelFiles) -> Result<Architecture> {
    if !files.config.exists() && crate::hub::is_torch_checkpoint(&files.weights) {
        if let Some(&released) = ARCHITECTURES.iter().find(|a| a.spec().released_as_torch_checkpoint) {
            return Ok(released);
        }
    }
    detect_architecture(&files.config)
}

/// The architecture of a local model directory: the one whose own config file this is
/// (OpenCLIP's `open_clip_config.json`), else the one that loads the `model_type` of
/// `config.json`.
pub fn detect_architecture(config: &std::path::Path) -> Result<Architecture> {
    let name = config.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let own: Vec<Architecture> = ARCHITECTURES
        .iter()
        .copied()
        .filter(|a| a.spec().model_types.is_empty() && a.layout().config == name)
        .collect();
    if let [only] = own[..] {
        return Ok(only);
    }
    if !own.is_empty() {
        return timm_architecture(config, &own);
    }
    let value: serde_json::Value = crate::models::read_config(config)?;
    let Some(model_type) = value.get("model_type").and_then(|v| v.as_str()) else {
        return Err(Error::new(ErrorKind::BadConfig, format!("use {}: it has no `model_type` key", config.display())));
    };
    ARCHITECTURES.iter().copied().find(|a| a.spec().model_types.contains(&model_type)).ok_or_else(|| {
        Error::new(
            ErrorKind::BadConfig,
            format!("use {}: model_type `{model_type}` is not supported {}", config.display(), supported()),
        )
    })
}

/// Of the architectures sharing a layout (OpenCLIP's), the one for the config's timm image
/// tower (`model_cfg.vision_cfg.timm_model_name`), or the plain one where it names none.
fn timm_architecture(config: &std::path::Path, candidates: &[Architecture]) -> Result<Architecture> {
    let value: serde_json::Value = crate::models::read_config(config)?;
    let timm = value.pointer("/model_cfg/vision_cfg/timm_model_name").and_then(|v| v.as_str());
    let found = candidates.iter().copied().find(|a| match timm {
        None => a.spec().timm_towers.is_empty(),
        Some(name) => a.spec().timm_towers.iter().any(|prefix| name.starts_with(prefix)),
    });
    found.ok_or_else(|| {
        let towers: Vec<String> =
            candidates.iter().flat_map(|a| a.spec().timm_towers.iter().map(|p| format!("{p}*"))).collect();
        Error::new(
            ErrorKind::BadConfig,
            format!(
                "use {}: the timm image tower `{}` is not supported (supported: {})",
                config.display(),
                timm.unwrap_or_default(),
                towers.join(", ")
            ),
        )
    })
}

/// What [`detect_architecture`] recognises, for errors: every declared `model_type`, then
/// each layout of its own and each architecture released as a PyTorch checkpoint.
pub fn supported() -> String {
    let types: Vec<&str> = ARCHITECTURES.iter().flat_map(|a| a.spec().model_types.iter().copied()).collect();
    let mut text = format!("(supported: {})", types.join(", "));
    for a in ARCHITECTURES.iter().filter(|a| a.spec().model_types.is_empty()) {
        text += &format!("; a {} directory has {}", a.name(), a.layout().config);
        for prefix in a.spec().timm_towers {
            text += &format!(" naming a timm tower {prefix}*");
        }
    }
    for a in ARCHITECTURES.iter().filter(|a| a.spec().released_as_torch_checkpoint) {
        text += &format!("; a {} checkpoint may be its released PyTorch file", a.name());
    }
    text
}
