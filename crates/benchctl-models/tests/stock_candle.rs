//! Cross-check at full size: our CLIP equals candle-transformers' stock CLIP (which matches
//! transformers to ~5e-6) on the full ViT-B/32 architecture with random weights. The tiny
//! parity fixtures cover config variety; this covers the real widths and depths.

use benchctl_models::models::clip::{Clip, ClipConfig};
use candle_core::{DType, Device, Tensor};
use candle_nn::{Init, VarBuilder, VarMap};
use candle_transformers::models::clip as stock;

#[test]
fn matches_stock_candle_clip_on_full_size_vit_b32() {
    let device = Device::Cpu;
    let varmap = VarMap::new();
    // Tensors the stock model would otherwise invent without storing them.
    varmap
        .get(768, "vision_model.embeddings.class_embedding", Init::Randn { mean: 0.0, stdev: 1.0 }, DType::F32, &device)
        .unwrap();
    varmap.get((), "logit_scale", Init::Const(2.6592), DType::F32, &device).unwrap();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &device);
    let reference = stock::ClipModel::new(vb, &stock::ClipConfig::vit_base_patch32()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let weights = dir.path().join("model.safetensors");
    varmap.save(&weights).unwrap();
    let ours = Clip::load(ClipConfig::vit_b32(), &weights, DType::F32, &device).unwrap();

    let pixels = Tensor::randn(0f32, 1f32, (2, 3, 224, 224), &device).unwrap();
    let a = ours.image_features(&pixels).unwrap();
    let b = reference.get_image_features(&pixels).unwrap();
    assert_close(&a, &b, "image features");

    // Two texts of the same length, each closed by the end token (the largest id).
    let ids = vec![vec![49406, 320, 1125, 539, 320, 2368, 49407], vec![49406, 1237, 3255, 2433, 530, 518, 49407]];
    let a = ours.text_features(&ids).unwrap();
    let flat: Vec<u32> = ids.concat();
    let b = reference.get_text_features(&Tensor::from_vec(flat, (2, 7), &device).unwrap()).unwrap();
    assert_close(&a, &b, "text features");
}

fn assert_close(a: &Tensor, b: &Tensor, what: &str) {
    let scale = b
        .abs()
        .unwrap()
        .max_keepdim(1)
        .unwrap()
        .max_keepdim(0)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()[0];
    let diff = (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
    eprintln!("{what}: max abs diff {diff} (max magnitude {scale})");
    assert!(diff <= 1e-4 * scale.max(1.0), "{what}: max abs diff {diff} at magnitude {scale}");
}
