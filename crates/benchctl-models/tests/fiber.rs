//! FIBER against the official code: `../shared/reference/fiber-tiny` holds a tiny
//! random-weight `FIBERTransformerSS` built and run by microsoft/FIBER itself (full depths,
//! tiny widths), its inputs and every intermediate (see its README). Each tensor is
//! reproduced here within 1e-4, the debug tensors of each fusion step included, so that a
//! mismatch names its layer. `BENCHCTL_TEST_DEVICE=cuda` runs them on a GPU.

use std::collections::HashMap;
use std::path::Path;

use benchctl_models::models::fiber::{Fiber, FiberConfig, FusionTrace, TextBatch};
use benchctl_testkit::{shared, test_device};
use candle_core::{DType, IndexOp, Tensor};

const TOLERANCE: f32 = 1e-4;

/// The tiny model's shape, as a user writes it in `config.json` beside a checkpoint (values
/// from the fixture's `config.json`, key `tiny`).
const TINY_CONFIG: &str = r#"{
    "model_type": "fiber",
    "image_size": 224,
    "max_text_len": 40,
    "hidden_size": 24,
    "num_fuse_block": 6,
    "input_image_embed_size": 64,
    "input_text_embed_size": 40,
    "swin": {"embed_dim": 8, "depths": [2, 2, 18, 2], "num_heads": [1, 2, 4, 8]},
    "roberta": {"vocab_size": 360, "hidden_size": 40, "num_attention_heads": 4, "intermediate_size": 160}
}"#;

fn tiny_config() -> FiberConfig {
    serde_json::from_str(TINY_CONFIG).expect("the tiny config parses")
}

fn load_all(path: &Path) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(path, &test_device()).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Max |a − b| after both are flattened to f32; panics on a shape mismatch.
fn max_diff(name: &str, ours: &Tensor, expected: &Tensor) -> f32 {
    let ours = ours.to_dtype(DType::F32).unwrap();
    assert_eq!(ours.dims(), expected.dims(), "{name}: shape");
    let a = ours.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let b = expected.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// The caption batch as fed to the official code: ids and mask rows of 40.
fn text_batch(inputs: &HashMap<String, Tensor>) -> TextBatch {
    let rows = |name: &str| -> Vec<Vec<i64>> { inputs[name].to_vec2::<i64>().unwrap() };
    TextBatch {
        ids: rows("input_ids").into_iter().map(|r| r.into_iter().map(|v| v as u32).collect()).collect(),
        mask: rows("attention_mask").into_iter().map(|r| r.into_iter().map(|v| v as u8).collect()).collect(),
    }
}

/// `(images·captions, …)` rows of a per-pair tensor as the fixture lays them out: `[image, caption, …]`.
fn by_pair(t: &Tensor, images: usize, captions: usize) -> Tensor {
    let mut dims = vec![images, captions];
    dims.extend_from_slice(&t.dims()[1..]);
    t.reshape(dims).unwrap()
}

#[test]
fn fiber_reproduces_every_tensor_of_the_official_code() {
    let Some(dir) = shared("reference/fiber-tiny") else { return };
    let model = Fiber::load(&tiny_config(), &dir.join("model.safetensors"), DType::F32, &test_device()).unwrap();
    let inputs = load_all(&dir.join("inputs.safetensors"));
    let expected = load_all(&dir.join("expected.safetensors"));
    let pixels = &inputs["pixel_values"];
    let text = text_batch(&inputs);
    let (images, captions) = (pixels.dim(0).unwrap(), text.ids.len());

    let mut ours: Vec<(&str, Tensor)> = Vec::new();
    // The unimodal (ITC) paths.
    let stages = model.image_stages(pixels).unwrap();
    ours.push(("debug.image.patch_embed", stages[0].clone()));
    ours.push(("debug.image.stage0_out", stages[1].clone()));
    ours.push(("debug.image.stage1_out", stages[2].clone()));
    ours.push(("debug.image.stage2_out", stages[3].clone()));
    let image_backbone = model.image_backbone(pixels).unwrap();
    assert_eq!(max_diff("backbone vs stages", &image_backbone, &stages[5]), 0.0);
    let (image_feats, image_embeds) = model.itc_image_from_backbone(&image_backbone).unwrap();
    ours.push(("itc.image_backbone", image_backbone));
    ours.push(("itc.image_feats", image_feats));
    ours.push(("itc.image_embeds", image_embeds.clone()));
    ours.push(("debug.text.embeddings", model.text_embeddings(&text).unwrap()));
    let text_backbone = model.text_backbone(&text).unwrap();
    let (text_feats, text_embeds) = model.itc_text_from_backbone(&text_backbone).unwrap();
    ours.push(("itc.text_backbone", text_backbone));
    ours.push(("itc.text_feats", text_feats));
    ours.push(("itc.text_embeds", text_embeds.clone()));
    let sim = image_embeds.matmul(&text_embeds.t().unwrap()).unwrap();
    let temp = model.temp().expect("the fixture has `temp`") as f64;
    ours.push(("itc.logits_i2t", (&sim / temp).unwrap()));
    ours.push(("itc.logits_t2i", (sim.t().unwrap() / temp).unwrap()));
    ours.push(("itc.sim", sim));
    ours.push(("itc.temp", Tensor::new(&[temp as f32], &test_device()).unwrap()));
    let mask = model.text_mask(&text).unwrap();
    ours.push(("text.extended_attention_mask", mask.clone()));

    // The fused (ITM) path on every (image, caption) pair, image-major as the fixture.
    let image_pre = model.image_prefusion(pixels).unwrap();
    let text_pre = model.text_prefusion(&text, &mask).unwrap();
    ours.push(("debug.fused.image_prefusion", image_pre.clone()));
    ours.push(("debug.fused.text_prefusion", text_pre.clone()));
    let pick = |rows: Vec<u32>, t: &Tensor| t.index_select(&Tensor::new(rows, &test_device()).unwrap(), 0).unwrap();
    let image_rows: Vec<u32> = (0..images * captions).map(|p| (p / captions) as u32).collect();
    let text_rows: Vec<u32> = (0..images * captions).map(|p| (p % captions) as u32).collect();
    let pair_text = TextBatch {
        ids: text_rows.iter().map(|&r| text.ids[r as usize].clone()).collect(),
        mask: text_rows.iter().map(|&r| text.mask[r as usize].clone()).collect(),
    };
    let pair_mask = model.text_mask(&pair_text).unwrap();
    let mut trace = FusionTrace::default();
    let (img, txt) =
        model.fuse(&pick(image_rows, &image_pre), &pick(text_rows, &text_pre), &pair_mask, Some(&mut trace)).unwrap();
    let layout = model.layout();
    assert_eq!(trace.steps.len(), 6);
    let step_names = [
        "step0.image_s2b14",
        "step1.image_s2b15",
        "step2.image_s2b16",
        "step3.image_s2b17",
        "step4.image_s3b0",
        "step5.image_s3b1",
    ];
    for (k, (step_image, step_text)) in trace.steps.iter().enumerate() {
        let image_name: &'static str = Box::leak(format!("debug.fused.{}", step_names[k]).into_boxed_str());
        let text_name: &'static str =
            Box::leak(format!("debug.fused.step{k}.text_l{}", layout.first_fused_layer + k).into_boxed_str());
        ours.push((image_name, by_pair(step_image, images, captions)));
        ours.push((text_name, by_pair(step_text, images, captions)));
    }
    // The fusion is exercised: one caption's text states differ by the image they attend to.
    let text_step0 = by_pair(&trace.steps[0].1, images, captions);
    let influence = max_diff("image influence", &text_step0.i((0, 0)).unwrap(), &text_step0.i((1, 0)).unwrap());
    assert!(influence > 1e-2, "the text does not depend on the image ({influence:.2e}): the fusion is not exercised");
    ours.push(("debug.fused.stage2_out", by_pair(trace.stage2_out.as_ref().unwrap(), images, captions)));
    let heads = model.fused_heads(&img, &txt).unwrap();
    let logits = model.itm_logits(&heads.cls_feats).unwrap();
    ours.push(("fused.image_backbone", by_pair(&img, images, captions)));
    ours.push(("fused.text_backbone", by_pair(&txt, images, captions)));
    ours.push(("fused.text_feats", by_pair(&heads.text_feats, images, captions)));
    ours.push(("fused.image_feats", by_pair(&heads.image_feats, images, captions)));
    ours.push(("fused.cls_feats", by_pair(&heads.cls_feats, images, captions)));
    ours.push(("itm.rank_score", by_pair(&logits.i((.., 1)).unwrap(), images, captions)));
    ours.push(("itm.logits", by_pair(&logits, images, captions)));

    let mut report = Vec::new();
    let mut failures = Vec::new();
    for (name, tensor) in &ours {
        let reference = expected.get(*name).unwrap_or_else(|| panic!("the fixture has no `{name}`"));
        let diff = max_diff(name, tensor, reference);
        report.push(format!("{name}: {diff:.2e}"));
        if diff > TOLERANCE {
            failures.push(format!("{name}: max |diff| {diff:.3e}"));
        }
    }
    eprintln!("{}", report.join("\n"));
    let covered: std::collections::HashSet<&str> = ours.iter().map(|(n, _)| *n).collect();
    let missed: Vec<&String> = expected.keys().filter(|k| !covered.contains(k.as_str())).collect();
    assert!(missed.is_empty(), "tensors of the fixture not checked: {missed:?}");
    assert!(failures.is_empty(), "off by more than {TOLERANCE}:\n{}", failures.join("\n"));
}

/// The micro FIBER of `scripts/fixtures/gen_fiber_ckpt_fixture.py`: official naming (checked against
/// the official fixture by the script), written by torch as a Lightning `.ckpt` (with queue
/// buffers, optimizer and scheduler state, callbacks and hyper-parameters) and as safetensors.
fn micro() -> std::path::PathBuf {
    benchctl_testkit::model_fixture("fiber-micro")
}

fn micro_inputs(model: &Fiber) -> (Tensor, TextBatch) {
    let size = model.image_size();
    let pixels = Tensor::randn(0f32, 1f32, (2, 3, size, size), &test_device()).unwrap();
    let tokenizer = benchctl_models::tokenizer::RobertaTokenizer::from_file(&micro().join("vocab.json"), 50).unwrap();
    let rows: Vec<Vec<u32>> = ["a red square to the left of a green triangle", "a blue circle"]
        .iter()
        .map(|t| tokenizer.encode(t).unwrap())
        .collect();
    (pixels, TextBatch::pad(&rows, tokenizer.pad()))
}

fn outputs(model: &Fiber, pixels: &Tensor, text: &TextBatch) -> Vec<Vec<f32>> {
    let flat = |t: Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let image = model.itc_image_from_backbone(&model.image_backbone(pixels).unwrap()).unwrap().1;
    let texts = model.itc_text_from_backbone(&model.text_backbone(text).unwrap()).unwrap().1;
    let logits = model.pair_logits(&model.image_prefusion(pixels).unwrap(), text).unwrap();
    vec![flat(image), flat(texts), flat(logits)]
}

#[test]
fn a_lightning_checkpoint_loads_as_its_safetensors_twin() {
    let config = FiberConfig::from_file_or_default(&micro().join("config.json")).unwrap();
    assert_eq!(config.image_size, None, "the fixture's config leaves the image size to the checkpoint");
    let from_ckpt = Fiber::load(&config, &micro().join("fiber_micro.ckpt"), DType::F32, &test_device()).unwrap();
    let from_safetensors =
        Fiber::load(&config, &micro().join("model.safetensors"), DType::F32, &test_device()).unwrap();
    assert_eq!(from_ckpt.image_size(), 64, "read from the 3×3 relative position tables (window 2)");
    assert!(from_ckpt.has_itm_head());
    assert!((from_ckpt.temp().unwrap() - 0.07).abs() < 1e-7);
    let (pixels, text) = micro_inputs(&from_ckpt);
    let (a, b) = (outputs(&from_ckpt, &pixels, &text), outputs(&from_safetensors, &pixels, &text));
    assert_eq!(a, b, "the same tensors from either file");
    assert!(a[2].iter().all(|v| v.is_finite()) && a[2].len() == 4);
}

#[test]
fn an_itc_checkpoint_has_no_itm_head_and_a_deeper_checkpoint_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for file in ["vocab.json", "merges.txt", "config.json"] {
        std::fs::copy(micro().join(file), dir.path().join(file)).unwrap();
    }
    let tensors = load_all(&micro().join("model.safetensors"));
    let itc_only: HashMap<String, Tensor> = tensors
        .iter()
        .filter(|(k, _)| !k.starts_with("itm_score") && !k.starts_with("rank_output"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    candle_core::safetensors::save(&itc_only, dir.path().join("model.safetensors")).unwrap();
    let files = benchctl_models::hub::from_path(dir.path()).unwrap();
    assert_eq!(
        benchctl_models::registry::architecture_of(&files).unwrap(),
        benchctl_models::models::fiber::ARCHITECTURE
    );
    let err = benchctl_models::models::fiber::FiberItm::load(&files, DType::F32, &test_device()).unwrap_err();
    assert!(err.to_string().contains("no ITM head") && err.to_string().contains("--score itc"), "{err}");
    let itc = benchctl_models::models::fiber::FiberItc::load(&files, DType::F32, &test_device()).unwrap();
    let (pixels, _) = micro_inputs(itc.model());
    let embeds = benchctl_models::DualEncoder::encode_images(&itc, &pixels).unwrap();
    assert_eq!(embeds.dims(), [2, 8]);

    // A config of 11 text layers disagrees with the checkpoint's 12 (its fused layers move,
    // so a tensor they need is missing): refused, naming the tensor, never half-loaded.
    let mut config = FiberConfig::from_file_or_default(&micro().join("config.json")).unwrap();
    config.roberta.num_hidden_layers = 11;
    let err = Fiber::load(&config, &micro().join("fiber_micro.ckpt"), DType::F32, &test_device()).unwrap_err();
    assert_eq!(err.kind(), benchctl_models::ErrorKind::BadWeights);
    assert!(err.to_string().contains("fiber_micro.ckpt: tensor `text_transformer.encoder.layer."), "{err}");
}

#[test]
fn the_tokenizer_reproduces_the_official_tokenizers_ids() {
    // The fixture's ids come from `RobertaTokenizer` (transformers 4.6, slow) on its tiny BPE,
    // called as FIBER's `get_text` does; the captions are in the metadata key `fixture`.
    let Some(dir) = shared("reference/fiber-tiny") else { return };
    let bytes = std::fs::read(dir.join("inputs.safetensors")).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let fixture: serde_json::Value =
        serde_json::from_str(&meta.metadata().as_ref().unwrap()["fixture"]).expect("captions in the metadata");
    let captions: Vec<String> = serde_json::from_value(fixture["captions"].clone()).unwrap();
    let inputs = load_all(&dir.join("inputs.safetensors"));
    let expected = text_batch(&inputs);
    let tokenizer = benchctl_models::tokenizer::RobertaTokenizer::from_file(&dir.join("vocab.json"), 40).unwrap();
    let rows: Vec<Vec<u32>> = captions.iter().map(|c| tokenizer.encode(c).unwrap()).collect();
    for (row, (ids, mask)) in rows.iter().zip(expected.ids.iter().zip(&expected.mask)) {
        let real = mask.iter().filter(|&&m| m == 1).count();
        assert_eq!(row[..], ids[..real]);
        assert!(ids[real..].iter().all(|&id| id == tokenizer.pad()));
    }
    assert_eq!(captions.len(), 3);
}
