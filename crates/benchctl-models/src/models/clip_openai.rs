//! CLIP weights in OpenAI's own naming (the `clip` package's state dicts, which OpenCLIP
//! keeps), converted on load to the Hugging Face naming of [`super::clip`].
//!
//! OpenAI's names and their conversion:
//! - `[visual.]conv1.weight` → `vision_model.embeddings.patch_embedding.weight`;
//!   `class_embedding`, `positional_embedding` → `embeddings.class_embedding`,
//!   `embeddings.position_embedding.weight`; `ln_pre`, `ln_post` → `pre_layrnorm`,
//!   `post_layernorm`; `proj` (a `width × output` matrix applied as `x @ proj`) →
//!   `visual_projection.weight`, transposed;
//! - in each `transformer.resblocks.N`: `attn.in_proj_weight` / `_bias` (q, k and v stacked)
//!   split into `self_attn.{q,k,v}_proj`; `attn.out_proj` → `self_attn.out_proj`; `ln_1`,
//!   `ln_2` → `layer_norm1`, `layer_norm2`; `mlp.c_fc`, `mlp.c_proj` → `mlp.fc1`, `mlp.fc2`.

use std::collections::HashMap;

use candle_core::Tensor;

use crate::{Error, ErrorKind, Result};

fn take(map: &HashMap<String, Tensor>, name: &str) -> Result<Tensor> {
    map.get(name)
        .cloned()
        .ok_or_else(|| Error::new(ErrorKind::BadWeights, format!("convert OpenAI CLIP weights: tensor `{name}` is missing")))
}

fn compute(e: candle_core::Error) -> Error {
    Error::compute("convert OpenAI CLIP weights", e)
}

/// One residual block `src` (e.g. `transformer.resblocks.3`) into `out` under `dst`
/// (e.g. `vision_model.encoder.layers.3`).
pub fn convert_block(map: &HashMap<String, Tensor>, src: &str, dst: &str, out: &mut HashMap<String, Tensor>) -> Result<()> {
    let join = |prefix: &str, name: &str| if prefix.is_empty() { name.to_string() } else { format!("{prefix}.{name}") };
    let in_w = take(map, &join(src, "attn.in_proj_weight"))?;
    let in_b = take(map, &join(src, "attn.in_proj_bias"))?;
    let width = in_w.dim(1).map_err(compute)?;
    for (i, part) in ["q_proj", "k_proj", "v_proj"].iter().enumerate() {
        out.insert(join(dst, &format!("self_attn.{part}.weight")), in_w.narrow(0, i * width, width).map_err(compute)?);
        out.insert(join(dst, &format!("self_attn.{part}.bias")), in_b.narrow(0, i * width, width).map_err(compute)?);
    }
    for (from, to) in [
        ("attn.out_proj", "self_attn.out_proj"),
        ("ln_1", "layer_norm1"),
        ("ln_2", "layer_norm2"),
        ("mlp.c_fc", "mlp.fc1"),
        ("mlp.c_proj", "mlp.fc2"),
    ] {
        for leaf in ["weight", "bias"] {
            out.insert(join(dst, &format!("{to}.{leaf}")), take(map, &join(src, &format!("{from}.{leaf}")))?);
        }
    }
    Ok(())
}

/// The vision tower under `prefix` (`visual` in a full checkpoint, empty for a bare one),
/// with `layers` residual blocks, in Hugging Face naming.
pub fn convert_vision(map: &HashMap<String, Tensor>, prefix: &str, layers: usize) -> Result<HashMap<String, Tensor>> {
    let p = |name: &str| if prefix.is_empty() { name.to_string() } else { format!("{prefix}.{name}") };
    let mut out = HashMap::new();
    out.insert("vision_model.embeddings.patch_embedding.weight".into(), take(map, &p("conv1.weight"))?);
    out.insert("vision_model.embeddings.class_embedding".into(), take(map, &p("class_embedding"))?);
    out.insert("vision_model.embeddings.position_embedding.weight".into(), take(map, &p("positional_embedding"))?);
    for (from, to) in [("ln_pre", "pre_layrnorm"), ("ln_post", "post_layernorm")] {
        for leaf in ["weight", "bias"] {
            out.insert(format!("vision_model.{to}.{leaf}"), take(map, &p(&format!("{from}.{leaf}")))?);
        }
    }
    let proj = take(map, &p("proj"))?.t().and_then(|t| t.contiguous()).map_err(compute)?;
    out.insert("visual_projection.weight".into(), proj);
    for i in 0..layers {
        convert_block(map, &p(&format!("transformer.resblocks.{i}")), &format!("vision_model.encoder.layers.{i}"), &mut out)?;
    }
    Ok(out)
}
