//! HTML character references as Python's `html.unescape` reads them (the HTML5 rules: named
//! references from WHATWG's list, the longest known prefix of an unknown name, numeric
//! references with the standard's replacements), and as ftfy's `unescape_html` reads them
//! (only `&name;` and `&#…;` forms, named ones also in upper case).

use std::collections::HashMap;

use regex::{Captures, Regex};

use super::codepages::windows_1252;
use super::TextCleaner;

/// A character reference as Python's `html.unescape` finds it.
pub(super) const REFERENCE: &str = r"&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\x0c <&#;]{1,32};?)";

/// One as ftfy's `unescape_html` finds it.
pub(super) const ENTITY: &str = r"&#?[0-9A-Za-z]{1,24};";

/// WHATWG's named references without their `&`, with and without `;` as the list has them.
pub(super) fn html5_table() -> HashMap<String, String> {
    htmlize::ENTITIES
        .entries()
        .map(|(name, value)| {
            let name = String::from_utf8_lossy(name);
            (name.trim_start_matches('&').to_string(), String::from_utf8_lossy(value).into_owned())
        })
        .collect()
}

/// Python's `html.unescape`, with its pattern and table.
pub(super) fn unescape(reference: &Regex, html5: &HashMap<String, String>, text: &str) -> String {
    if !text.contains('&') {
        return text.to_string();
    }
    reference.replace_all(text, |c: &Captures| replace_reference(html5, &c[1])).into_owned()
}

/// One reference's text, without its `&`.
fn replace_reference(table: &HashMap<String, String>, body: &str) -> String {
    if let Some(number) = body.strip_prefix('#') {
        let digits = number.trim_end_matches(';');
        let value = match digits.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16),
            None => digits.parse::<u32>(),
        };
        // A number past u32 is past U+10FFFF.
        return numeric_reference(value.unwrap_or(u32::MAX));
    }
    if let Some(value) = table.get(body) {
        return value.clone();
    }
    let chars: Vec<(usize, char)> = body.char_indices().collect();
    for x in (2..chars.len()).rev() {
        let (cut, _) = chars[x];
        if let Some(value) = table.get(&body[..cut]) {
            return format!("{value}{}", &body[cut..]);
        }
    }
    format!("&{body}")
}

/// A numeric reference's character, by the HTML5 rules Python applies: C1 numbers as
/// Windows-1252's characters, NUL and surrogates and numbers past U+10FFFF as U+FFFD, other
/// controls and non-characters removed.
fn numeric_reference(number: u32) -> String {
    match number {
        0x00 => "\u{fffd}".into(),
        0x0D => "\r".into(),
        // The standard's table for these is (sloppy) Windows-1252's.
        0x80..=0x9F => windows_1252().decode_byte(number as u8).to_string(),
        0xD800..=0xDFFF | 0x110000.. => "\u{fffd}".into(),
        0x01..=0x08 | 0x0B | 0x0E..=0x1F | 0x7F | 0xFDD0..=0xFDEF => String::new(),
        n if n & 0xFFFE == 0xFFFE => String::new(),
        n => char::from_u32(n).map(String::from).unwrap_or_else(|| "\u{fffd}".into()),
    }
}

impl TextCleaner {
    /// ftfy's `unescape_html`: `&name;` from the table (and its upper-case form where that is
    /// no reference of its own), `&#…;` as Python reads it unless that leaves a `;`.
    pub(super) fn ftfy_unescape(&self, text: &str) -> String {
        let parts = &self.0;
        parts
            .html_entity
            .replace_all(text, |c: &Captures| {
                let whole = &c[0];
                if let Some(value) = parts.ftfy_entities.get(whole) {
                    return value.clone();
                }
                if whole.starts_with("&#") {
                    let unescaped = unescape(&parts.html_reference, &parts.html5, whole);
                    if !unescaped.contains(';') {
                        return unescaped;
                    }
                }
                whole.to_string()
            })
            .into_owned()
    }
}

/// ftfy's `HTML_ENTITIES`: every `&name;`, and for lower-case names their upper-case form with
/// the upper-cased value, where Python does not read that form as a reference already.
pub(super) fn ftfy_entities(html5: &HashMap<String, String>, reference: &Regex) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for (name, value) in html5.iter().filter(|(name, _)| name.ends_with(';')) {
        out.insert(format!("&{name}"), value.clone());
    }
    for (name, value) in html5.iter().filter(|(name, _)| name.ends_with(';')) {
        if *name == name.to_lowercase() {
            let upper = format!("&{}", name.to_uppercase());
            if unescape(reference, html5, &upper) == upper {
                out.insert(upper, value.to_uppercase());
            }
        }
    }
    out
}
