//! CLIP-FlanT5 against t2v_metrics' own CLIP-T5 scorer (its v3.0 release, run unchanged under
//! transformers 4.46 by `scripts/fixtures/gen_clip_flant5_fixture.py`): SentencePiece ids, the
//! padded and processed pixels, the prompt with its image placeholder, and the probability of
//! "Yes" in f32 and bf16.

use benchctl_models::hub;
use benchctl_models::models::clip_t5::ClipT5Vqa;
use benchctl_models::{FusionEncoder, ScoreKind};
use benchctl_testkit::{fixture_expected, fixture_model, json_numbers, test_device};
use candle_core::{DType, Tensor};

const FIXTURE: &str = "clip-flant5-tiny";

/// Whether JPEGs decode as Pillow decodes them (the `libjpeg-turbo` build); the default
/// zune-jpeg build's pixels differ by at most one level on a CMYK file (docs/models.md,
/// "Decoding"), a mean of at most 0.25 levels.
const JPEG_EXACT: bool = matches!(benchctl_suites::image::JPEG_DECODER.as_bytes(), b"libjpeg-turbo");
/// One 8-bit level in CLIP's normalised units, at its smallest standard deviation (0.2613).
const ONE_LEVEL: f64 = 1.0 / 255.0 / 0.261_302_6;
/// How far a JPEG's log P("Yes") may be from t2v_metrics' in the zune-jpeg build: one level on a
/// few pixels moved the tiny model's by 2.0e-3 (the runner's `vqa-modes` bound, 5e-3, as there).
const JPEG_LOG_P_BOUND: f64 = 5e-3;

fn is_jpeg(image: &serde_json::Value) -> bool {
    image["file"].as_str().unwrap().ends_with(".jpg")
}

fn model(dtype: DType) -> ClipT5Vqa {
    ClipT5Vqa::load(&hub::from_dir(&fixture_model(FIXTURE)).unwrap(), dtype, &test_device()).unwrap()
}

/// Every image of the fixture as the runner prepares it: opened by its PIL mode, then the
/// model's preprocessing.
fn pixels(model: &ClipT5Vqa, expected: &serde_json::Value) -> Tensor {
    let p = model.preprocessor();
    let mut all = Vec::new();
    for image in expected["images"].as_array().unwrap() {
        let path = fixture_model(FIXTURE).join("images").join(image["file"].as_str().unwrap());
        let pil = benchctl_suites::ImageSource::File(path).load_pil().unwrap();
        let mut out = vec![0.0; p.len()];
        p.apply_pil(&pil, &mut out);
        all.extend(out);
    }
    let n = expected["images"].as_array().unwrap().len();
    Tensor::from_vec(all, (n, 3, p.size, p.size), &test_device()).unwrap()
}

#[test]
fn texts_tokenise_as_sentencepiece_does() {
    let expected = fixture_expected(FIXTURE);
    let tokenizer = tokenizers::Tokenizer::from_file(fixture_model(FIXTURE).join("tokenizer.json")).unwrap();
    for case in expected["tokens"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let theirs: Vec<u32> = json_numbers(&case["ids"]).iter().map(|&id| id as u32).collect();
        assert_eq!(tokenizer.encode(text, true).unwrap().get_ids(), theirs, "{text:?}");
    }
}

#[test]
fn prompts_hold_the_image_placeholder_where_t2v_metrics_puts_it() {
    let (expected, model) = (fixture_expected(FIXTURE), model(DType::F32));
    let captions = expected["captions"].as_array().unwrap();
    for pair in expected["pairs"].as_array().unwrap() {
        let caption = captions[pair["caption"].as_u64().unwrap() as usize].as_str().unwrap();
        let ids: Vec<i64> = json_numbers(&pair["input_ids"]).iter().map(|&id| id as i64).collect();
        assert_eq!(model.prompt_ids(caption).unwrap(), ids, "{caption:?}");
        let labels: Vec<u32> = json_numbers(&pair["labels"]).iter().map(|&id| id as u32).collect();
        assert_eq!(model.caption_ids(caption).unwrap().1, labels);
    }
}

#[test]
fn images_are_padded_to_a_square_then_processed_as_clips_processor_does() {
    let (expected, model) = (fixture_expected(FIXTURE), model(DType::F32));
    let pixels = pixels(&model, &expected);
    for (i, image) in expected["images"].as_array().unwrap().iter().enumerate() {
        let ours = pixels.get(i).unwrap();
        let first_row = ours.narrow(1, 0, 1).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let theirs = json_numbers(&image["pixel_values_first_row"]);
        let worst = first_row.iter().zip(&theirs).map(|(a, b)| (f64::from(*a) - b).abs()).fold(0.0, f64::max);
        let (row_bound, sum_bound) = if is_jpeg(image) && !JPEG_EXACT {
            (ONE_LEVEL + 1e-6, 0.25 * ONE_LEVEL * ours.elem_count() as f64)
        } else {
            (1e-6, 1e-3)
        };
        assert!(first_row.len() == theirs.len() && worst < row_bound, "{}: first row off by {worst}", image["file"]);
        let sum = ours.to_dtype(DType::F64).unwrap().sum_all().unwrap().to_scalar::<f64>().unwrap();
        let theirs_sum = image["pixel_values_sum"].as_f64().unwrap();
        let (file, mode) = (&image["file"], &image["mode"]);
        assert!((sum - theirs_sum).abs() < sum_bound, "{file} ({mode}): sum {sum} vs {theirs_sum}");
    }
}

/// The largest difference between benchctl's log P(Yes) and t2v_metrics' (its f32 scores), over
/// the pairs of PNG images and over those of JPEG images.
fn worst_log_p(dtype: DType, key: &str) -> (f64, f64) {
    let (expected, model) = (fixture_expected(FIXTURE), model(dtype));
    assert_eq!(model.score_kind(), ScoreKind::LogProbability);
    let states = model.encode_images(&pixels(&model, &expected)).unwrap();
    let captions: Vec<&str> = expected["captions"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    let pairs = expected["pairs"].as_array().unwrap();
    let rows: Vec<u32> = pairs.iter().map(|p| p["image"].as_u64().unwrap() as u32).collect();
    let texts: Vec<&str> = pairs.iter().map(|p| captions[p["caption"].as_u64().unwrap() as usize]).collect();
    let rows = Tensor::new(rows, &test_device()).unwrap();
    let ours = model.score_pairs(&states.index_select(&rows, 0).unwrap(), &texts).unwrap().to_vec1::<f32>().unwrap();
    let images = expected["images"].as_array().unwrap();
    let (mut png, mut jpeg) = (0.0f64, 0.0f64);
    for (pair, got) in pairs.iter().zip(ours) {
        let d = (f64::from(got) - pair[key].as_f64().unwrap().ln()).abs();
        let worst = if is_jpeg(&images[pair["image"].as_u64().unwrap() as usize]) { &mut jpeg } else { &mut png };
        *worst = worst.max(d);
    }
    eprintln!("{dtype:?}: log P(Yes) at most {png:.2e} (PNG), {jpeg:.2e} (JPEG) from t2v_metrics'");
    (png, jpeg)
}

#[test]
fn log_p_yes_matches_t2v_metrics() {
    let (worst, jpeg) = worst_log_p(DType::F32, "t2v_metrics_p");
    assert!(worst <= 1e-4, "log P(Yes) differs from t2v_metrics' by {worst}");
    let jpeg_bound = if JPEG_EXACT { 1e-4 } else { JPEG_LOG_P_BOUND };
    assert!(jpeg <= jpeg_bound, "a JPEG's log P(Yes) differs from t2v_metrics' by {jpeg}");
    // The recorded per-token log-probabilities average to t2v_metrics' exp(−cross-entropy).
    for pair in fixture_expected(FIXTURE)["pairs"].as_array().unwrap() {
        let tokens = json_numbers(&pair["answer_log_ps"]);
        let mean = tokens.iter().sum::<f64>() / tokens.len() as f64;
        assert!((mean - pair["t2v_metrics_p"].as_f64().unwrap().ln()).abs() < 1e-5);
    }
}

#[test]
fn half_precision_drift_is_bounded() {
    for dtype in [DType::BF16, DType::F16] {
        let (png, jpeg) = worst_log_p(dtype, "t2v_metrics_p");
        let worst = png.max(jpeg);
        assert!(worst <= 0.1, "{dtype:?}: log P(Yes) drifts {worst} from t2v_metrics' f32");
    }
    // t2v_metrics' own bf16 run drifts as far from its f32 one.
    let expected = fixture_expected(FIXTURE);
    let theirs =
        expected["pairs"].as_array().unwrap().iter().map(|p| {
            (p["t2v_metrics_p_bf16"].as_f64().unwrap().ln() - p["t2v_metrics_p"].as_f64().unwrap().ln()).abs()
        });
    assert!(theirs.fold(0.0, f64::max) <= 0.1);
}

#[test]
fn a_checkpoint_without_its_tower_reads_it_from_mm_vision_tower_or_names_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = fixture_model(FIXTURE);
    for entry in std::fs::read_dir(&fixture).unwrap().flatten().filter(|e| e.path().is_file()) {
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    // The text stack alone, as a checkpoint saved without LLaVA's tower would be.
    let mut weights = std::collections::HashMap::new();
    for shard in std::fs::read_dir(&fixture).unwrap().flatten().map(|e| e.path()) {
        if shard.extension().is_some_and(|e| e == "bin") {
            std::fs::remove_file(dir.path().join(shard.file_name().unwrap())).unwrap();
            let tensors = candle_core::pickle::read_all(&shard).unwrap();
            weights.extend(tensors.into_iter().filter(|(name, _)| !name.starts_with("vision_tower.")));
        }
    }
    candle_core::safetensors::save(&weights, dir.path().join("model.safetensors")).unwrap();
    std::fs::remove_file(dir.path().join("pytorch_model.bin.index.json")).unwrap();
    let load = || ClipT5Vqa::load(&hub::from_dir(dir.path()).unwrap(), DType::F32, &test_device());
    // `mm_vision_tower` naming neither a directory beside the config nor a known hub tower.
    let error = load().err().unwrap().to_string();
    assert!(
        error.contains("`mm_vision_tower` \"vision_tower\"") && error.contains("clip-vit-large-patch14-336"),
        "{error}"
    );
    // The tower's directory without its weights: nothing to read the tower from.
    std::fs::create_dir(dir.path().join("vision_tower")).unwrap();
    for entry in std::fs::read_dir(fixture.join("vision_tower")).unwrap().flatten() {
        if entry.file_name() != "model.safetensors" {
            std::fs::copy(entry.path(), dir.path().join("vision_tower").join(entry.file_name())).unwrap();
        }
    }
    let error = load().err().unwrap().to_string();
    assert!(error.contains("holds no vision tower") && error.contains("model.safetensors"), "{error}");
    // With them, as t2v_metrics builds the tower (from `mm_vision_tower`, before loading the
    // checkpoint): the same scores as the checkpoint that holds the tower.
    let tower = "vision_tower/model.safetensors";
    std::fs::copy(fixture.join(tower), dir.path().join(tower)).unwrap();
    let (apart, whole) = (load().unwrap(), model(DType::F32));
    let expected = fixture_expected(FIXTURE);
    let scores = |m: &ClipT5Vqa| {
        let states = m.encode_images(&pixels(m, &expected)).unwrap();
        m.score_pairs(&states.narrow(0, 0, 1).unwrap(), &["a cat on a mat"]).unwrap().to_vec1::<f32>().unwrap()
    };
    assert_eq!(scores(&apart), scores(&whole));
}

/// Whether a checkpoint holds the tower is read from its index or its file's header alone:
/// PyTorch shards, their index and a safetensors file.
#[test]
fn tensors_are_found_in_an_index_a_pytorch_file_and_a_safetensors_header() {
    let fixture = fixture_model(FIXTURE);
    let probe = "vision_tower.vision_tower.vision_model.embeddings.class_embedding";
    let index = fixture.join("pytorch_model.bin.index.json");
    assert!(hub::weights_hold(&index, probe).unwrap());
    assert!(!hub::weights_hold(&index, "vision_tower.missing").unwrap());
    let map: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&index).unwrap()).unwrap();
    let shard = fixture.join(map["weight_map"][probe].as_str().unwrap());
    assert!(hub::weights_hold(&shard, probe).unwrap());
    assert!(!hub::weights_hold(&shard, "shared.weight.missing").unwrap());
    let tower = fixture.join("vision_tower/model.safetensors");
    assert!(hub::weights_hold(&tower, "vision_model.embeddings.class_embedding").unwrap());
    assert!(!hub::weights_hold(&tower, probe).unwrap());
    assert!(hub::weights_hold(&fixture.join("config.json"), probe).is_err());
}

/// A caption holding `<image>` is refused naming it: t2v_metrics' `t5_tokenizer_image_token`
/// splits the whole prompt at every `<image>`, so it would put a second image's placeholder in
/// the caption. Angle brackets and the word alone are text.
#[test]
fn a_caption_holding_the_image_marker_is_refused() {
    let model = model(DType::F32);
    let error = model.caption_ids("a cat <image> on a mat").expect_err("the marker");
    assert_eq!(error.kind(), benchctl_models::ErrorKind::UnusableInput);
    let message = error.to_string();
    assert!(message.contains("\"a cat <image> on a mat\"") && message.contains("`<image>`"), "{message}");
    for caption in ["an <img> tag", "an image of a cat", "<images>", "< image >"] {
        assert!(model.caption_ids(caption).is_ok(), "{caption:?}");
    }
}

/// The replies fixture (`scripts/fixtures/gen_clip_flant5_replies_fixture.py`).
fn replies_fixture() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture_model(FIXTURE).join("replies.json")).unwrap()).unwrap()
}

/// The model of `dir` loaded to generate replies.
fn generating(dir: &std::path::Path) -> benchctl_models::Result<Box<dyn FusionEncoder>> {
    use benchctl_models::architecture::{LoadChoice, ScoreHead};
    use benchctl_models::vqascore::AnswerRule;
    let choice = LoadChoice { answer_rule: AnswerRule::Generate, ..LoadChoice::head(ScoreHead::Vqa) };
    let files = hub::from_dir(dir)?;
    match benchctl_models::models::clip_t5::ARCHITECTURE.load(choice, &files, DType::F32, &test_device())? {
        benchctl_models::Model::Fusion(generating) => Ok(generating),
        _ => panic!("a fusion model"),
    }
}

/// How close to a tie between a step's two best tokens a reply of the fixture may pass and still
/// be compared: f32 sums in another order (another CPU tier) could flip a nearer one.
const NEAR_TIE: f64 = 1e-3;

/// The fixture's pairs (those of the JPEG only where it decodes as Pillow's, none that passes
/// within [`NEAR_TIE`] of a tie), each as the image state row and the text that asks it, with
/// its option "Yes" (the separator: what a suite's questions with answer options hold).
fn reply_pairs(
    generating: &dyn FusionEncoder,
    replies: &serde_json::Value,
) -> (Vec<serde_json::Value>, Tensor, Vec<String>) {
    let expected = fixture_expected(FIXTURE);
    let states = generating.encode_images(&pixels(&model(DType::F32), &expected)).unwrap();
    let files: Vec<&str> = expected["images"].as_array().unwrap().iter().map(|i| i["file"].as_str().unwrap()).collect();
    let questions: Vec<&str> = replies["questions"].as_array().unwrap().iter().map(|q| q.as_str().unwrap()).collect();
    let pairs: Vec<serde_json::Value> = (replies["pairs"].as_array().unwrap().iter())
        .filter(|p| JPEG_EXACT || !p["image"].as_str().unwrap().ends_with(".jpg"))
        .filter(|p| p["smallest_gap"].as_f64().unwrap() >= NEAR_TIE)
        .cloned()
        .collect();
    let rows: Vec<u32> =
        pairs.iter().map(|p| files.iter().position(|&f| f == p["image"].as_str().unwrap()).unwrap() as u32).collect();
    let texts = pairs
        .iter()
        .map(|p| format!("{}{}Yes", questions[p["question"].as_u64().unwrap() as usize], '\u{1f}'))
        .collect();
    let batch = states.index_select(&Tensor::new(rows.as_slice(), &test_device()).unwrap(), 0).unwrap();
    (pairs, batch, texts)
}

/// `--answer-rule generate`: each reply equals transformers' T5 `generate` on t2v_metrics' own
/// spliced prompt embeddings, as `CLIPT5Model.generate` means it (greedy, `max_length` 20,
/// decoded without special tokens and stripped: `scripts/fixtures/gen_clip_flant5_replies_fixture.py`),
/// whatever batch asks it (seven prompts, stress texts and an empty one among them); and the
/// option's score is read from the reply.
#[test]
fn replies_are_generated_as_t2v_metrics_means_them() {
    let replies = replies_fixture();
    let generating = generating(&fixture_model(FIXTURE)).unwrap();
    let (pairs, batch, texts) = reply_pairs(generating.as_ref(), &replies);
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let (scores, generated) = generating.score_pairs_with_replies(&batch, &texts).unwrap();
    let generated = generated.expect("replies");
    assert!(pairs.len() >= 37, "{} pairs", pairs.len());
    assert!(pairs.iter().any(|p| !p["reply"].as_str().unwrap().contains("Yes")), "some replies do not give it");
    for ((pair, reply), score) in pairs.iter().zip(&generated).zip(scores.to_vec1::<f32>().unwrap()) {
        assert_eq!(reply, pair["reply"].as_str().unwrap(), "{} question {}", pair["image"], pair["question"]);
        // The option "Yes" scores as its reply reads (NaturalBench's rule, the default).
        let reading = benchctl_models::vqascore::reply::ReplyReading::FirstFound;
        let gives = benchctl_models::vqascore::reply::names(reading, reply, "Yes");
        assert_eq!(score, if gives { 0.0 } else { -1000.0 }, "{reply:?}");
    }
    // One at a time, on a model that has generated nothing yet: the same replies.
    let alone = self::generating(&fixture_model(FIXTURE)).unwrap();
    for (i, pair) in pairs.iter().enumerate().take(4) {
        let one = batch.narrow(0, i, 1).unwrap();
        let (_, reply) = alone.score_pairs_with_replies(&one, &texts[i..=i]).unwrap();
        assert_eq!(reply.unwrap()[0], pair["reply"].as_str().unwrap());
    }
}

/// The fixture's model directory with `changes` made to its JSON settings files (`(file, key,
/// value)`), the other files linked.
fn fixture_with(changes: &[(&str, &str, serde_json::Value)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture_model(FIXTURE)).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        let changed: Vec<_> = changes.iter().filter(|(file, _, _)| *file == name).collect();
        if changed.is_empty() {
            std::os::unix::fs::symlink(entry.path(), dir.path().join(&name)).unwrap();
            continue;
        }
        let mut json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(entry.path()).unwrap()).unwrap();
        for (_, key, value) in changed {
            json[*key] = value.clone();
        }
        std::fs::write(dir.path().join(&name), json.to_string()).unwrap();
    }
    dir
}

/// A generation config's `max_new_tokens` bounds a reply whatever its `max_length` (transformers'
/// `generate` with `max_new_tokens` 4 set in the fixture's config), and a tokenizer config's
/// `clean_up_tokenization_spaces` is read: a value that is not a flag is refused, naming it.
#[test]
fn replies_follow_the_generation_configs_max_new_tokens_and_the_tokenizers_clean_up() {
    let replies = replies_fixture();
    let short = replies["short_max_new_tokens"].clone();
    let dir = fixture_with(&[
        ("generation_config.json", "max_new_tokens", short),
        ("generation_config.json", "max_length", 20.into()),
    ]);
    let generating = generating(dir.path()).unwrap();
    let (pairs, batch, texts) = reply_pairs(generating.as_ref(), &replies);
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let (_, generated) = generating.score_pairs_with_replies(&batch, &texts).unwrap();
    let mut shorter = 0;
    for (pair, reply) in pairs.iter().zip(generated.unwrap()) {
        assert_eq!(reply, pair["short"].as_str().unwrap(), "{} question {}", pair["image"], pair["question"]);
        shorter += usize::from(reply.len() < pair["reply"].as_str().unwrap().len());
    }
    assert!(shorter > pairs.len() / 2, "most replies are cut: {shorter} of {}", pairs.len());

    let on = fixture_with(&[("tokenizer_config.json", "clean_up_tokenization_spaces", true.into())]);
    let files = hub::from_dir(on.path()).unwrap();
    let settings = benchctl_models::vqascore::generate::GenerationSettings::of(&files).unwrap();
    assert!(settings.decoding.clean_up_spaces);
    let wrong = fixture_with(&[("tokenizer_config.json", "clean_up_tokenization_spaces", "yes".into())]);
    let Err(error) = self::generating(wrong.path()) else { panic!("a clean-up setting of \"yes\" is refused") };
    let message = error.to_string();
    assert!(message.contains("clean_up_tokenization_spaces") && message.contains("tokenizer_config.json"), "{message}");
}

/// A reply's ids decode as t2v_metrics' tokenizer decodes them (transformers' slow
/// `T5Tokenizer`, `skip_special_tokens=True`, stripped), with `clean_up_tokenization_spaces` off
/// (the fixture's, transformers' default) and on: ids that hold every pattern the clean-up
/// rewrites, special tokens among them.
#[test]
fn replies_decode_as_transformers_with_the_clean_up_off_and_on() {
    use benchctl_models::vqascore::generate::ReplyDecoding;
    let replies = replies_fixture();
    let tokenizer = tokenizers::Tokenizer::from_file(fixture_model(FIXTURE).join("tokenizer.json")).unwrap();
    let read = ReplyDecoding::of(&hub::from_dir(&fixture_model(FIXTURE)).unwrap()).unwrap();
    assert!(!read.clean_up_spaces, "the fixture's tokenizer config sets it false");
    let on = ReplyDecoding { clean_up_spaces: true, ..read.clone() };
    for check in replies["decode_checks"].as_array().unwrap() {
        let ids: Vec<u32> = json_numbers(&check["ids"]).iter().map(|&id| id as u32).collect();
        let plain = read.decode(&tokenizer, &ids).unwrap();
        assert_eq!(plain.trim(), check["plain"].as_str().unwrap(), "{ids:?}");
        assert_eq!(on.decode(&tokenizer, &ids).unwrap().trim(), check["cleaned"].as_str().unwrap(), "{ids:?}");
    }
}
