//! ftfy's mojibake repair (`fix_encoding`, ftfy 6.3): text that looks like UTF-8 decoded in a
//! single-byte code page ([`super::badness`]) is encoded back in the first code page
//! that can hold it and decoded as UTF-8, repairing on the way a no-break space turned into a
//! space (`restore_byte_a0`) and bytes a sloppy decode lost (`replace_lossy_sequences`); failing
//! that, runs of mojibake inside otherwise good text are repaired alone
//! (`decode_inconsistent_utf8`), Latin-1 meant as Windows-1252 is re-read, and C1 controls
//! become Windows-1252's characters. Repeated until nothing changes.

use super::codepages::{windows_1252, CODE_PAGES};
use super::TextCleaner;

impl TextCleaner {
    /// ftfy's `fix_encoding`.
    pub(super) fn fix_encoding(&self, text: &str) -> String {
        let mut text = text.to_string();
        loop {
            match self.fix_encoding_step(&text) {
                Some(fixed) if fixed != text => text = fixed,
                _ => return text,
            }
        }
    }

    /// One repair, or `None` where the text is left as it is.
    fn fix_encoding_step(&self, text: &str) -> Option<String> {
        if text.is_ascii() || !self.is_bad(text) {
            return None;
        }
        let mut possible = Vec::new();
        for page in &CODE_PAGES {
            let Some(mut bytes) = page.encode(text) else { continue };
            possible.push(page.name);
            if page.name != "macroman" && self.0.altered_utf8.is_match(&bytes) {
                bytes = self.restore_byte_a0(&bytes);
            }
            if page.sloppy {
                bytes = self.0.lossy_utf8.replace_all(&bytes, "\u{fffd}".as_bytes()).into_owned();
            }
            if let Some(fixed) = decode_utf8_variants(&bytes) {
                return Some(fixed);
            }
        }
        if self.runs(text).next().is_some() {
            let fixed = self.decode_inconsistent_utf8(text);
            if fixed != text {
                return Some(fixed);
            }
        }
        // Latin-1's C1 controls taken as Windows-1252's characters, where the strict code page
        // has them. (ftfy means to keep text that is also Windows-1252 first, but asks for the
        // name "windows-1252", which its list of candidates never holds; this does as it does.)
        if possible.contains(&"latin-1") {
            if let Some(fixed) = latin1_as_windows_1252(text).filter(|fixed| fixed != text) {
                return Some(fixed);
            }
        }
        text.chars().any(is_c1).then(|| fix_c1_controls(text))
    }
}

fn is_c1(c: char) -> bool {
    ('\u{80}'..='\u{9f}').contains(&c)
}

/// Each C1 control as the Windows-1252 character of its byte (ftfy's `fix_c1_controls`).
pub fn fix_c1_controls(text: &str) -> String {
    let page = windows_1252();
    text.chars().map(|c| if is_c1(c) { page.decode_byte(c as u8) } else { c }).collect()
}

/// `text.encode("latin-1").decode("windows-1252")` with Python's strict Windows-1252, which
/// leaves 0x81, 0x8D, 0x8F, 0x90 and 0x9D unassigned.
fn latin1_as_windows_1252(text: &str) -> Option<String> {
    let page = windows_1252();
    text.chars()
        .map(|c| match c as u32 {
            0x81 | 0x8D | 0x8F | 0x90 | 0x9D => None,
            0x80..=0x9F => Some(page.decode_byte(c as u8)),
            _ => Some(c),
        })
        .collect()
}

/// ftfy's `utf-8-variants` decode: UTF-8, and also CESU-8's surrogate pairs and Java's
/// `C0 80` for NUL; `None` where the bytes are not that.
fn decode_utf8_variants(bytes: &[u8]) -> Option<String> {
    if !bytes.contains(&0xED) && !bytes.contains(&0xC0) {
        return String::from_utf8(bytes.to_vec()).ok();
    }
    let mut out = String::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        match rest {
            [0xC0, 0x80, tail @ ..] => {
                out.push('\0');
                rest = tail;
            }
            [0xED, a @ 0xA0..=0xAF, b @ 0x80..=0xBF, 0xED, c @ 0xB0..=0xBF, d @ 0x80..=0xBF, tail @ ..] => {
                let point = ((u32::from(*a) & 0x0F) << 16)
                    + ((u32::from(*b) & 0x3F) << 10)
                    + ((u32::from(*c) & 0x0F) << 6)
                    + (u32::from(*d) & 0x3F)
                    + 0x10000;
                out.push(char::from_u32(point)?);
                rest = tail;
            }
            _ => {
                // Plain UTF-8 up to the next special sequence.
                let end = (1..rest.len()).find(|&i| matches!(rest[i], 0xC0 | 0xED)).unwrap_or(rest.len());
                out.push_str(std::str::from_utf8(&rest[..end]).ok()?);
                rest = &rest[end..];
            }
        }
    }
    Some(out)
}

/// UTF-8 sequences whose no-break space (`A0`) became a space.
pub(super) const ALTERED_UTF8: &str = r"(?-u)[\xc2\xc3\xc5\xce\xd0\xd9] |[\xe2\xe3] [\x80-\x84\x86-\x9f\xa1-\xbf]|[\xe0-\xe3][\x80-\x84\x86-\x9f\xa1-\xbf] |\xf0 [\x80-\xbf][\x80-\xbf]|\xf0[\x80-\xbf] [\x80-\xbf]|\xf0[\x80-\xbf][\x80-\xbf] ";

/// UTF-8 sequences with a byte a sloppy decode lost (as `1A` or `?`).
pub(super) const LOSSY_UTF8: &str = concat!(
    r"(?-u)[\xc2-\xdf][\x1a]|[\xc2-\xc3][?]",
    r"|\xed[\xa0-\xaf][\x1a?]\xed[\xb0-\xbf][\x1a?\x80-\xbf]",
    r"|\xed[\xa0-\xaf][\x1a?\x80-\xbf]\xed[\xb0-\xbf][\x1a?]",
    r"|[\xe0-\xef][\x1a?][\x1a\x80-\xbf]|[\xe0-\xef][\x1a\x80-\xbf][\x1a?]",
    r"|[\xf0-\xf4][\x1a?][\x1a\x80-\xbf][\x1a\x80-\xbf]|[\xf0-\xf4][\x1a\x80-\xbf][\x1a?][\x1a\x80-\xbf]",
    r"|[\xf0-\xf4][\x1a\x80-\xbf][\x1a\x80-\xbf][\x1a?]|\x1a",
);

/// ftfy's `restore_byte_a0`: `Ã` before a space becomes `à` (but before the words where
/// Portuguese has `à` or `às`), and a space inside a UTF-8 sequence becomes its `A0`.
impl TextCleaner {
    fn restore_byte_a0(&self, bytes: &[u8]) -> Vec<u8> {
        const KEPT_AFTER: [&[u8]; 5] = [b" ", b"quele", b"quela", b"quilo", b"s "];
        let mut grave = Vec::with_capacity(bytes.len() + 8);
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i..].starts_with(b"\xc3 ") && !KEPT_AFTER.iter().any(|w| bytes[i + 2..].starts_with(w)) {
                grave.extend_from_slice(b"\xc3\xa0 ");
                i += 2;
            } else {
                grave.push(bytes[i]);
                i += 1;
            }
        }
        self.0
            .altered_utf8
            .replace_all(&grave, |m: &regex::bytes::Captures| {
                m[0].iter().map(|&b| if b == b' ' { 0xA0 } else { b }).collect::<Vec<u8>>()
            })
            .into_owned()
    }
}

/// The characters UTF-8's bytes become in the code pages (ftfy's `UTF8_CLUES`): lead bytes of
/// two-, three- and four-byte sequences, continuation bytes (with a space, for a lost no-break
/// space), and continuation bytes that are not also common punctuation.
const FIRST_OF_2: &str = "\u{102}\u{c2}\u{c4}\u{100}\u{c5}\u{c3}\u{c6}\u{106}\u{10c}\u{c7}\u{10e}\u{110}\u{c9}\u{11a}\u{ca}\u{cb}\u{116}\u{c8}\u{112}\u{118}\u{d0}\u{11e}\u{122}\u{cd}\u{ce}\u{cf}\u{130}\u{cc}\u{12a}\u{136}\u{139}\u{13b}\u{141}\u{143}\u{147}\u{145}\u{d1}\u{d3}\u{d4}\u{d6}\u{150}\u{d2}\u{14c}\u{d8}\u{d5}\u{158}\u{15a}\u{160}\u{15e}\u{162}\u{de}\u{da}\u{db}\u{dc}\u{170}\u{d9}\u{16a}\u{172}\u{16e}\u{dd}\u{179}\u{17d}\u{17b}\u{df}\u{d7}\u{392}\u{393}\u{394}\u{395}\u{396}\u{397}\u{398}\u{399}\u{39a}\u{39b}\u{39c}\u{39d}\u{39e}\u{39f}\u{3a0}\u{3a1}\u{3a3}\u{3a4}\u{3a5}\u{3a6}\u{3a7}\u{3a8}\u{3a9}\u{3aa}\u{3ab}\u{3ac}\u{3ad}\u{3ae}\u{3af}\u{412}\u{413}\u{414}\u{415}\u{416}\u{417}\u{418}\u{419}\u{41a}\u{41b}\u{41c}\u{41d}\u{41e}\u{41f}\u{420}\u{421}\u{422}\u{423}\u{424}\u{425}\u{426}\u{427}\u{428}\u{429}\u{42a}\u{42b}\u{42c}\u{42d}\u{42e}\u{42f}";
const FIRST_OF_3: &str = "\u{e1}\u{103}\u{e2}\u{e4}\u{e0}\u{101}\u{105}\u{e5}\u{e3}\u{e6}\u{107}\u{10d}\u{e7}\u{10f}\u{e9}\u{11b}\u{ea}\u{eb}\u{117}\u{e8}\u{113}\u{119}\u{123}\u{ed}\u{ee}\u{ef}\u{ec}\u{12b}\u{12f}\u{137}\u{13a}\u{13c}\u{155}\u{17a}\u{3b0}\u{3b1}\u{3b2}\u{3b3}\u{3b4}\u{3b5}\u{3b6}\u{3b7}\u{3b8}\u{3b9}\u{3ba}\u{3bb}\u{3bc}\u{3bd}\u{3be}\u{3bf}\u{430}\u{431}\u{432}\u{433}\u{434}\u{435}\u{436}\u{437}\u{438}\u{439}\u{43a}\u{43b}\u{43c}\u{43d}\u{43e}\u{43f}";
const FIRST_OF_4: &str = "\u{111}\u{f0}\u{11f}\u{f3}\u{161}\u{3c0}\u{3c3}\u{440}\u{443}";
/// Continuation bytes; the `-` of `\u{80}-\u{bf}` is a range.
const CONTINUATION_STRICT: &str = "\u{80}-\u{bf}\u{104}\u{c6}\u{13d}\u{141}\u{d8}\u{156}\u{15a}\u{160}\u{15e}\u{164}\u{178}\u{179}\u{17d}\u{17b}\u{152}\u{105}\u{e6}\u{192}\u{13e}\u{142}\u{f8}\u{157}\u{15b}\u{161}\u{15f}\u{165}\u{17a}\u{17e}\u{17c}\u{153}\u{2c6}\u{2c7}\u{2d8}\u{2db}\u{2dc}\u{2dd}\u{384}\u{385}\u{386}\u{388}\u{389}\u{38a}\u{38c}\u{38e}\u{38f}\u{401}\u{402}\u{403}\u{404}\u{405}\u{406}\u{407}\u{408}\u{409}\u{40a}\u{40b}\u{40c}\u{40e}\u{40f}\u{451}\u{452}\u{453}\u{454}\u{455}\u{456}\u{457}\u{458}\u{459}\u{45a}\u{45b}\u{45c}\u{45e}\u{45f}\u{490}\u{491}\u{2020}\u{2021}\u{2030}\u{2039}\u{203a}\u{20ac}\u{2116}\u{2122}";
/// Windows-1252's punctuation among continuation bytes, and the space.
const CONTINUATION_LOOSE_EXTRA: &str =
    "\u{20}\u{2013}\u{2014}\u{2015}\u{2018}\u{2019}\u{201a}\u{201c}\u{201d}\u{201e}\u{2022}\u{2026}";

fn class(chars: &str) -> String {
    format!("[{}]", super::class_items(chars))
}

/// One or more UTF-8 sequences as code pages show them (ftfy's `UTF8_DETECTOR_RE` without its
/// look-behind, which [`TextCleaner::runs`] checks), anchored at the start.
pub(super) fn utf8_run_pattern() -> String {
    let cont = class(&format!("{CONTINUATION_STRICT}{CONTINUATION_LOOSE_EXTRA}"));
    let (first2, first3, first4) = (class(FIRST_OF_2), class(FIRST_OF_3), class(FIRST_OF_4));
    format!("^(?:{first2}{cont}|{first3}{cont}{{2}}|{first4}{cont}{{3}})+")
}

/// Whether `c` is a strict continuation character ([`CONTINUATION_STRICT`]).
fn is_strict_continuation(c: char) -> bool {
    super::class_ranges(CONTINUATION_STRICT).iter().any(|&(a, b)| (a..=b).contains(&c))
}

impl TextCleaner {
    /// The runs ftfy's detector finds, left to right, each as its byte range: a run may not
    /// follow a strict continuation character.
    fn runs<'t>(&'t self, text: &'t str) -> impl Iterator<Item = std::ops::Range<usize>> + 't {
        let mut at = 0;
        let mut previous: Option<char> = None;
        std::iter::from_fn(move || {
            while at < text.len() {
                if !previous.is_some_and(is_strict_continuation) {
                    if let Some(m) = self.0.utf8_run.find(&text[at..]) {
                        let run = at..at + m.end();
                        previous = text[..run.end].chars().next_back();
                        at = run.end;
                        return Some(run);
                    }
                }
                let c = text[at..].chars().next()?;
                previous = Some(c);
                at += c.len_utf8();
            }
            None
        })
    }

    /// ftfy's `decode_inconsistent_utf8`: each run of mojibake that is not the whole text, and
    /// looks bad on its own, repaired alone.
    fn decode_inconsistent_utf8(&self, text: &str) -> String {
        let total = text.chars().count();
        let mut out = String::with_capacity(text.len());
        let mut last = 0;
        for run in self.runs(text).collect::<Vec<_>>() {
            let piece = &text[run.clone()];
            out.push_str(&text[last..run.start]);
            if piece.chars().count() < total && self.is_bad(piece) {
                out.push_str(&self.fix_encoding(piece));
            } else {
                out.push_str(piece);
            }
            last = run.end;
        }
        out.push_str(&text[last..]);
        out
    }
}
