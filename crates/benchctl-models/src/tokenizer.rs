//! CLIP tokenisation through a `tokenizer.json` (Hugging Face `tokenizers` format):
//! byte-level BPE over OpenAI's 49,408-token vocabulary, `<|startoftext|>` … `<|endoftext|>`,
//! truncated to the context length keeping the end token, as `CLIPTokenizer(...,
//! truncation=True, max_length=77)` does.
//!
//! OpenAI's reference tokenizer also unescapes HTML entities (twice) before tokenising;
//! `tokenizer.json` cannot express that, so it is done here for the entities that occur in
//! captions (`&amp; &lt; &gt; &quot; &apos; &#39; &nbsp;`, decimal and hex references).
//! OpenAI's `ftfy.fix_text` mojibake repair is not reproduced: it changes nothing on
//! well-formed UTF-8.

use std::path::Path;

use crate::{Error, ErrorKind, Result};

/// A CLIP tokenizer with its context length.
#[derive(Clone)]
pub struct ClipTokenizer {
    inner: tokenizers::Tokenizer,
    max_len: usize,
    bos: u32,
    eos: u32,
}

impl std::fmt::Debug for ClipTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClipTokenizer").field("max_len", &self.max_len).finish()
    }
}

pub const START_OF_TEXT: &str = "<|startoftext|>";
pub const END_OF_TEXT: &str = "<|endoftext|>";

impl ClipTokenizer {
    /// Loads `tokenizer.json`; `max_len` is the text model's `max_position_embeddings`.
    pub fn from_file(path: &Path, max_len: usize) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_file(path).map_err(|e| {
            Error::new(ErrorKind::Tokenizer, format!("load tokenizer {}: {e}", path.display()))
        })?;
        let token = |name: &str| {
            inner.token_to_id(name).ok_or_else(|| {
                Error::new(
                    ErrorKind::Tokenizer,
                    format!("load tokenizer {}: it has no `{name}` token", path.display()),
                )
            })
        };
        let bos = token(START_OF_TEXT)?;
        let eos = token(END_OF_TEXT)?;
        if max_len < 2 {
            return Err(Error::new(ErrorKind::Tokenizer, format!("use a context length of {max_len}: at least 2 is needed")));
        }
        Ok(Self { inner, max_len, bos, eos })
    }

    pub fn eos(&self) -> u32 {
        self.eos
    }

    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// `[bos, tokens…, eos]`, at most `max_len` ids; a longer text keeps its first
    /// `max_len − 2` tokens and the end token.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let text = unescape_html(&unescape_html(text));
        let encoding = self.inner.encode(text.as_str(), false).map_err(|e| {
            Error::new(ErrorKind::Tokenizer, format!("tokenise {text:?}: {e}"))
        })?;
        let body = encoding.get_ids();
        let keep = body.len().min(self.max_len - 2);
        let mut ids = Vec::with_capacity(keep + 2);
        ids.push(self.bos);
        ids.extend_from_slice(&body[..keep]);
        ids.push(self.eos);
        Ok(ids)
    }
}

/// Python's `html.unescape` for the common entities and numeric character references.
pub fn unescape_html(text: &str) -> String {
    if !text.contains('&') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let end = rest[1..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '#')).map(|i| i + 1);
        let (name, consumed) = match end {
            Some(e) if rest[e..].starts_with(';') => (&rest[1..e], e + 1),
            Some(e) => (&rest[1..e], e),
            None => (&rest[1..], rest.len()),
        };
        let decoded = match name {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            "nbsp" => Some('\u{a0}'),
            _ => name.strip_prefix('#').and_then(|num| {
                let code = match num.strip_prefix(['x', 'X']) {
                    Some(hex) => u32::from_str_radix(hex, 16).ok(),
                    None => num.parse().ok(),
                };
                code.and_then(char::from_u32)
            }),
        };
        match decoded {
            Some(c) if !name.is_empty() => {
                out.push(c);
                rest = &rest[consumed..];
            }
            _ => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::unescape_html;

    #[test]
    fn unescapes_entities_like_python() {
        assert_eq!(unescape_html("fish &amp; chips &lt;3"), "fish & chips <3");
        assert_eq!(unescape_html("&#39;quoted&#x27; &quot;x&quot;"), "'quoted' \"x\"");
        assert_eq!(unescape_html("AT&T & co &unknown; &"), "AT&T & co &unknown; &");
        assert_eq!(unescape_html(&unescape_html("&amp;amp;")), "&");
    }
}
