//! Checkpoints distributed outside the Hugging Face hub, listed with where to download them.

use super::{fiber, ScoreHead};
use crate::architecture::Architecture;

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
        architecture: fiber::ARCHITECTURE,
        heads: &[ScoreHead::Itm, ScoreHead::Itc],
        description: "FIBER-base fine-tuned on COCO retrieval with ITM (Dou et al., 2022)",
        preprocessing: FIBER_384,
        tokenizer: FIBER_TOKENIZER,
    },
    DownloadEntry {
        id: "fiber-coco-itc",
        url: "https://datarelease.blob.core.windows.net/fiber/coarse_grained/fiber_coco_irtr_itc.ckpt",
        architecture: fiber::ARCHITECTURE,
        heads: &[ScoreHead::Itc],
        description: "FIBER-base fine-tuned on COCO retrieval with ITC (Dou et al., 2022)",
        preprocessing: FIBER_576,
        tokenizer: FIBER_TOKENIZER,
    },
    DownloadEntry {
        id: "fiber-f30k-itm",
        url: "https://datarelease.blob.core.windows.net/fiber/coarse_grained/fiber_f30k_irtr_itm.ckpt",
        architecture: fiber::ARCHITECTURE,
        heads: &[ScoreHead::Itm, ScoreHead::Itc],
        description: "FIBER-base fine-tuned on Flickr30k retrieval with ITM (Dou et al., 2022)",
        preprocessing: FIBER_384,
        tokenizer: FIBER_TOKENIZER,
    },
    DownloadEntry {
        id: "fiber-f30k-itc",
        url: "https://datarelease.blob.core.windows.net/fiber/coarse_grained/fiber_f30k_irtr_itc.ckpt",
        architecture: fiber::ARCHITECTURE,
        heads: &[ScoreHead::Itc],
        description: "FIBER-base fine-tuned on Flickr30k retrieval with ITC (Dou et al., 2022)",
        preprocessing: FIBER_576,
        tokenizer: FIBER_TOKENIZER,
    },
    DownloadEntry {
        id: "fiber-pretrain",
        url: "https://datarelease.blob.core.windows.net/fiber/coarse_grained/fiber_pretrain.ckpt",
        architecture: fiber::ARCHITECTURE,
        heads: &[ScoreHead::Itm, ScoreHead::Itc],
        description: "FIBER-base pre-trained on GCC+SBU+COCO+VG (Dou et al., 2022); 40 text tokens in pretraining",
        preprocessing: FIBER_384,
        tokenizer: FIBER_TOKENIZER,
    },
];
