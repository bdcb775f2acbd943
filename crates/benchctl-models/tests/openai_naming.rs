//! OpenAI's CLIP test vectors (`../shared/reference/openai-clip-vectors/clip_data.json`, from
//! OpenAI's reference code): a residual attention block and a tiny vision transformer in
//! OpenAI's parameter naming, converted on load, reproduce the recorded outputs.

use std::collections::HashMap;

use benchctl_models::models::clip::{ClipVision, ResidualBlock, VisionConfig};
use benchctl_models::models::clip_openai::{convert_block, convert_vision};
use benchctl_testkit::shared;
use candle_core::{Device, Tensor};
use serde_json::Value;

/// A nested JSON list as a tensor of its shape.
fn tensor(v: &Value) -> Tensor {
    let mut shape = Vec::new();
    let mut cur = v;
    while let Value::Array(items) = cur {
        shape.push(items.len());
        cur = &items[0];
    }
    let mut flat = Vec::new();
    fn walk(v: &Value, out: &mut Vec<f32>) {
        match v {
            Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            other => out.push(other.as_f64().unwrap() as f32),
        }
    }
    walk(v, &mut flat);
    Tensor::from_vec(flat, shape, &Device::Cpu).unwrap()
}

fn tensors(v: &Value) -> HashMap<String, Tensor> {
    v.as_object().unwrap().iter().map(|(k, v)| (k.clone(), tensor(v))).collect()
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.dims(), b.dims());
    (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
}

fn data() -> Option<Value> {
    let path = shared("reference/openai-clip-vectors/clip_data.json")?;
    Some(serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap())
}

#[test]
fn the_residual_attention_block_reproduces_openai() {
    let Some(d) = data() else { return };
    let width = d["attn_config"]["d_model"].as_u64().unwrap() as usize;
    let heads = d["attn_config"]["n_head"].as_u64().unwrap() as usize;
    let mut converted = HashMap::new();
    convert_block(&mut tensors(&d["attn_weights"]), "", "", &mut converted).unwrap();
    let block = ResidualBlock::from_tensors(width, heads, converted, &Device::Cpu).unwrap();
    let input = tensor(&d["attn_input"]);
    let expected = tensor(&d["attn_output"]);
    let out = block.forward(&input).unwrap();
    let diff = max_abs_diff(&out, &expected);
    assert!(diff < 1e-4, "max abs diff {diff}");
}

#[test]
fn the_tiny_vision_transformer_reproduces_openai() {
    let Some(d) = data() else { return };
    let c = &d["vit_config"];
    let n = |k: &str| c[k].as_u64().unwrap() as usize;
    let config: VisionConfig = serde_json::from_value(serde_json::json!({
        "hidden_size": n("width"), "intermediate_size": 4 * n("width"), "num_hidden_layers": n("layers"),
        "num_attention_heads": n("heads"), "image_size": n("input_resolution"), "patch_size": n("patch_size"),
        "hidden_act": "quick_gelu",
    }))
    .unwrap();
    let converted = convert_vision(&mut tensors(&d["vit_weights"]), "", n("layers")).unwrap();
    let vision = ClipVision::from_tensors(&config, n("output_dim"), converted, &Device::Cpu).unwrap();
    // The recorded input is stored channels-last (1, 32, 32, 3); the model reads NCHW.
    let input = tensor(&d["vit_input"]).permute((0, 3, 1, 2)).unwrap().contiguous().unwrap();
    let expected = tensor(&d["vit_output"]);
    let diff = max_abs_diff(&vision.image_features(&input).unwrap(), &expected);
    assert!(diff < 1e-4, "max abs diff {diff}");
}

#[test]
fn a_missing_openai_tensor_is_named() {
    let Some(d) = data() else { return };
    let mut weights = tensors(&d["vit_weights"]);
    weights.remove("transformer.resblocks.1.attn.in_proj_bias");
    let err = convert_vision(&mut weights, "", 2).unwrap_err();
    assert!(err.to_string().contains("`transformer.resblocks.1.attn.in_proj_bias` is missing"), "{err}");
}
