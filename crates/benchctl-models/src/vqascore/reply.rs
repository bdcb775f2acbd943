//! Generated replies read for an answer option (`--answer-rule generate`), as each suite's
//! official code reads them ([`ReplyReading`], declared by the suite):
//! - NaturalBench's `extract_answer` (the evaluation example of
//!   <https://github.com/Baiqi-Li/NaturalBench>): [`extract_answer`];
//! - VisMin's `is_match_with_label` and `normalize_model_prediction` (`evals/metrics/itm.py`
//!   of <https://github.com/rabiulcste/vismin>): [`label_in_reply`].
//!
//! Python's character classes are followed where they decide a reply: `\w` is a letter, a
//! digit or `_` (`str.isalnum`), `\s` white space including U+001C–U+001F (`str.isspace`).
//! Rust's `is_alphanumeric` also counts the few combining marks Unicode calls alphabetic
//! (Indic vowel signs), which Python's `\w` does not; a reply of such letters next to an option
//! is read as one word here.

pub use benchctl_suites::ReplyReading;

use super::opposite;

/// Whether `reply` gives `answer` as `reading` reads replies.
pub fn names(reading: ReplyReading, reply: &str, answer: &str) -> bool {
    match reading {
        ReplyReading::FirstFound => extract_answer(reply, answer) == Some(true),
        ReplyReading::LabelInReply => label_in_reply(reply, answer),
    }
}

/// The answer a generated `reply` gives, as NaturalBench's official `extract_answer` reads it:
/// the first whole-word occurrence, ignoring case, of `answer` and of its opposite (yes and
/// no, A and B); `Some(true)` when `answer`'s comes first (or alone), `Some(false)` when the
/// opposite's does, `None` when neither is there. Word boundaries are Python's `\b` (letters,
/// digits and `_` are word characters), so an article "a" reads as option A, as there.
pub fn extract_answer(reply: &str, answer: &str) -> Option<bool> {
    let target = answer.trim().to_lowercase();
    let position = |word: &str| first_word(reply, word);
    match (position(&target), position(opposite(&target))) {
        (None, None) => None,
        (Some(a), Some(b)) => Some(a < b),
        (found, _) => Some(found.is_some()),
    }
}

/// Where `word` (lower-case) first occurs in `text` as a whole word, ignoring case.
fn first_word(text: &str, word: &str) -> Option<usize> {
    let is_word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    let lower: Vec<(usize, char)> = text.char_indices().collect();
    let want: Vec<char> = word.chars().collect();
    (0..lower.len()).find_map(|i| {
        let matches = want.len() <= lower.len() - i
            && want.iter().enumerate().all(|(j, w)| lower[i + j].1.to_lowercase().eq(w.to_lowercase()));
        let before = i.checked_sub(1).map(|b| lower[b].1);
        let after = lower.get(i + want.len()).map(|&(_, c)| c);
        (matches && !is_word(before) && !is_word(after)).then_some(lower[i].0)
    })
}

/// Whether `reply` names `label` as VisMin's official `is_match_with_label` reads it: both
/// normalised (as `normalize_model_prediction` does), the reply is the label, holds it as a word, or holds
/// "answer label" anywhere (a substring: "answer about" holds "answer a"). Any other label the
/// reply names does not count against it.
pub fn label_in_reply(reply: &str, label: &str) -> bool {
    let (reply, wanted) = (normalised(reply), normalised(label));
    let phrase = normalised(&format!("ANSWER: {label}"));
    reply == wanted || reply.split(' ').any(|word| !word.is_empty() && word == wanted) || reply.contains(&phrase)
}

/// A text as VisMin's `normalize_model_prediction` leaves it: the inside of its first
/// parentheses on one line, if any; then the first ASCII letter followed by `)`, if any; the
/// first line; without characters that are neither word characters nor white space; white
/// space runs as one space, trimmed; lower-cased.
fn normalised(text: &str) -> String {
    let text = first_parenthesised(text).unwrap_or(text);
    let text = letter_before_paren(text).unwrap_or(text);
    let line = text.split('\n').next().unwrap_or_default();
    let kept: String = line.chars().filter(|&c| is_python_word(c) || is_python_space(c)).collect();
    kept.split(is_python_space).filter(|w| !w.is_empty()).collect::<Vec<_>>().join(" ").to_lowercase()
}

/// Python's `re.search(r"\((.*?)\)", text).group(1)`: the text between the first `(` that a
/// `)` closes on the same line and that `)`.
fn first_parenthesised(text: &str) -> Option<&str> {
    text.match_indices('(').find_map(|(at, _)| {
        let rest = &text[at + 1..];
        let end = rest.find([')', '\n'])?;
        rest[end..].starts_with(')').then(|| &rest[..end])
    })
}

/// Python's `re.search(r"([A-Za-z])\)", text).group(1)`.
fn letter_before_paren(text: &str) -> Option<&str> {
    // ASCII bytes never occur inside a multi-byte UTF-8 character, so a byte scan is exact.
    let at = text.as_bytes().windows(2).position(|w| w[0].is_ascii_alphabetic() && w[1] == b')')?;
    Some(&text[at..at + 1])
}

/// Python's `\w` on a `str`: `str.isalnum()` or `_`.
fn is_python_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Python's `\s` on a `str` (`str.isspace()`): Unicode white space and U+001C–U+001F.
fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_replies_are_read_as_naturalbench_reads_them() {
        assert_eq!(extract_answer("Yes, it is.", "Yes"), Some(true));
        assert_eq!(extract_answer("Yes, it is.", "No"), Some(false));
        assert_eq!(extract_answer("I say no; yes would be wrong", "Yes"), Some(false));
        assert_eq!(extract_answer("Nope. Yesterday.", "Yes"), None, "whole words only");
        assert_eq!(extract_answer("The answer is B.", "B"), Some(true));
        // As the official `\bA\b` with IGNORECASE: the article "a" is option A.
        assert_eq!(extract_answer("It is a dog, so B.", "A"), Some(true));
        assert_eq!(extract_answer("(B)", "A"), Some(false));
        assert_eq!(extract_answer("", "Yes"), None);
    }

    #[test]
    fn a_reply_may_name_both_options_under_vismins_reading_only() {
        let both = "the first image, not the second";
        assert!(names(ReplyReading::LabelInReply, both, "First") && names(ReplyReading::LabelInReply, both, "Second"));
        assert!(names(ReplyReading::FirstFound, both, "First") && !names(ReplyReading::FirstFound, both, "Second"));
        assert_eq!(normalised("  (B ) three\ncups  "), "b");
        // No parentheses close on their line, so the first letter before a `)` is taken.
        assert_eq!(normalised("x(y\n)z) A)"), "z");
    }
}
