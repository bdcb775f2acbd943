//! ftfy's mojibake heuristic (`ftfy/badness.py`, ftfy 6.3): text "is bad" when it holds one of
//! the character sequences that UTF-8 decoded in another code page makes and real text rarely
//! does (a C1 control; an accented letter before a currency sign; `Ã` before a no-break space;
//! …). The characters that occur in such mojibake are sorted into categories, and the
//! sequences are written over the categories; both are ftfy's, so that benchctl repairs the
//! same captions ftfy repairs and leaves the others alone.

/// The characters of each category, ranges written `a-b`.
const CATEGORIES: &[(&str, &str)] = &[
    ("common", "\u{a0}\u{ad}\u{b7}\u{b4}\u{2013}\u{2014}\u{2015}\u{2026}\u{2019}"),
    ("c1", "\u{80}-\u{9f}"),
    (
        "bad",
        "\u{a6}\u{a4}\u{a8}\u{ac}\u{af}\u{b8}\u{192}\u{2c6}\u{2c7}\u{2d8}\u{2db}\u{2dc}\u{2020}\u{2021}\u{2030}\u{2310}\u{25ca}\u{fffd}\u{aa}\u{ba}",
    ),
    ("law", "\u{b6}\u{a7}"),
    ("currency", "\u{a2}\u{a3}\u{a5}\u{20a7}\u{20ac}"),
    ("start_punctuation", "\u{a1}\u{ab}\u{bf}\u{a9}\u{384}\u{385}\u{2018}\u{201a}\u{201c}\u{201e}\u{2022}\u{2039}\u{f8ff}"),
    ("end_punctuation", "\u{ae}\u{bb}\u{2dd}\u{201d}\u{203a}\u{2122}"),
    (
        "numeric",
        "\u{b2}\u{b3}\u{b9}\u{b1}\u{bc}\u{bd}\u{be}\u{d7}\u{b5}\u{f7}\u{2044}\u{2202}\u{2206}\u{220f}\u{2211}\u{221a}\u{221e}\u{2229}\u{222b}\u{2248}\u{2260}\u{2261}\u{2264}\u{2265}\u{2116}",
    ),
    ("kaomoji", "\u{d2}-\u{d6}\u{d9}-\u{dc}\u{f2}-\u{f6}\u{f8}-\u{fc}\u{150}\u{14c}\u{16a}\u{172}\u{b0}"),
    (
        "upper_accented",
        "\u{c0}-\u{d1}\u{d8}\u{dc}\u{dd}\u{102}\u{100}\u{104}\u{106}\u{10c}\u{10e}\u{110}\u{118}\u{11a}\u{112}\u{116}\u{11e}\u{122}\u{130}\u{12a}\u{136}\u{139}\u{13d}\u{141}\u{13b}\u{143}\u{147}\u{145}\u{152}\u{158}\u{15a}\u{15e}\u{160}\u{162}\u{164}\u{16e}\u{170}\u{178}\u{179}\u{17b}\u{17d}\u{490}",
    ),
    (
        "lower_accented",
        "\u{df}\u{e0}-\u{f1}\u{103}\u{105}\u{101}\u{107}\u{10d}\u{10f}\u{111}\u{119}\u{11b}\u{113}\u{117}\u{11f}\u{123}\u{12f}\u{12b}\u{137}\u{13a}\u{13e}\u{142}\u{13c}\u{153}\u{155}\u{15b}\u{15f}\u{161}\u{165}\u{fc}\u{17a}\u{17c}\u{17e}\u{491}\u{fb01}\u{fb02}",
    ),
    (
        "upper_common",
        "\u{de}\u{391}-\u{3a9}\u{386}\u{388}\u{389}\u{38a}\u{38c}\u{38e}\u{38f}\u{3aa}\u{3ab}\u{401}-\u{42f}",
    ),
    ("lower_common", "\u{3b1}-\u{3c9}\u{3ac}\u{3ad}\u{3ae}\u{3af}\u{3b0}\u{430}-\u{45f}"),
    (
        "box",
        "\u{2502}\u{250c}\u{2510}\u{2518}\u{251c}\u{2524}\u{252c}\u{253c}\u{2550}-\u{256c}\u{2580}\u{2584}\u{2588}\u{258c}\u{2590}\u{2591}\u{2592}\u{2593}",
    ),
];

/// The sequences, one per line: `{name}` is a category's characters inside a class; `\s` and
/// `\w` are Python's (whitespace as `str.isspace`, word characters as `str.isalnum` or `_`).
const SEQUENCES: &[&str] = &[
    "[{c1}]",
    "[{bad}{lower_accented}{upper_accented}{box}{start_punctuation}{end_punctuation}{currency}{numeric}{law}][{bad}]",
    "[a-zA-Z][{lower_common}{upper_common}][{bad}]",
    "[{bad}][{lower_accented}{upper_accented}{box}{start_punctuation}{end_punctuation}{currency}{numeric}{law}]",
    "[{lower_accented}{lower_common}{box}{end_punctuation}{currency}{numeric}][{upper_accented}]",
    "[{box}{end_punctuation}{currency}{numeric}][{lower_accented}]",
    "[{lower_accented}{box}{end_punctuation}][{currency}]",
    r"\s[{upper_accented}][{currency}]",
    "[{upper_accented}{box}][{numeric}{law}]",
    "[{lower_accented}{upper_accented}{box}{currency}{end_punctuation}][{start_punctuation}][{numeric}]",
    "[{lower_accented}{upper_accented}{currency}{numeric}{box}{law}][{end_punctuation}][{start_punctuation}]",
    "[{currency}{numeric}{box}][{start_punctuation}]",
    "[a-z][{upper_accented}][{start_punctuation}{currency}]",
    "[{box}][{kaomoji}]",
    "[{lower_accented}{upper_accented}{currency}{numeric}{start_punctuation}{end_punctuation}{law}][{box}]",
    "[{box}][{end_punctuation}]",
    r"[{lower_accented}{upper_accented}][{start_punctuation}{end_punctuation}]\w",
    // Windows-1252's Œ/œ before anything but a letter.
    "[\u{152}\u{153}][^A-Za-z]",
    "[{upper_accented}]\u{b0}",
    // UTF-8's lead bytes C2, C3, CE, D0 read as Latin-1 before what continuation bytes become.
    "[\u{c2}\u{c3}\u{ce}\u{d0}][\u{20ac}\u{153}\u{160}\u{161}\u{a2}\u{a3}\u{178}\u{17e}\u{a0}\u{ad}\u{ae}\u{a9}\u{b0}\u{b7}\u{bb}{start_punctuation}{end_punctuation}\u{2013}\u{2014}\u{b4}]",
    "\u{d7}[\u{b2}\u{b3}]",
    // Arabic read as Windows-1252, twice over.
    "[\u{d8}\u{d9}][{common}{currency}{bad}{numeric}{start_punctuation}\u{178}\u{160}\u{ae}\u{b0}\u{b5}\u{bb}][\u{d8}\u{d9}][{common}{currency}{bad}{numeric}{start_punctuation}\u{178}\u{160}\u{ae}\u{b0}\u{b5}\u{bb}]",
    // Devanagari read as Latin-1.
    "\u{e0}[\u{b2}\u{b5}\u{b9}\u{bc}\u{bd}\u{be}]",
    // UTF-8 read as MacRoman.
    "\u{221a}[\u{b1}\u{2202}\u{2020}\u{2260}\u{ae}\u{2122}\u{b4}\u{2264}\u{2265}\u{a5}\u{b5}\u{f8}]",
    "\u{2248}[\u{b0}\u{a2}]",
    "\u{201a}\u{c4}[\u{ec}\u{ee}\u{ef}\u{f2}\u{f4}\u{fa}\u{f9}\u{fb}\u{2020}\u{b0}\u{a2}\u{3c0}]",
    "\u{201a}[\u{e2}\u{f3}][\u{e0}\u{e4}\u{b0}\u{ea}]",
    // UTF-8 read as Windows-1251.
    "\u{432}\u{402}",
    "[\u{412}\u{413}\u{420}\u{421}][{c1}{bad}{start_punctuation}{end_punctuation}{currency}\u{b0}\u{b5}][\u{412}\u{413}\u{420}\u{421}]",
    "\u{413}\u{45e}\u{412}\u{402}\u{412}.[A-Za-z ]",
    // Latin-1 mojibake of a no-break space or an inverted exclamation mark.
    "\u{c3}[\u{a0}\u{a1}]",
    r"[a-z]\s?[\u{c3}\u{c2}][ ]",
    "^[\u{c3}\u{c2}][ ]",
    "[a-z.,?!{end_punctuation}]\u{c2}[ {start_punctuation}{end_punctuation}]",
    // UTF-8 read as Windows-1253.
    "\u{3b2}\u{20ac}[\u{2122}\u{a0}\u{386}\u{ad}\u{ae}\u{b0}]",
    "[\u{392}\u{393}\u{39e}\u{39f}][{c1}{bad}{start_punctuation}{end_punctuation}{currency}\u{b0}][\u{392}\u{393}\u{39e}\u{39f}]",
    // UTF-8 read as Windows-1257.
    "\u{101}\u{20ac}",
];

/// The alternatives of [`SEQUENCES`] with the categories written out.
pub(super) fn pattern() -> String {
    let alternatives: Vec<String> = SEQUENCES
        .iter()
        .map(|sequence| {
            let mut out = sequence.replace(r"\s", r"[\s\x1c-\x1f]").replace(r"\w", r"[\p{L}\p{N}_]");
            for (name, chars) in CATEGORIES {
                out = out.replace(&format!("{{{name}}}"), &super::class_items(chars));
            }
            out
        })
        .collect();
    alternatives.join("|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_category_placeholder_is_filled() {
        let pattern = pattern();
        assert!(!CATEGORIES.iter().any(|(name, _)| pattern.contains(&format!("{{{name}}}"))), "{pattern}");
        let cleaner = super::super::TextCleaner::new().unwrap();
        assert!(cleaner.is_bad("caf\u{c3}\u{a9}") && !cleaner.is_bad("café") && !cleaner.is_bad("a plain caption"));
    }
}
