//! Replies generated here (`--answer-rule generate`) against `transformers`' `generate` run as
//! NaturalBench's official example runs it (`scripts/fixtures/gen_generate_fixture.py`): the tiny
//! Qwen2.5-VL `qwen25vl-chat-tiny`, whose `generation_config.json` is Qwen2.5-VL-Instruct's
//! (greedy through `top_k: 1`, a repetition penalty of 1.05, two stop tokens), on images of four
//! sizes and two questions: the same new ids, step for step, the same decoded text; the tiny
//! Gemma 3 and PaliGemma against `generate` with their own settings, the tiny InternVL3 and
//! Qwen3-VL on t2v_metrics' image preparation and prompt; and the checkpoint's
//! generation settings read, or refused, by key.

use benchctl_models::hub::{self, GenerationFile};
use benchctl_models::models::gemma3::Gemma3Vqa;
use benchctl_models::models::internvl::InternVlVqa;
use benchctl_models::models::paligemma::PaliGemmaVqa;
use benchctl_models::models::qwen25vl;
use benchctl_models::models::qwen3vl::Qwen3VlVqa;
use benchctl_models::vqascore::generate::{generate, Generating, GenerationSettings};
use benchctl_models::vqascore::local::LocalVqa;
use benchctl_models::vqascore::reply::ReplyReading;
use benchctl_models::{ErrorKind, FusionEncoder};
use benchctl_testkit::{fixture_model, test_device};
use candle_core::{DType, Tensor};

const FIXTURE: &str = "qwen25vl-chat-tiny";

fn generated() -> serde_json::Value {
    let text = std::fs::read_to_string(fixture_model(FIXTURE).join("generated.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn model() -> Qwen3VlVqa {
    qwen25vl::load(&hub::from_dir(&fixture_model(FIXTURE)).unwrap(), DType::F32, &test_device()).unwrap()
}

/// An image of `qwen25vl-tiny` as the runner prepares it for a Qwen-VL model: at its own size.
fn pixels(model: &dyn FusionEncoder, file: &str) -> Tensor {
    let image = image::open(fixture_model("qwen25vl-tiny").join("images").join(file)).unwrap().to_rgb8();
    let p = model.preprocessor();
    let (w, h) = p.output_size(image.width() as usize, image.height() as usize);
    Tensor::from_vec(p.apply(&image), (1, 3, h, w), &test_device()).unwrap()
}

/// A text asking `prompt` with `option`, as a suite with answer options writes it.
fn asked(prompt: &str, option: &str) -> String {
    benchctl_scoring::metrics::answers::asked(prompt, option)
}

#[test]
fn replies_are_transformers_generate_token_for_token() {
    let files = hub::from_dir(&fixture_model(FIXTURE)).unwrap();
    let settings = GenerationSettings::of(&files).unwrap();
    assert_eq!((settings.stop.as_slice(), settings.repetition_penalty), (&[2, 0][..], 1.05));
    let model = model();
    let before = model.ids_before_caption(1).unwrap();
    let expected = generated();
    let samples = expected["on_images"].as_array().unwrap();
    let lengths: Vec<usize> = samples.iter().map(|s| s["reply_ids"].as_array().unwrap().len()).collect();
    assert!(
        lengths.contains(&1) && lengths.iter().any(|&n| n > 20),
        "replies that stop at once and long ones: {lengths:?}"
    );
    for sample in samples {
        let image = sample["image"].as_str().unwrap();
        let state = FusionEncoder::encode_images(&model, &pixels(&model, image)).unwrap();
        let prompt = model.caption_ids(&asked(sample["prompt"].as_str().unwrap(), "Yes")).unwrap().0;
        let ours = generate(&model, &state, &[prompt], &before, &settings).unwrap().remove(0);
        let theirs: Vec<u32> =
            sample["reply_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        assert_eq!(ours, theirs, "{image}: the reply's ids");
    }
}

#[test]
fn options_of_one_question_read_one_reply_decoded_as_batch_decode_does() {
    let files = hub::from_dir(&fixture_model(FIXTURE)).unwrap();
    let generating = Generating::new(model(), GenerationSettings::of(&files).unwrap(), ReplyReading::FirstFound);
    let expected = generated();
    let samples = expected["on_images"].as_array().unwrap();
    for pair in samples.chunks(2) {
        let image = pair[0]["image"].as_str().unwrap();
        let state = generating.encode_images(&pixels(&generating, image)).unwrap();
        // Both questions, each with both of its options, over one image: two generations.
        let texts: Vec<String> = pair
            .iter()
            .flat_map(|s| ["Yes", "No"].map(|option| asked(s["prompt"].as_str().unwrap(), option)))
            .collect();
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let states = state.index_select(&Tensor::new(vec![0u32; 4], &test_device()).unwrap(), 0).unwrap();
        let replies = generating.replies(&states, &texts).unwrap();
        for (i, sample) in pair.iter().enumerate() {
            let want = sample["reply"].as_str().unwrap();
            assert_eq!((replies[2 * i].as_str(), replies[2 * i + 1].as_str()), (want, want), "{image}");
        }
        // Each option scores 0 where the reply gives it (as NaturalBench's `extract_answer`
        // reads it), else the log of zero; asked again, the reply is the one held.
        let scores = generating.score_pairs(&states, &texts).unwrap().to_vec1::<f32>().unwrap();
        for (i, sample) in pair.iter().enumerate() {
            let reply = sample["reply"].as_str().unwrap();
            for (j, option) in ["Yes", "No"].into_iter().enumerate() {
                let gives = benchctl_models::vqascore::reply::extract_answer(reply, option) == Some(true);
                assert_eq!(scores[2 * i + j] == 0.0, gives, "{image} {reply:?} {option}");
            }
        }
    }
}

/// Gemma 3's and PaliGemma's replies (their shared decoder continued a token at a time,
/// PaliGemma's after a prefix that attends both ways) are `generate`'s with the checkpoints' own
/// settings, 128 tokens each.
#[test]
fn gemma_family_replies_are_transformers_generate_token_for_token() {
    let device = test_device();
    for name in ["gemma3-tiny", "paligemma-tiny"] {
        let files = hub::from_dir(&fixture_model(name)).unwrap();
        let settings = GenerationSettings::of(&files).unwrap();
        let model: ReplyOf = match name {
            "gemma3-tiny" => {
                let model = Gemma3Vqa::load(&files, DType::F32, &device).unwrap();
                Box::new(move |image, prompt| reply_of(&model, image, prompt, &settings))
            }
            _ => {
                let model = PaliGemmaVqa::load(&files, DType::F32, &device).unwrap();
                Box::new(move |image, prompt| reply_of(&model, image, prompt, &settings))
            }
        };
        let text = std::fs::read_to_string(fixture_model(name).join("replies.json")).unwrap();
        let expected: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
        for sample in &expected {
            let (image, prompt) = (sample["image"].as_str().unwrap(), sample["prompt"].as_str().unwrap());
            let theirs: Vec<u32> =
                sample["reply_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
            assert_eq!(model(image, prompt), theirs, "{name} {image} {prompt:?}");
        }
    }
}

/// InternVL3's and Qwen3-VL's replies (the Qwen decoder's code continued a token at a time;
/// InternVL's prompt holds 256 context tokens a tile, Qwen3-VL's rotary sections interleave and
/// its image state carries DeepStack's features) are `generate`'s on t2v_metrics' own image
/// preparation and prompt, 128 tokens each.
#[test]
fn internvl_and_qwen3vl_replies_are_transformers_generate_token_for_token() {
    for fixture in ["internvl-tiny", "qwen3vl-tiny"] {
        let files = hub::from_dir(&fixture_model(fixture)).unwrap();
        let settings = GenerationSettings::of(&files).unwrap();
        let reply: ReplyOf = match fixture {
            "internvl-tiny" => {
                let model = InternVlVqa::load(&files, DType::F32, &test_device()).unwrap();
                Box::new(move |image, prompt| reply_at_own_size(&model, fixture, image, prompt, &settings))
            }
            _ => {
                let model = Qwen3VlVqa::load(&files, DType::F32, &test_device()).unwrap();
                Box::new(move |image, prompt| reply_at_own_size(&model, fixture, image, prompt, &settings))
            }
        };
        let text = std::fs::read_to_string(fixture_model(fixture).join("replies.json")).unwrap();
        let expected: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
        assert!(expected.len() >= 3);
        for sample in &expected {
            let (image, prompt) = (sample["image"].as_str().unwrap(), sample["prompt"].as_str().unwrap());
            let theirs: Vec<u32> =
                sample["reply_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
            assert_eq!(reply(image, prompt), theirs, "{fixture} {image} {prompt:?}");
        }
    }
}

/// The reply of a family whose images keep about their own size to `prompt` about `image` of
/// `fixture`'s images, read as the runner reads it (`load_pil`, the family's preparation).
fn reply_at_own_size<M: LocalVqa + FusionEncoder>(
    model: &M,
    fixture: &str,
    image: &str,
    prompt: &str,
    settings: &GenerationSettings,
) -> Vec<u32> {
    let path = fixture_model(fixture).join("images").join(image);
    let picture = benchctl_suites::ImageSource::File(path).load_pil().unwrap();
    let p = FusionEncoder::preprocessor(model);
    let (w, h) = picture.dimensions();
    let (out_w, out_h) = p.output_size(w as usize, h as usize);
    let mut pixels = vec![0.0; p.len_for(w as usize, h as usize)];
    p.apply_pil(&picture, &mut pixels);
    let pixels = Tensor::from_vec(pixels, (1, 3, out_h, out_w), &test_device()).unwrap();
    let state = FusionEncoder::encode_images(model, &pixels).unwrap();
    let ids = model.caption_ids(&asked(prompt, "Yes")).unwrap().0;
    let before = model.ids_before_caption(1).unwrap();
    generate(model, &state, &[ids], &before, settings).unwrap().remove(0)
}

/// A loaded model's reply to (image, prompt).
type ReplyOf = Box<dyn Fn(&str, &str) -> Vec<u32>>;

/// The reply of a fixed-size family to `prompt` about the repository's `image`.
fn reply_of<M: LocalVqa + FusionEncoder>(
    model: &M,
    image: &str,
    prompt: &str,
    settings: &GenerationSettings,
) -> Vec<u32> {
    let picture = image::open(benchctl_testkit::workspace_root().join(image)).unwrap().to_rgb8();
    let p = FusionEncoder::preprocessor(model);
    let pixels = Tensor::from_vec(p.apply(&picture), (1, 3, p.size, p.size), &test_device()).unwrap();
    let state = FusionEncoder::encode_images(model, &pixels).unwrap();
    let ids = model.caption_ids(&asked(prompt, "Yes")).unwrap().0;
    let before = model.ids_before_caption(1).unwrap();
    generate(model, &state, &[ids], &before, settings).unwrap().remove(0)
}

/// A copy of the fixture with its `generation_config.json` edited by `edit` (or removed).
fn with_generation_config(edit: impl Fn(&mut serde_json::Value) -> bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture_model(FIXTURE)).unwrap().flatten().filter(|e| e.path().is_file()) {
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    let path = dir.path().join("generation_config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    if edit(&mut config) {
        std::fs::write(&path, config.to_string()).unwrap();
    } else {
        std::fs::remove_file(&path).unwrap();
    }
    dir
}

#[test]
fn generation_settings_are_read_as_transformers_reads_them_or_refused_by_key() {
    // Without the file, transformers takes the stop token from config.json's text settings.
    let absent = with_generation_config(|_| false);
    let files = hub::from_dir(absent.path()).unwrap();
    assert_eq!(files.generation, GenerationFile::Absent);
    let settings = GenerationSettings::of(&files).unwrap();
    assert_eq!((settings.stop, settings.repetition_penalty), (vec![151645], 1.0));
    // One stop token as a number, no penalty.
    let one = with_generation_config(|c| {
        c["eos_token_id"] = 2.into();
        c.as_object_mut().unwrap().remove("repetition_penalty");
        true
    });
    let settings = GenerationSettings::of(&hub::from_dir(one.path()).unwrap()).unwrap();
    assert_eq!((settings.stop, settings.repetition_penalty), (vec![2], 1.0));
    // What would change a greedy reply and is not applied here is named, not ignored.
    for (key, value) in [
        ("num_beams", serde_json::json!(4)),
        ("no_repeat_ngram_size", 3.into()),
        ("suppress_tokens", serde_json::json!([5])),
    ] {
        let dir = with_generation_config(|c| {
            c[key] = value.clone();
            true
        });
        let err = GenerationSettings::of(&hub::from_dir(dir.path()).unwrap()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::BadConfig);
        assert!(err.to_string().contains(key) && err.to_string().contains("generation_config.json"), "{err}");
    }
    for bad in [serde_json::json!("two"), serde_json::json!([2, -1])] {
        let dir = with_generation_config(|c| {
            c["eos_token_id"] = bad.clone();
            true
        });
        let err = GenerationSettings::of(&hub::from_dir(dir.path()).unwrap()).unwrap_err();
        assert!(err.to_string().contains("eos_token_id"), "{err}");
    }
    for (key, bad) in
        [("repetition_penalty", serde_json::json!(0)), ("max_new_tokens", "4".into()), ("max_length", 0.into())]
    {
        let dir = with_generation_config(|c| {
            c[key] = bad.clone();
            true
        });
        let err = GenerationSettings::of(&hub::from_dir(dir.path()).unwrap()).unwrap_err();
        assert!(err.to_string().contains(key), "{err}");
    }
    // Neutral values of those keys change nothing.
    let neutral = with_generation_config(|c| {
        c["num_beams"] = 1.into();
        c["suppress_tokens"] = serde_json::json!([]);
        c["bad_words_ids"] = serde_json::Value::Null;
        true
    });
    assert!(GenerationSettings::of(&hub::from_dir(neutral.path()).unwrap()).is_ok());
}

/// A reply decodes as transformers 5 decodes it with a BPE tokenizer (the tiny Qwen2.5-VL's and
/// Gemma's; `scripts/fixtures/gen_reply_decoding_fixture.py`): `clean_up_tokenization_spaces`
/// set in its tokenizer config changes nothing, unless the config also forces it for BPE (the
/// fixtures' configs set neither, which reads as off); and the tokens the config names special
/// are skipped though `tokenizer.json` does not flag them (the tiny Gemma's "Yes" and "No").
#[test]
fn bpe_replies_are_cleaned_up_only_where_forced_as_transformers_5_does() {
    use benchctl_models::vqascore::generate::ReplyDecoding;
    let path = fixture_model("reply-decoding-bpe.json");
    let fixture: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut skipped = 0;
    for (name, cases) in fixture["tokenizers"].as_object().unwrap() {
        let files = hub::from_dir(&fixture_model(name)).unwrap();
        let read = GenerationSettings::of(&files).unwrap().decoding;
        assert!(!read.clean_up_spaces && !read.clean_up_bpe, "{name}");
        let on = ReplyDecoding { clean_up_spaces: true, ..read.clone() };
        let forced = ReplyDecoding { clean_up_spaces: true, clean_up_bpe: true, ..read.clone() };
        let tokenizer = tokenizers::Tokenizer::from_file(&files.tokenizer).unwrap();
        for case in cases.as_array().unwrap() {
            let ids: Vec<u32> = case["ids"].as_array().unwrap().iter().map(|id| id.as_u64().unwrap() as u32).collect();
            skipped += usize::from(tokenizer.decode(&ids, true).unwrap() != case["off"].as_str().unwrap());
            assert_eq!(read.decode(&tokenizer, &ids).unwrap(), case["off"], "{name}");
            assert_eq!(on.decode(&tokenizer, &ids).unwrap(), case["on"], "{name}");
            assert_eq!(forced.decode(&tokenizer, &ids).unwrap(), case["forced"], "{name}");
        }
    }
    assert!(skipped > 0, "some case holds a token only the config names special");
}
