//! ftfy's `fix_text` with its default settings (ftfy 6.3, `TextFixerConfig()`): per line, the
//! fixes below in ftfy's order, repeated until the line stops changing.

use unicode_normalization::UnicodeNormalization;

use super::encoding::fix_c1_controls;
use super::TextCleaner;

/// ftfy's longest segment, in characters (`max_decode_length`).
const MAX_SEGMENT: usize = 1_000_000;

/// ANSI terminal escapes: `ESC [ digits/semicolons letter`.
pub(super) const ANSI: &str = r"\x1b\[[\d;]*[a-zA-Z]";

impl TextCleaner {
    /// ftfy's `fix_text`. HTML references are unescaped until a line holds a `<` (then the
    /// text is taken for HTML, and neither that line nor any after it is unescaped, as ftfy
    /// does).
    pub fn fix_text(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut unescape_html = true;
        for segment in segments(text) {
            if segment.contains('<') {
                unescape_html = false;
            }
            out.push_str(&self.fix_segment(segment, unescape_html));
        }
        out
    }

    fn fix_segment(&self, text: &str, unescape_html: bool) -> String {
        let mut text = text.to_string();
        loop {
            let before = text.clone();
            if unescape_html {
                text = self.ftfy_unescape(&text);
            }
            text = self.fix_encoding(&text);
            text = fix_c1_controls(&text);
            text = fix_latin_ligatures(&text);
            text = fix_character_width(&text);
            text = text.chars().map(uncurl_quote).collect();
            text = fix_line_breaks(&text);
            text = self.0.ansi.replace_all(&text, "").into_owned();
            text = text.chars().filter(|&c| !is_removed_control(c)).collect();
            text = text.nfc().collect();
            if text == before {
                return text;
            }
        }
    }
}

/// Lines with their line feeds, each at most [`MAX_SEGMENT`] characters.
fn segments(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let line_end = rest.find('\n').map_or(rest.len(), |i| i + 1);
        let end = rest.char_indices().nth(MAX_SEGMENT).map_or(line_end, |(i, _)| i.min(line_end));
        let (segment, tail) = rest.split_at(end);
        rest = tail;
        Some(segment)
    })
}

/// A Latin ligature or digraph spelled out (ftfy's `LIGATURES`).
fn spelled_ligature(c: char) -> Option<&'static str> {
    Some(match c {
        'Ĳ' => "IJ",
        'ĳ' => "ij",
        'ŉ' => "ʼn",
        'Ǳ' => "DZ",
        'ǲ' => "Dz",
        'ǳ' => "dz",
        'Ǆ' => "DŽ",
        'ǅ' => "Dž",
        'ǆ' => "dž",
        'Ǉ' => "LJ",
        'ǈ' => "Lj",
        'ǉ' => "lj",
        'Ǌ' => "NJ",
        'ǋ' => "Nj",
        'ǌ' => "nj",
        'ﬀ' => "ff",
        'ﬁ' => "fi",
        'ﬂ' => "fl",
        'ﬃ' => "ffi",
        'ﬄ' => "ffl",
        'ﬅ' => "ſt",
        'ﬆ' => "st",
        _ => return None,
    })
}

fn fix_latin_ligatures(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match spelled_ligature(c) {
            Some(spelled) => out.push_str(spelled),
            None => out.push(c),
        }
    }
    out
}

/// Half-width and full-width forms (U+FF01–U+FFEF) as their NFKC forms, the ideographic space
/// as a space (ftfy's `WIDTH_MAP`).
fn fix_character_width(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\u{3000}' => out.push(' '),
            '\u{ff01}'..='\u{ffef}' => out.extend(std::iter::once(c).nfkc()),
            _ => out.push(c),
        }
    }
    out
}

/// Curly and modifier quotes as ASCII quotes.
fn uncurl_quote(c: char) -> char {
    match c {
        '\u{2bc}' | '\u{2018}'..='\u{201b}' => '\'',
        '\u{201c}'..='\u{201f}' => '"',
        _ => c,
    }
}

fn fix_line_breaks(text: &str) -> String {
    text.replace("\r\n", "\n").replace(['\r', '\u{2028}', '\u{2029}', '\u{85}'], "\n")
}

/// The control characters ftfy removes: C0 but tab, line feed, form feed and carriage
/// return; DEL; deprecated format characters; the byte-order mark; interlinear annotations.
fn is_removed_control(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{8}' | '\u{b}' | '\u{e}'..='\u{1f}' | '\u{7f}' | '\u{206a}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffc}')
}
