//! Parity with the reference implementations on the random-weight fixtures written by
//! `scripts/fixtures/gen_fixtures.py`, within 1e-4 in f32: transformers' `CLIPModel` (two configs),
//! open_clip's `CLIP` in its own naming, `SiglipModel` and `BlipForImageTextRetrieval`
//! (ITM and ITC); plus the f16/bf16 drift against those f32 outputs. On the CPU by default;
//! `BENCHCTL_TEST_DEVICE=cuda` runs the same checks on a GPU (docs/performance.md, "GPU").

use benchctl_models::hub;
use benchctl_models::models::blip::{BlipItc, BlipItm};
use benchctl_models::models::clip::ClipEncoder;
use benchctl_models::models::clip_openai::load_open_clip;
use benchctl_models::models::siglip::SiglipEncoder;
use benchctl_models::{DualEncoder, FusionEncoder, ScoreKind};
use benchctl_testkit::{fixture_model, half_precision_bound, test_device};
use candle_core::{DType, Tensor};

const TOLERANCE: f32 = 1e-4;

struct Reference {
    tensors: std::collections::HashMap<String, Tensor>,
    texts: Vec<String>,
}

fn reference(model: &str) -> Reference {
    let path = fixture_model(model).join("reference.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let texts = serde_json::from_str(&meta.metadata().as_ref().unwrap()["texts"]).unwrap();
    Reference { tensors: candle_core::safetensors::load(&path, &test_device()).unwrap(), texts }
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.dims(), b.dims());
    (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
}

fn load(model: &str) -> ClipEncoder {
    let files = hub::from_dir(&fixture_model(model)).unwrap();
    ClipEncoder::load(&files, DType::F32, &test_device()).unwrap()
}

/// The unpadded id rows of the reference batch.
fn id_rows(r: &Reference) -> Vec<Vec<u32>> {
    let ids = r.tensors["input_ids"].to_vec2::<i64>().unwrap();
    let mask = r.tensors["attention_mask"].to_vec2::<i64>().unwrap();
    ids.iter()
        .zip(&mask)
        .map(|(row, m)| row.iter().zip(m).filter(|(_, &m)| m == 1).map(|(&id, _)| id as u32).collect())
        .collect()
}

fn check_model(name: &str) {
    let model = load(name);
    let r = reference(name);
    let image = model.model().image_features(&r.tensors["pixel_values"]).unwrap();
    let d = max_abs_diff(&image, &r.tensors["image_embeds"]);
    assert!(d <= TOLERANCE, "{name}: image embeddings differ by {d}");

    let rows = id_rows(&r);
    let text = model.model().text_features(&rows).unwrap();
    let d = max_abs_diff(&text, &r.tensors["text_embeds"]);
    assert!(d <= TOLERANCE, "{name}: text embeddings differ by {d}");

    // Our tokenizer gives transformers' ids for the same strings (the last is truncated to 77).
    let ours: Vec<Vec<u32>> = r.texts.iter().map(|t| model.tokenizer().encode(t).unwrap()).collect();
    assert_eq!(ours, rows, "{name}: token ids");
    assert_eq!(ours.last().unwrap().len(), 77);

    // Logits through the public path: tokenise, encode, normalise, scale.
    let texts: Vec<&str> = r.texts.iter().map(String::as_str).collect();
    let images = model.encode_images(&r.tensors["pixel_values"]).unwrap();
    let texts = model.encode_texts(&texts).unwrap();
    let logits = model.scores(&images.unsqueeze(0).unwrap(), &texts.unsqueeze(0).unwrap()).unwrap().squeeze(0).unwrap();
    let d = max_abs_diff(&logits, &r.tensors["logits_per_image"]);
    assert!(d <= TOLERANCE, "{name}: logits differ by {d}");
}

#[test]
fn clip_tiny_a_matches_transformers() {
    check_model("clip-tiny-a");
}

#[test]
fn clip_tiny_b_matches_transformers() {
    // Differs from a in width, depth, heads, patch and image size, GELU instead of
    // QuickGELU, layer-norm epsilon and the legacy end-token convention.
    check_model("clip-tiny-b");
}

#[test]
fn padding_a_batch_does_not_change_a_text() {
    let model = load("clip-tiny-a");
    let tok = model.tokenizer();
    let short = tok.encode("a cat").unwrap();
    let long = tok.encode("a cat sitting on a very long and winding road at dusk").unwrap();
    let alone = model.model().text_features(std::slice::from_ref(&short)).unwrap();
    let batched = model.model().text_features(&[short, long]).unwrap().get(0).unwrap().unsqueeze(0).unwrap();
    assert!(max_abs_diff(&alone, &batched) <= 1e-5);
}

/// Logits of a fixture model in `dtype` through the public path.
fn logits(name: &str, dtype: DType) -> Tensor {
    let files = hub::from_dir(&fixture_model(name)).unwrap();
    let model = ClipEncoder::load(&files, dtype, &test_device()).unwrap();
    let r = reference(name);
    let texts: Vec<&str> = r.texts.iter().map(String::as_str).collect();
    let pixels = r.tensors["pixel_values"].to_dtype(dtype).unwrap();
    let images = model.encode_images(&pixels).unwrap();
    let texts = model.encode_texts(&texts).unwrap();
    model.scores(&images.unsqueeze(0).unwrap(), &texts.unsqueeze(0).unwrap()).unwrap().squeeze(0).unwrap()
}

/// How far `output` of fixture `name` may drift in `dtype`, and transformers' own drift there
/// (`half-precision-drift.json`, from `scripts/fixtures/gen_half_drift_yardsticks.py`).
fn drift_bound(name: &str, output: &str, dtype: DType) -> (f64, f64) {
    library_drift_bound(name, "transformers", output, dtype)
}

/// [`drift_bound`] with the yardstick of `library` (`transformers`, `open_clip`).
fn library_drift_bound(name: &str, library: &str, output: &str, dtype: DType) -> (f64, f64) {
    let path = fixture_model(name).join("half-precision-drift.json");
    let yardstick: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    half_precision_bound(&yardstick[format!("{library}_half_precision_drift")], output, dtype)
}

#[test]
fn half_precision_drift_is_reported_and_bounded() {
    // Reduced precision is an option, not the default: its drift against transformers' f32
    // logits is measured here (printed with --nocapture) and held to twice transformers' own.
    for name in ["clip-tiny-a", "clip-tiny-b"] {
        let reference = &reference(name).tensors["logits_per_image"];
        for dtype in [DType::BF16, DType::F16] {
            let (bound, theirs) = drift_bound(name, "logits_per_image", dtype);
            let d = max_abs_diff(&logits(name, dtype), reference);
            eprintln!("{name} {dtype:?}: max abs logit drift {d} (transformers' own {theirs})");
            assert!(f64::from(d) < bound, "{name} {dtype:?}: logits drift by {d}");
        }
    }
}

fn files(name: &str) -> hub::ModelFiles {
    hub::from_dir(&fixture_model(name)).unwrap()
}

fn id_rows_of(ids: &Tensor) -> Vec<Vec<u32>> {
    ids.to_vec2::<i64>().unwrap().iter().map(|r| r.iter().map(|&i| i as u32).collect()).collect()
}

fn unsqueeze_scores(model: &dyn DualEncoder, pixels: &Tensor, texts: &[String]) -> Tensor {
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let images = model.encode_images(pixels).unwrap();
    let texts = model.encode_texts(&texts).unwrap();
    model.scores(&images.unsqueeze(0).unwrap(), &texts.unsqueeze(0).unwrap()).unwrap().squeeze(0).unwrap()
}

#[test]
fn openclip_checkpoint_in_open_clip_naming_matches_open_clip() {
    // A full open_clip state dict (GELU, `in_proj_weight`, `text_projection` as a matrix),
    // found through `open_clip_config.json` and converted on load.
    let f = files("openclip-tiny");
    assert!(f.config.ends_with("open_clip_config.json"));
    let model = load_open_clip(&f, DType::F32, &test_device()).unwrap();
    assert_eq!(model.model().config().text_config.hidden_act, "gelu");
    let r = reference("openclip-tiny");
    let image = model.model().image_features(&r.tensors["pixel_values"]).unwrap();
    let d = max_abs_diff(&image, &r.tensors["image_embeds"]);
    assert!(d <= TOLERANCE, "openclip image features differ by {d}");

    // open_clip pads to 77 with zeros; our rows stop at the end token.
    let padded = id_rows_of(&r.tensors["input_ids"]);
    let ours: Vec<Vec<u32>> = r.texts.iter().map(|t| model.tokenizer().encode(t).unwrap()).collect();
    for (o, p) in ours.iter().zip(&padded) {
        assert_eq!(&p[..o.len()], o.as_slice());
        assert!(p[o.len()..].iter().all(|&id| id == 0));
    }
    let text = model.model().text_features(&ours).unwrap();
    let d = max_abs_diff(&text, &r.tensors["text_embeds"]);
    assert!(d <= TOLERANCE, "openclip text features differ by {d}");
    let scale = r.tensors["logit_scale"].to_vec1::<f32>().unwrap()[0];
    assert!((model.model().logit_scale() - scale).abs() <= 1e-4 * scale);
}

/// open_clip's own model in bf16 and f16 (`half-precision-drift.json`) is the yardstick for
/// benchctl's in the same dtype, on the logits of the fixture's stored f32 features.
#[test]
fn openclip_half_precision_drift_is_reported_and_bounded() {
    let r = reference("openclip-tiny");
    let logits = |images: &Tensor, texts: &Tensor, scale: f32| -> Tensor {
        let unit = |x: &Tensor| x.broadcast_div(&x.sqr().unwrap().sum_keepdim(1).unwrap().sqrt().unwrap()).unwrap();
        (unit(images).matmul(&unit(texts).t().unwrap()).unwrap() * f64::from(scale)).unwrap()
    };
    let scale = r.tensors["logit_scale"].to_vec1::<f32>().unwrap()[0];
    let expected = logits(&r.tensors["image_embeds"], &r.tensors["text_embeds"], scale);
    for dtype in [DType::BF16, DType::F16] {
        let model = load_open_clip(&files("openclip-tiny"), dtype, &test_device()).unwrap();
        let images = model.model().image_features(&r.tensors["pixel_values"].to_dtype(dtype).unwrap()).unwrap();
        let ids: Vec<Vec<u32>> = r.texts.iter().map(|t| model.tokenizer().encode(t).unwrap()).collect();
        let texts = model.model().text_features(&ids).unwrap();
        let f32 = |t: Tensor| t.to_dtype(DType::F32).unwrap();
        let d = max_abs_diff(&logits(&f32(images), &f32(texts), model.model().logit_scale()), &expected);
        let (bound, theirs) = library_drift_bound("openclip-tiny", "open_clip", "logits_per_image", dtype);
        eprintln!("openclip-tiny {dtype:?}: max abs logit drift {d} (open_clip's own {theirs})");
        assert!(f64::from(d) < bound, "openclip {dtype:?} drifts by {d}");
    }
}

#[test]
fn siglip_tiny_matches_transformers() {
    let model = SiglipEncoder::load(&files("siglip-tiny"), DType::F32, &test_device()).unwrap();
    let r = reference("siglip-tiny");
    let image = model.model().image_features(&r.tensors["pixel_values"]).unwrap();
    let d = max_abs_diff(&image, &r.tensors["image_embeds"]);
    assert!(d <= TOLERANCE, "siglip image features differ by {d}");

    // Canonicalised, `</s>`-terminated, padded to the fixed length: the slow tokenizer's ids.
    let rows = id_rows_of(&r.tensors["input_ids"]);
    let ours: Vec<Vec<u32>> = r.texts.iter().map(|t| model.tokenizer().encode(t).unwrap()).collect();
    assert_eq!(ours, rows);
    let text = model.model().text_features(&rows).unwrap();
    let d = max_abs_diff(&text, &r.tensors["text_embeds"]);
    assert!(d <= TOLERANCE, "siglip text features differ by {d}");

    let images = model.encode_images(&r.tensors["pixel_values"]).unwrap().unsqueeze(0).unwrap();
    let texts: Vec<&str> = r.texts.iter().map(String::as_str).collect();
    let texts = model.encode_texts(&texts).unwrap().unsqueeze(0).unwrap();
    let logits = model.logits(&images, &texts).unwrap().squeeze(0).unwrap();
    let d = max_abs_diff(&logits, &r.tensors["logits_per_image"]);
    assert!(d <= TOLERANCE, "siglip logits differ by {d}");
    // The stored scores are those logits; their sigmoid is transformers' probability.
    let scores = model.scores(&images, &texts).unwrap().squeeze(0).unwrap();
    assert!(max_abs_diff(&scores, &r.tensors["logits_per_image"]) <= TOLERANCE);
    let probabilities = candle_nn::ops::sigmoid(&scores).unwrap();
    let expected = candle_nn::ops::sigmoid(&r.tensors["logits_per_image"]).unwrap();
    assert!(max_abs_diff(&probabilities, &expected) <= TOLERANCE);
    assert_eq!(model.score_kind(), ScoreKind::Logit);
}

/// An image size that is not a multiple of the patch (the So400m/14 checkpoints' 384 px in 14 px
/// patches): the grid is the whole patches, the pixels past them unseen, as transformers'
/// stride-p convolution has it (`scripts/fixtures/gen_siglip_uneven_grid_fixture.py`: the
/// `siglip-tiny` weights at 70 px in 16 px patches).
#[test]
fn siglip_at_an_image_size_between_whole_patches_matches_transformers() {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture_model("siglip-tiny")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    let config = dir.path().join("config.json");
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    json["vision_config"]["image_size"] = 70.into();
    std::fs::write(&config, json.to_string()).unwrap();
    let model = SiglipEncoder::load(&hub::from_dir(dir.path()).unwrap(), DType::F32, &test_device()).unwrap();
    let r = candle_core::safetensors::load(dir.path().join("uneven-grid.safetensors"), &test_device()).unwrap();
    assert_eq!(r["pixel_values"].dims(), [2, 3, 70, 70]);
    let image = model.model().image_features(&r["pixel_values"]).unwrap();
    let d = max_abs_diff(&image, &r["pooler_output"]);
    assert!(d <= TOLERANCE, "siglip image features at 70 px differ by {d}");
}

#[test]
fn blip_itc_matches_transformers() {
    let model = BlipItc::load(&files("blip-tiny"), DType::F32, &test_device()).unwrap();
    let r = reference("blip-tiny");
    let rows: Vec<Vec<u32>> = id_rows(&r);
    let ours: Vec<Vec<u32>> = r.texts.iter().map(|t| model.tokenizer().encode(t).unwrap()).collect();
    assert_eq!(ours, rows, "BERT ids (the last text is cut to 35)");
    assert_eq!(ours.last().unwrap().len(), 35);
    let cosine = unsqueeze_scores(&model, &r.tensors["pixel_values"], &r.texts);
    let d = max_abs_diff(&cosine, &r.tensors["itc_cosine"]);
    assert!(d <= TOLERANCE, "blip itc cosines differ by {d}");
}

#[test]
fn blip_itm_matches_transformers_for_every_pair() {
    let model = BlipItm::load(&files("blip-tiny"), DType::F32, &test_device()).unwrap();
    let r = reference("blip-tiny");
    let states = model.encode_images(&r.tensors["pixel_values"]).unwrap();
    let (n_images, n_texts) = (states.dim(0).unwrap(), r.texts.len());
    // Every (image, text) pair in one padded batch, as the runner sends them.
    let pair_images: Vec<u32> = (0..n_images).flat_map(|i| std::iter::repeat_n(i as u32, n_texts)).collect();
    let pair_texts: Vec<&str> = (0..n_images).flat_map(|_| r.texts.iter().map(String::as_str)).collect();
    let index = Tensor::new(pair_images, &test_device()).unwrap();
    let pair_states = states.index_select(&index, 0).unwrap();
    // The stored score is the match logit l1 − l0; its sigmoid is transformers' softmax(l)[1].
    let logits = model.score_pairs(&pair_states, &pair_texts).unwrap().reshape((n_images, n_texts)).unwrap();
    let probabilities = candle_nn::ops::sigmoid(&logits).unwrap();
    let d = max_abs_diff(&probabilities, &r.tensors["itm_probability"]);
    assert!(d <= TOLERANCE, "blip itm probabilities differ by {d}");
    assert_eq!(model.score_kind(), ScoreKind::Logit);
    assert!(model.shortlister().is_some());
}

/// Retrieval re-ranking as BLIP's own evaluation does it, against the same computation in
/// `transformers` (`scripts/fixtures/gen_blip_rerank_fixture.py`): the shortlist of the top k by ITC
/// cosine, each scored by the ITM head's class-1 logit plus its cosine, the rest −100; image →
/// text and text → image, k = 2.
#[test]
fn blip_rerank_matches_blips_evaluation() {
    use benchctl_scoring::metrics::retrieval::{rerank_row, shortlist, OUTSIDE_SHORTLIST};
    let model = BlipItm::load(&files("blip-tiny"), DType::F32, &test_device()).unwrap();
    let r = reference("blip-tiny");
    let expected =
        candle_core::safetensors::load(fixture_model("blip-tiny").join("rerank.safetensors"), &test_device()).unwrap();
    let states = model.encode_images(&r.tensors["pixel_values"]).unwrap();
    let (n_images, n_texts) = (states.dim(0).unwrap(), r.texts.len());
    let cosine: Vec<Vec<f32>> = {
        let itc = BlipItc::load(&files("blip-tiny"), DType::F32, &test_device()).unwrap();
        unsqueeze_scores(&itc, &r.tensors["pixel_values"], &r.texts).to_vec2().unwrap()
    };
    // The class-1 logit of every pair, through the re-rank entry point.
    let mut class1 = vec![vec![0f32; n_texts]; n_images];
    for (i, row) in class1.iter_mut().enumerate() {
        let one = states.narrow(0, i, 1).unwrap().repeat((n_texts, 1, 1)).unwrap();
        let texts: Vec<&str> = r.texts.iter().map(String::as_str).collect();
        *row = model.rerank_pairs(&one, &texts).unwrap().to_vec1().unwrap();
    }
    let logits: Vec<Vec<Vec<f32>>> = expected["itm_logits"].to_vec3().unwrap();
    for i in 0..n_images {
        for j in 0..n_texts {
            assert!((class1[i][j] - logits[i][j][1]).abs() <= TOLERANCE, "class-1 logit ({i}, {j})");
        }
    }
    let check = |ours: Vec<f32>, theirs: Vec<f32>, what: String| {
        for (a, b) in ours.iter().zip(&theirs) {
            if *b == OUTSIDE_SHORTLIST {
                assert_eq!(*a, OUTSIDE_SHORTLIST, "{what}: outside the shortlist");
            } else {
                assert!((a - b).abs() <= TOLERANCE, "{what}: {ours:?} vs {theirs:?}");
            }
        }
    };
    let i2t: Vec<Vec<f32>> = expected["rerank_i2t"].to_vec2().unwrap();
    for i in 0..n_images {
        let top = shortlist(&cosine[i], 2);
        let fused: Vec<f32> = top.iter().map(|&j| class1[i][j]).collect();
        check(rerank_row(&cosine[i], &top, &fused), i2t[i].clone(), format!("image {i} → texts"));
    }
    let t2i: Vec<Vec<f32>> = expected["rerank_t2i"].to_vec2().unwrap();
    for j in 0..n_texts {
        let column: Vec<f32> = (0..n_images).map(|i| cosine[i][j]).collect();
        let top = shortlist(&column, 2);
        let fused: Vec<f32> = top.iter().map(|&i| class1[i][j]).collect();
        check(rerank_row(&column, &top, &fused), t2i[j].clone(), format!("text {j} → images"));
    }
}

#[test]
fn zoo_half_precision_drift_is_reported_and_bounded() {
    let cpu = test_device();
    for dtype in [DType::BF16, DType::F16] {
        let r = reference("siglip-tiny");
        let model = SiglipEncoder::load(&files("siglip-tiny"), dtype, &cpu).unwrap();
        let pixels = r.tensors["pixel_values"].to_dtype(dtype).unwrap();
        let texts: Vec<&str> = r.texts.iter().map(String::as_str).collect();
        let images = model.encode_images(&pixels).unwrap().unsqueeze(0).unwrap();
        let texts = model.encode_texts(&texts).unwrap().unsqueeze(0).unwrap();
        let logits = model.logits(&images, &texts).unwrap().squeeze(0).unwrap();
        let d = max_abs_diff(&logits, &r.tensors["logits_per_image"]);
        let (bound, theirs) = drift_bound("siglip-tiny", "logits_per_image", dtype);
        eprintln!("siglip-tiny {dtype:?}: max abs logit drift {d} (transformers' own {theirs})");
        assert!(f64::from(d) < bound, "siglip {dtype:?} drifts by {d}");

        let r = reference("blip-tiny");
        let model = BlipItc::load(&files("blip-tiny"), dtype, &cpu).unwrap();
        let pixels = r.tensors["pixel_values"].to_dtype(dtype).unwrap();
        let d = max_abs_diff(&unsqueeze_scores(&model, &pixels, &r.texts), &r.tensors["itc_cosine"]);
        let (bound, theirs) = drift_bound("blip-tiny", "itc_cosine", dtype);
        eprintln!("blip-tiny itc {dtype:?}: max abs cosine drift {d} (transformers' own {theirs})");
        assert!(f64::from(d) < bound, "blip itc {dtype:?} drifts by {d}");

        // Every image × text pair, as the yardstick was measured.
        let model = BlipItm::load(&files("blip-tiny"), dtype, &cpu).unwrap();
        let mut probabilities = Vec::new();
        for i in 0..pixels.dim(0).unwrap() {
            let states = model.encode_images(&pixels.narrow(0, i, 1).unwrap()).unwrap();
            for text in &r.texts {
                let logit = model.score_pairs(&states, &[text.as_str()]).unwrap();
                probabilities.push(candle_nn::ops::sigmoid(&logit).unwrap().flatten_all().unwrap());
            }
        }
        let p = Tensor::cat(&probabilities, 0).unwrap();
        let d = max_abs_diff(&p, &r.tensors["itm_probability"].flatten_all().unwrap());
        let (bound, theirs) = drift_bound("blip-tiny", "itm_probability", dtype);
        eprintln!("blip-tiny itm {dtype:?}: max abs probability drift {d} (transformers' own {theirs})");
        assert!(f64::from(d) < bound, "blip itm {dtype:?} drifts by {d}");
    }
}

/// A checkpoint shaped as Apple's DFN ones (`scripts/fixtures/gen_dfn_fixture.py`): OpenCLIP
/// naming with QuickGELU and 20-wide heads, its weights only as the PyTorch file
/// `open_clip_pytorch_model.bin`, and `preprocess_cfg.resize_mode = "squash"`. Checked end to
/// end against what open_clip 3.3 makes of the same directory (`local-dir:`): the pixels of
/// its eval transform on odd-sized RGB, RGBA and palette PNGs (within 1e-6), the image
/// features of those pixels, the token ids and the text features (within 1e-4).
#[test]
fn a_dfn_style_checkpoint_with_pytorch_weights_and_squashed_images_matches_open_clip() {
    let fixture = fixture_model("dfn-tiny");
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&fixture).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
    }
    std::fs::copy(fixture_model("tokenizer").join("tokenizer.json"), dir.path().join("tokenizer.json")).unwrap();
    let files = hub::from_dir(dir.path()).unwrap();
    assert!(files.weights.ends_with("open_clip_pytorch_model.bin"), "{}", files.weights.display());
    let model = load_open_clip(&files, DType::F32, &test_device()).unwrap();
    assert_eq!(model.model().config().vision_config.hidden_act, "quick_gelu");
    assert_eq!(model.preprocessor().resize, benchctl_models::preprocess::Resize::Stretch);

    let bytes = std::fs::read(fixture.join("reference.safetensors")).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let meta = meta.metadata().as_ref().unwrap();
    let images: Vec<String> = serde_json::from_str(&meta["images"]).unwrap();
    let texts: Vec<String> = serde_json::from_str(&meta["texts"]).unwrap();
    let r = candle_core::safetensors::load(fixture.join("reference.safetensors"), &test_device()).unwrap();
    assert_eq!(images.len(), 5);
    let prep = model.preprocessor();
    for name in &images {
        let img = benchctl_suites::ImageSource::File(fixture.join(format!("{name}.png"))).load_pil().unwrap();
        let mut ours = vec![0.0; prep.len()];
        prep.apply_pil(&img, &mut ours);
        let reference = r[&format!("pixels/{name}")].flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let worst = ours.iter().zip(&reference).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst <= 1e-6, "{name}: pixels differ from open_clip's squash by {worst}");
        let pixels = Tensor::from_vec(ours, (1, 3, prep.size, prep.size), &test_device()).unwrap();
        let d = max_abs_diff(&model.model().image_features(&pixels).unwrap(), &r[&format!("image_embeds/{name}")]);
        assert!(d <= TOLERANCE, "{name}: image features differ by {d}");
    }

    let padded = id_rows_of(&r["input_ids"]);
    let ours: Vec<Vec<u32>> = texts.iter().map(|t| model.tokenizer().encode(t).unwrap()).collect();
    for ((o, p), text) in ours.iter().zip(&padded).zip(&texts) {
        assert_eq!(&p[..o.len()], o.as_slice(), "{text:?}");
        assert!(p[o.len()..].iter().all(|&id| id == 0), "{text:?}");
    }
    let d = max_abs_diff(&model.model().text_features(&ours).unwrap(), &r["text_embeds"]);
    assert!(d <= TOLERANCE, "text features differ by {d}");
    let scale = r["logit_scale"].to_vec1::<f32>().unwrap()[0];
    assert!((model.model().logit_scale() - scale).abs() <= 1e-4 * scale);
}
