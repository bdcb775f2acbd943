//! OpenCLIP's caption cleaning against open_clip and ftfy themselves
//! (`scripts/fixtures/gen_ftfy_fixture.py`): `ftfy.fix_text` character for character,
//! open_clip's cleaned text, and its token ids id for id, on curly quotes, full-width and
//! half-width forms, ligatures, mojibake of every code page ftfy repairs, HTML references,
//! control characters and 1,500 random strings of the characters ftfy's heuristic weighs.

use benchctl_models::text_clean::{codepages, TextCleaner};
use benchctl_models::tokenizer::{CaptionCleaning, ClipTokenizer};
use benchctl_testkit::model_fixture;

fn fixture() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(model_fixture("ftfy/cases.json")).unwrap()).unwrap()
}

fn cases(fixture: &serde_json::Value) -> &Vec<serde_json::Value> {
    fixture["cases"].as_array().unwrap()
}

/// Every case where `ours` differs from the fixture's `field`, shown.
fn mismatches(fixture: &serde_json::Value, field: &str, ours: impl Fn(&str) -> String) -> Vec<String> {
    cases(fixture)
        .iter()
        .filter_map(|case| {
            let text = case["text"].as_str().unwrap();
            let (got, want) = (ours(text), case[field].as_str().unwrap());
            (got != want).then(|| format!("{text:?}: {got:?}, reference {want:?}"))
        })
        .collect()
}

#[test]
fn code_pages_decode_every_byte_as_python() {
    let fixture = fixture();
    let pages = fixture["codepages"].as_object().unwrap();
    assert_eq!(pages.len(), codepages::CODE_PAGES.len());
    for (name, decoded) in pages {
        let page = codepages::code_page(name).unwrap_or_else(|| panic!("no code page {name}"));
        let ours: String = (0..=255u8).map(|b| page.decode_byte(b)).collect();
        assert_eq!(&ours, decoded.as_str().unwrap(), "{name}");
        // What a page decodes, it encodes back to the same bytes.
        let bytes: Vec<u8> = (0..=255u8).filter(|&b| b != 0x1A || !page.sloppy).collect();
        let text: String = bytes.iter().map(|&b| page.decode_byte(b)).collect();
        assert_eq!(page.encode(&text), Some(bytes), "{name}");
    }
}

#[test]
fn fix_text_matches_ftfy() {
    let fixture = fixture();
    let changed = cases(&fixture).iter().filter(|c| c["fix_text"] != c["text"]).count();
    assert!(changed > 900, "the fixture exercises the fixes ({changed} changed)");
    let cleaner = TextCleaner::new().unwrap();
    let off = mismatches(&fixture, "fix_text", |t| cleaner.fix_text(t));
    assert!(off.is_empty(), "{} of {} differ from ftfy:\n{}", off.len(), cases(&fixture).len(), off.join("\n"));
}

#[test]
fn open_clip_cleaning_and_ids_match_open_clip() {
    let fixture = fixture();
    let cleaner = TextCleaner::new().unwrap();
    let off = mismatches(&fixture, "open_clip_clean", |t| cleaner.open_clip_clean(t).to_lowercase());
    assert!(off.is_empty(), "{} differ from open_clip's cleaning:\n{}", off.len(), off.join("\n"));
    let tokenizer =
        ClipTokenizer::from_file(&model_fixture("tokenizer/tokenizer.json"), 77, CaptionCleaning::OpenClip).unwrap();
    let skipped =
        ClipTokenizer::from_file(&model_fixture("tokenizer/tokenizer.json"), 77, CaptionCleaning::HtmlReferences)
            .unwrap();
    let ids = |case: &serde_json::Value| -> Vec<u32> {
        case["open_clip_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect()
    };
    let mut differ_without = 0;
    for case in cases(&fixture) {
        let text = case["text"].as_str().unwrap();
        assert_eq!(tokenizer.encode(text).unwrap(), ids(case), "{text:?}");
        differ_without += usize::from(skipped.encode(text).unwrap() != ids(case));
    }
    // Without ftfy, captions with curly quotes, full-width forms, ligatures or mojibake get
    // other ids: the cleaning is what makes them equal.
    eprintln!("{differ_without} of {} captions tokenise differently without the cleaning", cases(&fixture).len());
    assert!(differ_without > 500, "only {differ_without} captions need the cleaning");
}
