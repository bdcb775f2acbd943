//! Perception Encoder's PE-Core (Bolya et al., "Perception Encoder: The best visual embeddings
//! are not at the output of the network", 2025, <https://arxiv.org/abs/2504.13181>) as open_clip
//! publishes it, e.g. <https://huggingface.co/timm/PE-Core-B-16>: timm's `vit_pe_core_*` tower
//! ([`super::tower`]) under PE's settings:
//! - a LayerNorm before the blocks (the patch embedding without bias), fused q/k/v with bias,
//!   GELU MLPs, LayerNorm ε 1e-5, a final LayerNorm;
//! - rotary coordinates in `xy` order (columns first), offset by 1 (none in gigantic);
//! - attention pooling (`map`): a learned latent query over every token with 8 heads, a
//!   projection and a residual MLP, then the linear head;
//! - a class token (none in gigantic); 32 text tokens (gigantic 72);
//! - images squashed to the input size, bilinear, mean and std 0.5 (open_clip's `_pecfg`).

use super::tower::{EvaTower, Family, Pool, QkvWeights};
use super::{EvaClipEncoder, TimmClipFile};
use crate::architecture::{Architecture, ArchitectureSpec, BenchTowers, ScoreHead, TextPrep};
use crate::hub::OPEN_CLIP_LAYOUT;

const PE: Family = Family {
    name: "PE-Core",
    eps: 1e-5,
    pre_norm: true,
    qkv: QkvWeights::Fused,
    rope: true,
    post_norm: false,
    inner_norm: false,
    swiglu: false,
    pool: Pool::Latent { heads: 8 },
    columns_first: true,
};

/// One table line; the rotary offset is 1 with a class token, 0 without (timm's definitions).
const fn pe(
    timm_name: &'static str,
    class_token: bool,
    rope_reference: usize,
    head_dim: usize,
    (width, depth, mlp, patch): (usize, usize, usize, usize),
) -> EvaTower {
    let rope_offset = if class_token { 1.0 } else { 0.0 };
    EvaTower { timm_name, family: PE, head_dim, class_token, rope_offset, rope_reference, width, depth, mlp, patch }
}

/// Every PE-Core image tower of timm 1.0.
pub const TOWERS: &[EvaTower] = &[
    pe("vit_pe_core_tiny_patch16_384", true, 24, 64, (192, 12, 768, 16)),
    pe("vit_pe_core_small_patch16_384", true, 24, 64, (384, 12, 1536, 16)),
    pe("vit_pe_core_base_patch16_224", true, 14, 64, (768, 12, 3072, 16)),
    pe("vit_pe_core_large_patch14_336", true, 24, 64, (1024, 24, 4096, 14)),
    pe("vit_pe_core_gigantic_patch14_448", false, 32, 96, (1536, 50, 8960, 14)),
];

/// PE-Core in open_clip's files, as [`crate::registry::ARCHITECTURES`] lists it.
pub const ARCHITECTURE: Architecture = Architecture::declare(&ArchitectureSpec {
    name: "pe-core",
    model_types: &[],
    layout: OPEN_CLIP_LAYOUT,
    timm_towers: &["vit_pe_core_"],
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

/// The config and tower of a PE-Core `open_clip_config.json`.
pub fn read_config(path: &std::path::Path) -> crate::Result<(TimmClipFile, &'static EvaTower)> {
    TimmClipFile::from_file(path, TOWERS)
}
