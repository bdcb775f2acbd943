//! SigLIP and SigLIP 2 as open_clip publishes them (the `timm/ViT-*-SigLIP*` repos, e.g.
//! <https://huggingface.co/timm/ViT-SO400M-14-SigLIP-384> and
//! <https://huggingface.co/timm/ViT-B-16-SigLIP2>): a `CustomTextCLIP` whose image tower is
//! timm's `vit_*_siglip_*` (`VisionTransformer` without class token, pooled by `map` attention)
//! and whose text tower is open_clip's `TextTransformer` without causal mask, pooled at the last
//! position, projected with a bias.
//!
//! That is the computation of `transformers`' `SiglipModel`, so the weights are renamed into its
//! layout and run by [`super::siglip`]. What differs between the two publications is declared
//! here: timm fixes each tower's GELU (exact or tanh, [`TOWERS`]), the text tower's comes from
//! `text_cfg.act_kwargs`, its LayerNorm ε from `text_cfg.norm_kwargs` (open_clip's default
//! 1e-5), and captions are canonicalised as open_clip does before the repo's own tokenizer
//! (T5's for SigLIP, Gemma's for SigLIP 2) cuts them to the context, appends the end token and
//! pads.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use serde::Deserialize;

use super::clip_openai::{check_plain, convert_block, read_open_clip_weights, OpenClipPreprocess};
use super::eva::TimmVision;
use super::siglip::{Siglip, SiglipConfig, SiglipEncoder, SiglipText, SiglipTextConfig, SiglipVisionConfig};
use super::weights::Weights;
use crate::architecture::{Architecture, ArchitectureSpec, BenchTowers, CaptionLimit, ScoreHead, TextPrep};
use crate::hub::{ModelFiles, OPEN_CLIP_LAYOUT};
use crate::{Error, ErrorKind, Result};

/// What timm's definition of a SigLIP image tower fixes that the weights do not show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimmSiglipTower {
    pub timm_name: &'static str,
    pub heads: usize,
    /// `act_layer='gelu_tanh'`; else exact GELU (timm's default).
    pub tanh_gelu: bool,
    /// The input side timm builds the tower for (open_clip passes none).
    pub image_size: usize,
}

const fn tower(timm_name: &'static str, heads: usize, tanh_gelu: bool, image_size: usize) -> TimmSiglipTower {
    TimmSiglipTower { timm_name, heads, tanh_gelu, image_size }
}

/// Every `map`-pooled SigLIP tower of timm 1.0 (its `gap` ones pool otherwise; open_clip uses
/// none of them).
pub const TOWERS: &[TimmSiglipTower] = &[
    tower("vit_base_patch16_siglip_224", 12, false, 224),
    tower("vit_base_patch16_siglip_256", 12, false, 256),
    tower("vit_base_patch16_siglip_384", 12, false, 384),
    tower("vit_base_patch16_siglip_512", 12, false, 512),
    tower("vit_base_patch32_siglip_256", 12, true, 256),
    tower("vit_giantopt_patch16_siglip_256", 16, true, 256),
    tower("vit_giantopt_patch16_siglip_384", 16, true, 384),
    tower("vit_large_patch16_siglip_256", 16, false, 256),
    tower("vit_large_patch16_siglip_384", 16, false, 384),
    tower("vit_large_patch16_siglip_512", 16, true, 512),
    tower("vit_so400m_patch14_siglip_224", 16, false, 224),
    tower("vit_so400m_patch14_siglip_378", 16, false, 378),
    tower("vit_so400m_patch14_siglip_384", 16, false, 384),
    tower("vit_so400m_patch16_siglip_256", 16, true, 256),
    tower("vit_so400m_patch16_siglip_384", 16, true, 384),
    tower("vit_so400m_patch16_siglip_512", 16, true, 512),
];

/// SigLIP in open_clip's files, as [`crate::registry::ARCHITECTURES`] lists it.
pub const ARCHITECTURE: Architecture = Architecture::declare(&ArchitectureSpec {
    name: "siglip-open-clip",
    model_types: &[],
    layout: OPEN_CLIP_LAYOUT,
    timm_towers: &[
        "vit_base_patch16_siglip_",
        "vit_base_patch32_siglip_",
        "vit_giantopt_patch16_siglip_",
        "vit_large_patch16_siglip_",
        "vit_so400m_patch14_siglip_",
        "vit_so400m_patch16_siglip_",
    ],
    released_as_torch_checkpoint: false,
    heads: &[ScoreHead::Sigmoid],
    text_preps: TextPrep::AUTHORS_ONLY,
    default_preprocessor: |_| None,
    caption_limit: |files, _| {
        let context = SiglipOpenClipFile::from_file(&files.config)?.0.model_cfg.text_cfg.context_length;
        let tokenizer = SiglipText::open_clip(files, context)?;
        Ok(CaptionLimit::new(context, move |t| tokenizer.tokens_cut(t)))
    },
    load: |_, files, dtype, device| Ok(crate::Model::Dual(Box::new(load(files, dtype, device)?))),
    bench_towers: BenchTowers::None,
    pre_captions: false,
    patch_budget: false,
    processor_pixels: false,
    images_together: false,
    generates_replies: false,
});

/// `open_clip_config.json` of a SigLIP `CustomTextCLIP`.
#[derive(Debug, Clone, Deserialize)]
pub struct SiglipOpenClipFile {
    pub model_cfg: SiglipOpenClipConfig,
    #[serde(default)]
    pub preprocess_cfg: OpenClipPreprocess,
}

#[derive(Debug, Clone, Deserialize)]
pub struct SiglipOpenClipConfig {
    pub embed_dim: usize,
    pub vision_cfg: TimmVision,
    pub text_cfg: SiglipOpenClipText,
}

/// `text_cfg`: the keys a SigLIP text tower sets, the rest checked to be open_clip's defaults.
#[derive(Debug, Clone, Deserialize)]
pub struct SiglipOpenClipText {
    pub context_length: usize,
    pub width: usize,
    pub heads: usize,
    pub layers: usize,
    #[serde(default)]
    pub no_causal_mask: bool,
    #[serde(default)]
    pub proj_bias: bool,
    #[serde(default)]
    pub pool_type: Option<String>,
    #[serde(default)]
    pub norm_kwargs: HashMap<String, serde_json::Value>,
    #[serde(default)]
    pub act_kwargs: HashMap<String, serde_json::Value>,
    #[serde(default)]
    pub tokenizer_kwargs: HashMap<String, serde_json::Value>,
    /// Where open_clip takes the tokenizer from: the repo's own files here.
    #[serde(default)]
    pub hf_tokenizer_name: Option<String>,
    #[serde(default)]
    pub vocab_size: Option<usize>,
    #[serde(default)]
    pub mlp_ratio: Option<f64>,
    #[serde(flatten)]
    pub other: HashMap<String, serde_json::Value>,
}

impl SiglipOpenClipFile {
    /// The file with its tower, refused where it asks for what this module does not compute.
    pub fn from_file(path: &std::path::Path) -> Result<(Self, &'static TimmSiglipTower)> {
        let file: Self = super::read_config(path)?;
        let bad = |what: String| Error::new(ErrorKind::BadConfig, format!("use {}: {what}", path.display()));
        let (v, t) = (&file.model_cfg.vision_cfg, &file.model_cfg.text_cfg);
        let tower = TOWERS.iter().find(|t| t.timm_name == v.timm_model_name).ok_or_else(|| {
            let names: Vec<&str> = TOWERS.iter().map(|t| t.timm_name).collect();
            bad(format!(
                "the timm image tower `{}` is not supported (supported: {})",
                v.timm_model_name,
                names.join(", ")
            ))
        })?;
        if v.timm_pool.as_deref() != Some("map") || v.timm_proj.as_deref().is_some_and(|p| p != "none") {
            return Err(bad(format!(
                "model_cfg.vision_cfg pools with {:?} and projects with {:?}; SigLIP's towers pool with \"map\" and project with none",
                v.timm_pool, v.timm_proj
            )));
        }
        if v.image_size != tower.image_size {
            return Err(bad(format!(
                "model_cfg.vision_cfg.image_size {} differs from the {} px timm builds `{}` for",
                v.image_size, tower.image_size, tower.timm_name
            )));
        }
        if !t.no_causal_mask || !t.proj_bias || t.pool_type.as_deref() != Some("last") {
            return Err(bad(format!(
                "model_cfg.text_cfg has no_causal_mask {}, proj_bias {}, pool_type {:?}; SigLIP's text tower has true, true, \"last\"",
                t.no_causal_mask, t.proj_bias, t.pool_type
            )));
        }
        let clean = t.tokenizer_kwargs.get("clean").and_then(|c| c.as_str());
        if clean != Some("canonicalize") || t.tokenizer_kwargs.len() != 1 {
            return Err(bad(format!(
                "model_cfg.text_cfg.tokenizer_kwargs is {:?}; only {{\"clean\": \"canonicalize\"}} is supported",
                t.tokenizer_kwargs
            )));
        }
        if t.act_kwargs.keys().any(|k| k != "approximate") || t.norm_kwargs.keys().any(|k| k != "eps") {
            return Err(bad(format!(
                "model_cfg.text_cfg act_kwargs {:?} / norm_kwargs {:?}: only `approximate` and `eps` are supported",
                t.act_kwargs, t.norm_kwargs
            )));
        }
        check_plain("text_cfg", &t.other, path)?;
        file.preprocess_cfg.check(path)?;
        Ok((file, tower))
    }
}

impl SiglipOpenClipText {
    /// The GELU open_clip's `act_kwargs` asks for, in `transformers`' names.
    fn hidden_act(&self, path: &std::path::Path) -> Result<&'static str> {
        match self.act_kwargs.get("approximate").map(|a| a.as_str()) {
            None | Some(Some("none")) => Ok("gelu"),
            Some(Some("tanh")) => Ok("gelu_pytorch_tanh"),
            Some(other) => Err(Error::new(
                ErrorKind::BadConfig,
                format!(
                    "use {}: model_cfg.text_cfg.act_kwargs.approximate {other:?} is not \"none\" or \"tanh\"",
                    path.display()
                ),
            )),
        }
    }

    /// open_clip's LayerNorm ε: `norm_kwargs.eps`, else PyTorch's 1e-5.
    fn eps(&self) -> f64 {
        self.norm_kwargs.get("eps").and_then(|e| e.as_f64()).unwrap_or(1e-5)
    }
}

/// The checkpoint in `files` as a ready SigLIP encoder.
pub fn load(files: &ModelFiles, dtype: DType, device: &Device) -> Result<SiglipEncoder> {
    let (file, tower) = SiglipOpenClipFile::from_file(&files.config)?;
    let mut map = read_open_clip_weights(&files.weights, device)?;
    let config = config_of(&file, tower, &map, &files.config, &files.weights)?;
    let renamed = rename(&mut map, &config).map_err(|e| e.context(&files.weights))?;
    if let Some(left) = map.keys().min() {
        return Err(Error::new(
            ErrorKind::BadWeights,
            format!(
                "load weights {}: tensor `{left}` is not part of an open_clip SigLIP model",
                files.weights.display()
            ),
        ));
    }
    let source = files.weights.display().to_string();
    let weights = Weights::from_tensors(renamed, dtype, device, &source);
    let model = Siglip::from_weights(&config, &weights)?;
    weights.check_every_tensor_used("open_clip SigLIP", &[])?;
    let tokenizer = SiglipText::open_clip(files, file.model_cfg.text_cfg.context_length)?;
    let preprocessor = file.preprocess_cfg.preprocessor(tower.image_size);
    Ok(SiglipEncoder::from_parts(model, tokenizer, preprocessor))
}

/// The `SiglipModel` config of the checkpoint: the tower's table line, `text_cfg`, and the
/// widths the weights give.
fn config_of(
    file: &SiglipOpenClipFile,
    tower: &TimmSiglipTower,
    map: &HashMap<String, Tensor>,
    config: &std::path::Path,
    weights: &std::path::Path,
) -> Result<SiglipConfig> {
    let shape = |name: &str| -> Result<Vec<usize>> {
        map.get(name).map(|t| t.dims().to_vec()).ok_or_else(|| {
            Error::new(ErrorKind::BadWeights, format!("read weights {}: tensor `{name}` is missing", weights.display()))
        })
    };
    let count =
        |prefix: &str| (0..).take_while(|i| map.keys().any(|k| k.starts_with(&format!("{prefix}.{i}.")))).count();
    let patch = shape("visual.trunk.patch_embed.proj.weight")?;
    let t = &file.model_cfg.text_cfg;
    let vision_config = SiglipVisionConfig {
        hidden_size: patch[0],
        intermediate_size: shape("visual.trunk.blocks.0.mlp.fc1.weight")?[0],
        num_hidden_layers: count("visual.trunk.blocks"),
        num_attention_heads: tower.heads,
        num_channels: patch[1],
        image_size: tower.image_size,
        patch_size: patch[patch.len() - 1],
        hidden_act: if tower.tanh_gelu { "gelu_pytorch_tanh" } else { "gelu" }.into(),
        layer_norm_eps: 1e-6,
    };
    let text_config = SiglipTextConfig {
        vocab_size: shape("text.token_embedding.weight")?[0],
        hidden_size: t.width,
        intermediate_size: shape("text.transformer.resblocks.0.mlp.c_fc.weight")?[0],
        num_hidden_layers: t.layers,
        num_attention_heads: t.heads,
        max_position_embeddings: t.context_length,
        hidden_act: t.hidden_act(config)?.into(),
        layer_norm_eps: t.eps(),
        projection_size: Some(file.model_cfg.embed_dim),
        pad_token_id: None,
    };
    super::check_patch_grid(config, vision_config.image_size, vision_config.patch_size)?;
    if file.model_cfg.embed_dim != vision_config.hidden_size {
        return Err(Error::new(
            ErrorKind::BadConfig,
            format!(
                "use {}: model_cfg.embed_dim {} differs from the image tower's width {} (timm_proj \"none\" adds no projection)",
                config.display(),
                file.model_cfg.embed_dim,
                vision_config.hidden_size
            ),
        ));
    }
    Ok(SiglipConfig { text_config, vision_config })
}

/// The open_clip tensors of `map` under `transformers`' `SiglipModel` names, taken out of it.
fn rename(map: &mut HashMap<String, Tensor>, config: &SiglipConfig) -> Result<HashMap<String, Tensor>> {
    let mut take = |name: &str| {
        map.remove(name).ok_or_else(|| {
            Error::new(ErrorKind::BadWeights, format!("convert open_clip SigLIP weights: tensor `{name}` is missing"))
        })
    };
    let compute = |e: candle_core::Error| Error::compute("convert open_clip SigLIP weights", e);
    let mut out = HashMap::new();
    let (v, p) = ("vision_model", "visual.trunk");
    for leaf in ["weight", "bias"] {
        out.insert(format!("{v}.embeddings.patch_embedding.{leaf}"), take(&format!("{p}.patch_embed.proj.{leaf}"))?);
        out.insert(format!("{v}.post_layernorm.{leaf}"), take(&format!("{p}.norm.{leaf}"))?);
    }
    out.insert(
        format!("{v}.embeddings.position_embedding.weight"),
        take(&format!("{p}.pos_embed"))?.squeeze(0).map_err(compute)?,
    );
    let width = config.vision_config.hidden_size;
    for i in 0..config.vision_config.num_hidden_layers {
        let (src, dst) = (format!("{p}.blocks.{i}"), format!("{v}.encoder.layers.{i}"));
        for leaf in ["weight", "bias"] {
            let qkv = take(&format!("{src}.attn.qkv.{leaf}"))?;
            for (j, part) in ["q_proj", "k_proj", "v_proj"].iter().enumerate() {
                out.insert(format!("{dst}.self_attn.{part}.{leaf}"), qkv.narrow(0, j * width, width).map_err(compute)?);
            }
            for (from, to) in [
                ("attn.proj", "self_attn.out_proj"),
                ("norm1", "layer_norm1"),
                ("norm2", "layer_norm2"),
                ("mlp.fc1", "mlp.fc1"),
                ("mlp.fc2", "mlp.fc2"),
            ] {
                out.insert(format!("{dst}.{to}.{leaf}"), take(&format!("{src}.{from}.{leaf}"))?);
            }
        }
    }
    // timm's `AttentionPoolLatent` keeps the query and the key-value projections apart;
    // `SiglipMultiheadAttentionPoolingHead` fuses them as `nn.MultiheadAttention` does.
    out.insert(format!("{v}.head.probe"), take(&format!("{p}.attn_pool.latent"))?);
    for (leaf, fused) in [("weight", "in_proj_weight"), ("bias", "in_proj_bias")] {
        let (q, kv) = (take(&format!("{p}.attn_pool.q.{leaf}"))?, take(&format!("{p}.attn_pool.kv.{leaf}"))?);
        out.insert(format!("{v}.head.attention.{fused}"), Tensor::cat(&[q, kv], 0).map_err(compute)?);
        for (from, to) in [
            ("attn_pool.proj", "attention.out_proj"),
            ("attn_pool.norm", "layernorm"),
            ("attn_pool.mlp.fc1", "mlp.fc1"),
            ("attn_pool.mlp.fc2", "mlp.fc2"),
        ] {
            out.insert(format!("{v}.head.{to}.{leaf}"), take(&format!("{p}.{from}.{leaf}"))?);
        }
    }
    let t = "text_model";
    out.insert(format!("{t}.embeddings.token_embedding.weight"), take("text.token_embedding.weight")?);
    out.insert(format!("{t}.embeddings.position_embedding.weight"), take("text.positional_embedding")?);
    for leaf in ["weight", "bias"] {
        out.insert(format!("{t}.final_layer_norm.{leaf}"), take(&format!("text.ln_final.{leaf}"))?);
        out.insert(format!("{t}.head.{leaf}"), take(&format!("text.text_projection.{leaf}"))?);
    }
    for name in ["logit_scale", "logit_bias"] {
        out.insert(name.into(), take(name)?.reshape(1).map_err(compute)?);
    }
    // A block's leftovers stay in `map`, which `load` refuses by name.
    for i in 0..config.text_config.num_hidden_layers {
        let (src, dst) = (format!("text.transformer.resblocks.{i}"), format!("{t}.encoder.layers.{i}"));
        convert_block(map, &src, &dst, &mut out)?;
    }
    Ok(out)
}
