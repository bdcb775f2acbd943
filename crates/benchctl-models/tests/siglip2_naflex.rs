//! SigLIP 2 NaFlex against `transformers` 5.24 on `siglip2-naflex-tiny`
//! (`scripts/fixtures/gen_siglip2_naflex_fixture.py`): `Siglip2ImageProcessorPil`'s grid
//! sizes and patches for images wider, taller and smaller than the position grid and of every
//! PNG mode, the resized position embeddings, `Siglip2Model`'s image features (one padded,
//! masked batch there; each size alone here), and both caption preparations' features and
//! logits (the processor's attention mask applied for `transformers`'), within 1e-4 in f32.

use benchctl_models::hub;
use benchctl_models::models::siglip::{resized_positions, SiglipText};
use benchctl_models::models::siglip2_naflex;
use benchctl_models::preprocess::{patch_grid_size, Preprocessor, Resize};
use benchctl_models::registry::{self, TextPrep};
use benchctl_models::{DualEncoder, ErrorKind};
use benchctl_testkit::{
    fixture_expected, fixture_model, half_precision_bound, json_id_rows as id_rows, json_numbers, json_strings,
    max_abs_diff, test_device,
};
use candle_core::{DType, Tensor};

const TOLERANCE: f64 = 1e-4;
const FIXTURE: &str = "siglip2-naflex-tiny";

fn image(dir: &std::path::Path, name: &str) -> benchctl_suites::PilImage {
    benchctl_suites::ImageSource::File(dir.join(name)).load_pil().unwrap()
}

/// One image through `p`: its `(1, 3, h, w)` pixels.
fn pixels(p: &Preprocessor, image: &benchctl_suites::PilImage) -> Tensor {
    let (w, h) = image.dimensions();
    let (out_w, out_h) = p.output_size(w as usize, h as usize);
    let mut out = vec![0.0; p.len_for(w as usize, h as usize)];
    p.apply_pil(image, &mut out);
    Tensor::from_vec(out, (1, 3, out_h, out_w), &test_device()).unwrap()
}

/// `(1, 3, h, w)` pixels as `Siglip2ImageProcessor` flattens them: patch by patch, row by row,
/// each patch's pixels row by row with the channels innermost.
fn patches(pixels: &Tensor, patch: usize) -> Vec<f64> {
    let (_, c, h, w) = pixels.dims4().unwrap();
    let flat = pixels
        .reshape((c, h / patch, patch, w / patch, patch))
        .unwrap()
        .permute((1, 3, 2, 4, 0))
        .unwrap()
        .flatten_all()
        .unwrap();
    flat.to_vec1::<f32>().unwrap().into_iter().map(f64::from).collect()
}

fn max_abs(ours: &[f64], theirs: &[f64]) -> f64 {
    assert_eq!(ours.len(), theirs.len());
    ours.iter().zip(theirs).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max)
}

fn encoder(prep: TextPrep, dtype: DType) -> benchctl_models::models::siglip::SiglipEncoder {
    let files = hub::from_dir(&fixture_model(FIXTURE)).unwrap();
    siglip2_naflex::load(&files, prep, None, dtype, &test_device()).unwrap()
}

/// A copy of the fixture to edit, with the path and contents of its `preprocessor_config.json`.
fn fixture_copy() -> (tempfile::TempDir, std::path::PathBuf, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture_model(FIXTURE)).unwrap().flatten() {
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    let path = dir.path().join("preprocessor_config.json");
    let settings = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    (dir, path, settings)
}

#[test]
fn images_become_the_processors_grids_and_patches_in_every_mode() {
    let e = fixture_expected(FIXTURE);
    let dir = fixture_model(FIXTURE);
    let (patch, max_patches) =
        (e["patch_size"].as_u64().unwrap() as usize, e["max_num_patches"].as_u64().unwrap() as usize);
    let model = encoder(TextPrep::Authors, DType::F32);
    let p = model.preprocessor();
    assert_eq!(p.resize, Resize::Patches { patch, max_patches });
    for (name, expected) in json_strings(&e["images"]).iter().zip(e["pixels"].as_array().unwrap()) {
        let img = image(&dir, name);
        let (w, h) = img.dimensions();
        let shape: Vec<usize> = json_numbers(&expected["spatial_shape"]).iter().map(|&x| x as usize).collect();
        let (out_h, out_w) = patch_grid_size(h as usize, w as usize, patch, max_patches);
        assert_eq!([out_h / patch, out_w / patch], shape[..], "{name}: grid of a {w}×{h} image");
        let d = max_abs(&patches(&pixels(p, &img), patch), &json_numbers(&expected["pixel_values"]));
        assert!(d <= 1e-6, "{name}: pixels differ by {d}");
    }
}

#[test]
fn do_convert_rgb_composites_other_modes_over_white() {
    let e = fixture_expected(FIXTURE);
    let (dir, settings_path, mut settings) = fixture_copy();
    settings["do_convert_rgb"] = true.into();
    std::fs::write(&settings_path, settings.to_string()).unwrap();
    let files = hub::from_dir(dir.path()).unwrap();
    let config = siglip2_naflex::Siglip2Config::from_file(&files.config).unwrap();
    let p = siglip2_naflex::preprocessor(&files, &config.vision_config).unwrap();
    let over_white = &e["over_white"];
    let names = json_strings(&over_white["images"]);
    assert!(names.len() >= 5, "every mode but RGB: {names:?}");
    for (name, expected) in names.iter().zip(over_white["pixels"].as_array().unwrap()) {
        let d =
            max_abs(&patches(&pixels(&p, &image(dir.path(), name)), p.size), &json_numbers(&expected["pixel_values"]));
        assert!(d <= 1e-6, "{name}: pixels over white differ by {d}");
    }
}

#[test]
fn position_embeddings_resize_as_transformers_does() {
    let e = fixture_expected(FIXTURE);
    let resize = &e["position_resize"];
    let side = resize["grid"].as_u64().unwrap() as usize;
    let weights =
        candle_core::safetensors::load(fixture_model(FIXTURE).join("model.safetensors"), &test_device()).unwrap();
    let grid = &weights["vision_model.embeddings.position_embedding.weight"];
    let shapes = resize["shapes"].as_array().unwrap();
    assert!(shapes.len() >= 6);
    for (shape, expected) in shapes.iter().zip(resize["resized"].as_array().unwrap()) {
        let [rows, columns] = [0, 1].map(|i| shape[i].as_u64().unwrap() as usize);
        let ours = resized_positions(grid, side, (rows, columns)).unwrap();
        let d = max_abs_diff(&ours, expected);
        assert!(d <= 1e-6, "{rows}×{columns}: resized positions differ by {d}");
    }
    assert!(resized_positions(grid, side, (0, 3)).is_err());
}

#[test]
fn both_preparations_score_as_siglip2_model_does() {
    let e = fixture_expected(FIXTURE);
    let dir = fixture_model(FIXTURE);
    let files = hub::from_dir(&dir).unwrap();
    assert_eq!(registry::architecture_of(&files).unwrap().name(), "siglip2-naflex");
    let texts = json_strings(&e["texts"]);
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    for prep in TextPrep::ALL {
        let model = encoder(prep, DType::F32);
        // Images of different sizes, each encoded alone (as the runner encodes each size).
        let features: Vec<Tensor> = json_strings(&e["images"])
            .iter()
            .map(|name| model.model().image_features(&pixels(model.preprocessor(), &image(&dir, name))).unwrap())
            .collect();
        let features = Tensor::cat(&features, 0).unwrap();
        let d = max_abs_diff(&features, &e["image_embeds"]);
        assert!(d <= TOLERANCE, "{prep:?}: image features differ by {d}");

        let reference = &e[prep.name()];
        let encoded: Vec<(Vec<u32>, Option<Vec<u32>>)> =
            texts.iter().map(|t| model.tokenizer().encode_with_mask(t).unwrap()).collect();
        let (rows, masks): (Vec<_>, Vec<_>) = encoded.into_iter().unzip();
        assert_eq!(rows, id_rows(&reference["input_ids"]));
        let masks: Option<Vec<Vec<u32>>> = masks.into_iter().collect();
        match prep {
            TextPrep::Authors => assert!(masks.is_none(), "big_vision attends to the padding"),
            TextPrep::Transformers => assert_eq!(masks.as_deref(), Some(&id_rows(&reference["attention_mask"])[..])),
        }
        let text = model.model().masked_text_features(&rows, masks.as_deref()).unwrap();
        let d = max_abs_diff(&text, &reference["text_embeds"]);
        assert!(d <= TOLERANCE, "{prep:?}: text features differ by {d}");

        let images = benchctl_models::models::transformer::l2_normalise(&features).unwrap().unsqueeze(0).unwrap();
        let encoded = model.encode_texts(&texts).unwrap().unsqueeze(0).unwrap();
        let logits = model.logits(&images, &encoded).unwrap().squeeze(0).unwrap();
        let d = max_abs_diff(&logits, &reference["logits_per_image"]);
        eprintln!("{prep:?}: logits within {d}");
        assert!(d <= TOLERANCE, "{prep:?}: logits differ by {d}");
    }
    // The mask matters: without it transformers' features move (measured by the generator).
    assert!(e["transformers"]["mask_moves_text_embeds_by"].as_f64().unwrap() > 10.0 * TOLERANCE);
}

#[test]
fn a_fixed_resolution_siglip2_masks_transformers_padding_too() {
    let model = benchctl_models::models::siglip::SiglipEncoder::load_with(
        &hub::from_dir(&fixture_model("siglip2-tiny")).unwrap(),
        TextPrep::Transformers,
        DType::F32,
        &test_device(),
    )
    .unwrap();
    let (ids, mask) = model.tokenizer().encode_with_mask("a photo of a cat").unwrap();
    let mask = mask.expect("transformers' Gemma tokenizer returns an attention mask");
    assert_eq!(mask.len(), ids.len());
    assert!(mask.contains(&0) && mask.contains(&1), "{mask:?}");
    assert!(matches!(model.tokenizer(), SiglipText::Siglip2(_)));
}

#[test]
fn half_precision_drift_is_reported_and_bounded() {
    let e = fixture_expected(FIXTURE);
    let dir = fixture_model(FIXTURE);
    let texts = json_strings(&e["texts"]);
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    for dtype in [DType::BF16, DType::F16] {
        let (bound, theirs) = half_precision_bound(&e, "transformers_half_precision_drift", dtype);
        let model = encoder(TextPrep::Authors, dtype);
        let images: Vec<Tensor> = json_strings(&e["images"])
            .iter()
            .map(|name| {
                model.encode_images(&pixels(model.preprocessor(), &image(&dir, name)).to_dtype(dtype).unwrap()).unwrap()
            })
            .collect();
        let images = Tensor::cat(&images, 0).unwrap().unsqueeze(0).unwrap();
        let encoded = model.encode_texts(&texts).unwrap().unsqueeze(0).unwrap();
        let logits = model.logits(&images, &encoded).unwrap().squeeze(0).unwrap();
        let d = max_abs_diff(&logits, &e["authors"]["logits_per_image"]);
        eprintln!("siglip2-naflex-tiny {dtype:?}: max abs logit drift {d} (transformers' own {theirs})");
        assert!(d < bound, "{dtype:?} drifts by {d}");
    }
}

#[test]
fn settings_whose_patch_is_not_the_towers_are_refused_naming_the_key() {
    let (dir, settings_path, mut settings) = fixture_copy();
    settings["patch_size"] = 16.into();
    std::fs::write(&settings_path, settings.to_string()).unwrap();
    let files = hub::from_dir(dir.path()).unwrap();
    let err = siglip2_naflex::load(&files, TextPrep::Authors, None, DType::F32, &test_device()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadConfig);
    let message = err.to_string();
    assert!(message.contains("preprocessor_config.json") && message.contains("patch_size"), "{message}");

    settings["patch_size"] = 8.into();
    settings["max_num_patches"] = 0.into();
    std::fs::write(&settings_path, settings.to_string()).unwrap();
    let err = siglip2_naflex::load(&files, TextPrep::Authors, None, DType::F32, &test_device()).unwrap_err();
    assert!(err.to_string().contains("max_num_patches"), "{err}");
}

/// `--max-patches` replaces the checkpoint's `max_num_patches`, as `processor(images,
/// max_num_patches=…)` does: the same grids and features as the checkpoint's settings edited to
/// that budget (whose grids `images_become_the_processors_grids_and_patches_in_every_mode`
/// checks against transformers); other architectures and a budget of 0 are refused by name.
#[test]
fn a_run_budget_replaces_the_checkpoints_max_num_patches() {
    let (dir, settings_path, mut settings) = fixture_copy();
    let budget = 12;
    settings["max_num_patches"] = budget.into();
    std::fs::write(&settings_path, settings.to_string()).unwrap();
    let edited =
        siglip2_naflex::load(&hub::from_dir(dir.path()).unwrap(), TextPrep::Authors, None, DType::F32, &test_device())
            .unwrap();
    let files = hub::from_dir(&fixture_model(FIXTURE)).unwrap();
    let flagged = siglip2_naflex::load(&files, TextPrep::Authors, Some(budget), DType::F32, &test_device()).unwrap();
    let default = encoder(TextPrep::Authors, DType::F32);
    assert_eq!(flagged.preprocessor(), edited.preprocessor());
    assert_ne!(flagged.preprocessor(), default.preprocessor());
    let image = image(&fixture_model(FIXTURE), "wide.png");
    let features = |model: &benchctl_models::models::siglip::SiglipEncoder| {
        model
            .encode_images(&pixels(model.preprocessor(), &image))
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    };
    assert_eq!(features(&flagged), features(&edited));
    assert_ne!(features(&flagged).len(), 0);

    let naflex = benchctl_models::models::siglip2_naflex::ARCHITECTURE;
    assert_eq!(naflex.choose_max_patches(Some(budget)).unwrap(), Some(budget));
    assert!(naflex.choose_max_patches(Some(0)).unwrap_err().to_string().contains("at least 1"));
    let clip = benchctl_models::models::clip::ARCHITECTURE.choose_max_patches(Some(budget)).unwrap_err().to_string();
    assert!(clip.contains("--max-patches 12") && clip.contains("clip"), "{clip}");
}
