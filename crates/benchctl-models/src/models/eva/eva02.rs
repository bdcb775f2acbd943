//! EVA02-CLIP (Sun et al., "EVA-CLIP: Improved Training Techniques for CLIP at Scale", 2023,
//! <https://arxiv.org/abs/2303.15389>) as open_clip publishes it, e.g.
//! <https://huggingface.co/timm/eva02_base_patch16_clip_224.merged2b_s8b_b131k>: timm's
//! `eva02_*_clip_*` tower ([`super::tower`]) under EVA02's settings:
//! - q, k and v as separate projections, k without bias; a LayerNorm on the attention's output
//!   before its projection (`scale_attn_inner`);
//! - SwiGLU MLPs (`fc1_g`, `fc1_x`, SiLU) with a LayerNorm before their output (`scale_mlp`);
//! - LayerNorm ε 1e-6 (timm's default); no LayerNorm before the blocks; a patch embedding with
//!   bias;
//! - rotary coordinates in `ij` order (rows first), scaled to a 16 × 16 reference grid;
//! - the class token pooled after the final LayerNorm (`token`), then the linear head;
//! - 77 text tokens; images as open_clip's defaults (`_pcfg`): shorter side + centre crop,
//!   bicubic, OpenAI's mean and std.
//!
//! EVA02-E (`EVA02-E-14`, `EVA02-E-14-plus`: timm's `eva02_enormous_patch14_clip_224`) is a
//! plain ViT in timm's `Eva`: residual post-norm blocks (`EvaBlockPostNorm`), one fused q/k/v
//! projection whose bias is `q_bias`, zeros, `v_bias`, GELU MLPs, no rotary embedding, 16 heads
//! of 112, the class token pooled after the final LayerNorm (`EVA02_E`).

use super::tower::{EvaTower, Family, Pool, QkvWeights};
use super::{EvaClipEncoder, TimmClipFile};
use crate::architecture::{Architecture, ArchitectureSpec, BenchTowers, ScoreHead, TextPrep};
use crate::hub::OPEN_CLIP_LAYOUT;

const EVA02: Family = Family {
    name: "EVA02-CLIP",
    eps: 1e-6,
    pre_norm: false,
    qkv: QkvWeights::Separate,
    rope: true,
    post_norm: false,
    inner_norm: true,
    swiglu: true,
    pool: Pool::ClassToken,
    columns_first: false,
};

/// EVA02-E's blocks (timm's `eva02_enormous_patch14_clip_224`).
const EVA02_E: Family = Family {
    name: "EVA02-CLIP-E",
    eps: 1e-6,
    pre_norm: false,
    qkv: QkvWeights::FusedSplitBias,
    rope: false,
    post_norm: true,
    inner_norm: false,
    swiglu: false,
    pool: Pool::ClassToken,
    columns_first: false,
};

/// One table line: heads of 64 channels, a class token, the rotary reference 16 × 16.
const fn eva02(timm_name: &'static str, (width, depth, mlp, patch): (usize, usize, usize, usize)) -> EvaTower {
    EvaTower {
        timm_name,
        family: EVA02,
        head_dim: 64,
        class_token: true,
        rope_offset: 0.0,
        rope_reference: 16,
        width,
        depth,
        mlp,
        patch,
    }
}

/// The EVA02-CLIP image towers of timm 1.0 that open_clip's EVA02 configs name (the MLP width
/// is `int(width · 4 · 2 / 3)`; EVA02-E's `int(width · 15360 / 1792)`).
pub const TOWERS: &[EvaTower] = &[
    eva02("eva02_base_patch16_clip_224", (768, 12, 2048, 16)),
    eva02("eva02_large_patch14_clip_224", (1024, 24, 2730, 14)),
    eva02("eva02_large_patch14_clip_336", (1024, 24, 2730, 14)),
    // 16 heads of 112; the MLP `int(1792 · 15360 / 1792)`.
    EvaTower { family: EVA02_E, head_dim: 112, ..eva02("eva02_enormous_patch14_clip_224", (1792, 64, 15360, 14)) },
];

/// EVA02-CLIP in open_clip's files, as [`crate::registry::ARCHITECTURES`] lists it.
pub const ARCHITECTURE: Architecture = Architecture::declare(&ArchitectureSpec {
    name: "eva02-clip",
    model_types: &[],
    layout: OPEN_CLIP_LAYOUT,
    timm_towers: &["eva02_"],
    released_as_torch_checkpoint: false,
    heads: &[ScoreHead::Contrastive],
    text_preps: TextPrep::AUTHORS_ONLY,
    default_preprocessor: |_| None,
    caption_limit: |files, _| super::caption_limit(files, TOWERS),
    load: |_, files, dtype, device| {
        Ok(crate::Model::Dual(Box::new(EvaClipEncoder::load(files, TOWERS, dtype, device)?)))
    },
    bench_towers: BenchTowers::TimmEva,
    pre_captions: false,
    patch_budget: false,
    processor_pixels: false,
    images_together: false,
    generates_replies: false,
});

/// The config and tower of an EVA02-CLIP `open_clip_config.json`.
pub fn read_config(path: &std::path::Path) -> crate::Result<(TimmClipFile, &'static EvaTower)> {
    TimmClipFile::from_file(path, TOWERS)
}
