//! Text from run records (model names, descriptions, URLs, suite ids: what a user typed or a
//! results directory holds) made safe to put into generated markdown: it can neither break a
//! table nor inject HTML, links or formatting.

/// `text` as literal markdown inside a table cell or a heading: HTML's special characters as
/// entities, what could start a link, an image, a code span or a new cell backslash-escaped,
/// line breaks as spaces.
pub fn text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            // A link or image needs `[`, a code span a backtick, a cell a `|`; emphasis
            // (`*`, `_`) can only restyle the text, so names like `text_score` stay as typed.
            '\\' | '|' | '`' | '[' | ']' => {
                out.push('\\');
                out.push(c);
            }
            '\n' | '\r' | '\t' => out.push(' '),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// `url` as a link target, if it is an `http` or `https` URL (any other scheme, such as
/// `javascript:` or `data:`, gives none); every character that could end the target or the
/// table cell is percent-encoded.
pub fn link_target(url: &str) -> Option<String> {
    let lower = url.trim().to_ascii_lowercase();
    if !(lower.starts_with("https://") || lower.starts_with("http://")) {
        return None;
    }
    let mut out = String::with_capacity(url.len());
    for byte in url.trim().bytes() {
        match byte {
            b'(' | b')' | b'<' | b'>' | b'"' | b'\'' | b'|' | b'\\' | b'`' | b' ' | b'[' | b']' => {
                out.push_str(&format!("%{byte:02X}"))
            }
            0..=0x1F | 0x7F..=0xFF => out.push_str(&format!("%{byte:02X}")),
            _ => out.push(char::from(byte)),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_stays_text() {
        assert_eq!(text("clip-vit-b32"), "clip-vit-b32");
        assert_eq!(text("a|b\nc"), "a\\|b c");
        assert_eq!(text("text_score (itm)"), "text_score (itm)");
        assert_eq!(text("<script>alert(1)</script>"), "&lt;script&gt;alert(1)&lt;/script&gt;");
        assert_eq!(text("![x](javascript:alert(1))"), "!\\[x\\](javascript:alert(1))");
        assert_eq!(text("`code` a\\b"), "\\`code\\` a\\\\b");
    }

    #[test]
    fn only_web_links_are_links() {
        assert_eq!(link_target("https://example.org/m?a=1").as_deref(), Some("https://example.org/m?a=1"));
        assert_eq!(link_target("javascript:alert(1)"), None);
        assert_eq!(link_target(" JavaScript:alert(1)"), None);
        assert_eq!(link_target("data:text/html,<script>"), None);
        assert_eq!(
            link_target("https://e.org/x) [y](javascript:z").as_deref(),
            Some("https://e.org/x%29%20%5By%5D%28javascript:z")
        );
        assert_eq!(link_target("https://e.org/a|b\nc").as_deref(), Some("https://e.org/a%7Cb%0Ac"));
        assert_eq!(link_target("https://e.org/é").as_deref(), Some("https://e.org/%C3%A9"));
    }
}
