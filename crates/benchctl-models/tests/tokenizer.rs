//! Tokenizer parity: ids identical to OpenAI's reference tokenizer (which transformers'
//! `CLIPTokenizer` agrees with on these texts) and to the recorded OpenAI test vectors, with
//! either caption cleaning (these texts are ones ftfy leaves alone).

use std::collections::BTreeMap;

use benchctl_models::tokenizer::{CaptionCleaning, ClipTokenizer};
use benchctl_testkit::{model_fixture, read_winoground_tsv, shared};

fn tokenizer() -> ClipTokenizer {
    ClipTokenizer::from_file(&model_fixture("tokenizer/tokenizer.json"), 77, CaptionCleaning::HtmlReferences).unwrap()
}

fn open_clip_tokenizer() -> ClipTokenizer {
    ClipTokenizer::from_file(&model_fixture("tokenizer/tokenizer.json"), 77, CaptionCleaning::OpenClip).unwrap()
}

fn reference() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(model_fixture("tokenizer/reference_ids.json")).unwrap()).unwrap()
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

#[test]
fn edge_cases_match_openai() {
    let r = reference();
    let texts: BTreeMap<String, String> = serde_json::from_value(r["edge_cases"].clone()).unwrap();
    assert!(texts.len() >= 10);
    for tok in [tokenizer(), open_clip_tokenizer()] {
        for (key, text) in &texts {
            assert_eq!(tok.encode(text).unwrap(), ids(&r["ids"][key]), "{key}: {text:?}");
        }
    }
}

#[test]
fn long_texts_are_truncated_keeping_the_end_token() {
    let tok = tokenizer();
    let ids = tok.encode(&"the quick brown fox ".repeat(40)).unwrap();
    assert_eq!(ids.len(), 77);
    assert_eq!(ids[0], 49406);
    assert_eq!(ids[76], 49407);
    assert_eq!(ids[75], tok.encode(&"the quick brown fox ".repeat(40)).unwrap()[75]);
}

#[test]
fn all_800_winoground_captions_match_openai() {
    let Some(tsv) = shared("datasets/winoground/winoground_annotations.tsv") else { return };
    let tok = tokenizer();
    let r = reference();
    let rows = read_winoground_tsv(&tsv);
    assert_eq!(rows.len(), 400);
    let mut checked = 0;
    for row in &rows {
        for (k, caption) in [&row.caption_0, &row.caption_1].into_iter().enumerate() {
            let key = format!("{}_c{k}", row.id);
            assert_eq!(tok.encode(caption).unwrap(), ids(&r["ids"][&key]), "{key}: {caption:?}");
            checked += 1;
        }
    }
    assert_eq!(checked, 800);
}

#[test]
fn openai_test_vectors_match() {
    let Some(path) = shared("reference/openai-clip-vectors/clip_data.json") else { return };
    let data: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let tok = tokenizer();
    let cases = data["cases"].as_array().unwrap();
    assert!(!cases.is_empty());
    for (case, expected) in cases.iter().zip(data["tokenizer"].as_array().unwrap()) {
        // Recorded as a 1×77 row padded with zeros.
        let mut expected = ids(&expected[0]);
        while expected.last() == Some(&0) {
            expected.pop();
        }
        assert_eq!(tok.encode(case.as_str().unwrap()).unwrap(), expected, "{case}");
    }
}

/// RoBERTa's byte-level BPE on GPT-2's real merges (roberta-base's `merges.txt`) against
/// `transformers`' slow `RobertaTokenizer` (`scripts/fixtures/check_roberta_tokenizer.py`): specials in
/// the text, apostrophes, runs of spaces, tabs and newlines, numbers, accents, CJK, emoji,
/// truncation to 50 with `</s>` kept, and the empty string.
#[test]
fn roberta_tokenisation_matches_transformers_slow_tokenizer() {
    let dir = benchctl_testkit::model_fixture("roberta-bpe");
    let tokenizer = benchctl_models::tokenizer::RobertaTokenizer::from_file(&dir.join("vocab.json"), 50).unwrap();
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let cases = expected["cases"].as_array().unwrap();
    assert!(cases.len() >= 15);
    let mut failures = Vec::new();
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let ids: Vec<u32> = serde_json::from_value(case["ids"].clone()).unwrap();
        let ours = tokenizer.encode(text).unwrap();
        if ours != ids {
            failures.push(format!("{text:?}:\n  ours   {ours:?}\n  theirs {ids:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let long = cases.iter().find(|c| c["text"].as_str().unwrap().starts_with("a very long")).unwrap();
    assert_eq!(long["ids"].as_array().unwrap().len(), 50, "the long caption is cut");
    assert!(tokenizer.tokens_cut(long["text"].as_str().unwrap()).unwrap() > 0);
}
