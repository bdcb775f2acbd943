//! Caption cleaning as open_clip does it before tokenising (`open_clip/tokenizer.py`):
//! `basic_clean` (ftfy's `fix_text` ([`TextCleaner::fix_text`]), Python's `html.unescape`
//! twice, `strip`),
//! then `whitespace_clean` (whitespace runs to one space). ftfy repairs mojibake, straightens
//! curly quotes, maps full-width forms to ASCII, splits ligatures and removes control
//! characters, so it changes well-formed captions too; an OpenCLIP model that skips it sees
//! other tokens. Matched character for character with ftfy 6.3 and open_clip 3.3, and id for
//! id with open_clip's tokenizer, on 1,949 captions (`tests/text_clean.rs`, fixture from
//! `scripts/fixtures/gen_ftfy_fixture.py`).

mod badness;
pub mod codepages;
mod encoding;
mod fix;
mod html;

use std::collections::HashMap;
use std::sync::Arc;

use regex::bytes::Regex as BytesRegex;
use regex::Regex;

use crate::{Error, ErrorKind, Result};

/// ftfy's and `html.unescape`'s patterns and tables, made once (a tokenizer holds one).
#[derive(Clone)]
pub struct TextCleaner(Arc<Parts>);

struct Parts {
    /// ftfy's mojibake heuristic ([`badness`]).
    badness: Regex,
    /// UTF-8 sequences whose no-break space became a space, and those a sloppy decode lost
    /// bytes of ([`encoding`]).
    altered_utf8: BytesRegex,
    lossy_utf8: BytesRegex,
    /// Runs of UTF-8 as code pages show them ([`encoding`]).
    utf8_run: Regex,
    /// ANSI terminal escapes ([`fix`]).
    ansi: Regex,
    /// Python's and ftfy's character-reference patterns, and their tables ([`html`]).
    html_reference: Regex,
    html_entity: Regex,
    html5: HashMap<String, String>,
    ftfy_entities: HashMap<String, String>,
}

impl std::fmt::Debug for TextCleaner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TextCleaner")
    }
}

impl TextCleaner {
    /// Compiles the patterns and builds the HTML tables.
    pub fn new() -> Result<Self> {
        let regex = |pattern: &str| {
            Regex::new(pattern).map_err(|e| {
                Error::caused_by(ErrorKind::Tokenizer, format!("compile the caption cleaning's pattern: {e}"), e)
            })
        };
        let bytes = |pattern: &str| {
            BytesRegex::new(pattern).map_err(|e| {
                Error::caused_by(ErrorKind::Tokenizer, format!("compile the caption cleaning's pattern: {e}"), e)
            })
        };
        let html5 = html::html5_table();
        let html_reference = regex(html::REFERENCE)?;
        let ftfy_entities = html::ftfy_entities(&html5, &html_reference);
        Ok(TextCleaner(Arc::new(Parts {
            badness: regex(&badness::pattern())?,
            altered_utf8: bytes(encoding::ALTERED_UTF8)?,
            lossy_utf8: bytes(encoding::LOSSY_UTF8)?,
            utf8_run: regex(&encoding::utf8_run_pattern())?,
            ansi: regex(fix::ANSI)?,
            html_reference,
            html_entity: regex(html::ENTITY)?,
            html5,
            ftfy_entities,
        })))
    }

    /// open_clip's `whitespace_clean(basic_clean(text))` (the lower-casing is the tokenizer's).
    pub fn open_clip_clean(&self, text: &str) -> String {
        let fixed = self.fix_text(text);
        let unescaped = self.html_unescape(&self.html_unescape(&fixed));
        whitespace_clean(unescaped.trim_matches(is_python_space))
    }

    /// Python's `html.unescape`.
    pub fn html_unescape(&self, text: &str) -> String {
        html::unescape(&self.0.html_reference, &self.0.html5, text)
    }

    /// Whether `text` looks like it holds mojibake (ftfy's `is_bad`).
    fn is_bad(&self, text: &str) -> bool {
        self.0.badness.is_match(text)
    }
}

/// `" ".join(text.split())`: Python's whitespace runs to one space, none at the ends.
pub fn whitespace_clean(text: &str) -> String {
    text.split(is_python_space).filter(|word| !word.is_empty()).collect::<Vec<_>>().join(" ")
}

/// Python's `str.isspace`: Unicode's white space and the information separators 0x1C–0x1F.
pub fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// The characters of a list as ftfy writes them, `a-b` (ASCII hyphen between two characters)
/// a range: each single character or range, in order.
fn class_ranges(chars: &str) -> Vec<(char, char)> {
    let chars: Vec<char> = chars.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if i + 2 < chars.len() && chars[i + 1] == '-' {
            out.push((chars[i], chars[i + 2]));
            i += 3;
        } else {
            out.push((chars[i], chars[i]));
            i += 1;
        }
    }
    out
}

/// Characters as the inside of a regex class, each escaped; `a-b` is a range.
fn class_items(chars: &str) -> String {
    class_ranges(chars)
        .into_iter()
        .map(|(a, b)| {
            if a == b {
                format!(r"\x{{{:x}}}", a as u32)
            } else {
                format!(r"\x{{{:x}}}-\x{{{:x}}}", a as u32, b as u32)
            }
        })
        .collect()
}
