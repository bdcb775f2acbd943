//! A list of Python string literals as `str(list)` writes it into a CSV cell (`['a', "b's"]`),
//! read as Python's `ast.literal_eval` reads it: CREPE's hard negatives.

/// The strings of `text`, a Python list literal of string literals; `None` when it is not one.
pub(crate) fn python_strings(text: &str) -> Option<Vec<String>> {
    let mut chars = text.trim().chars().peekable();
    if chars.next()? != '[' {
        return None;
    }
    let mut out = Vec::new();
    loop {
        skip_spaces(&mut chars);
        match chars.peek()? {
            ']' => {
                chars.next();
                break;
            }
            '\'' | '"' => out.push(string_literal(&mut chars)?),
            _ => return None,
        }
        skip_spaces(&mut chars);
        match chars.next()? {
            ',' => continue,
            ']' => break,
            _ => return None,
        }
    }
    skip_spaces(&mut chars);
    chars.next().is_none().then_some(out)
}

fn skip_spaces(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while chars.peek().is_some_and(|c| c.is_whitespace()) {
        chars.next();
    }
}

/// One `'…'` or `"…"` literal with Python's escapes (`\\`, `\'`, `\"`, `\n`, `\t`, `\r`,
/// `\xNN`, `\uNNNN`, `\UNNNNNNNN`).
fn string_literal(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Option<String> {
    let quote = chars.next()?;
    let mut out = String::new();
    loop {
        match chars.next()? {
            c if c == quote => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                '0' => out.push('\0'),
                'x' => out.push(hex_char(chars, 2)?),
                'u' => out.push(hex_char(chars, 4)?),
                'U' => out.push(hex_char(chars, 8)?),
                c @ ('\\' | '\'' | '"') => out.push(c),
                other => {
                    // Python keeps an unknown escape as it is.
                    out.push('\\');
                    out.push(other);
                }
            },
            '\n' => return None,
            c => out.push(c),
        }
    }
}

fn hex_char(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, digits: usize) -> Option<char> {
    let hex: String = (0..digits).map(|_| chars.next()).collect::<Option<String>>()?;
    char::from_u32(u32::from_str_radix(&hex, 16).ok()?)
}

#[cfg(test)]
mod tests {
    use super::python_strings;

    #[test]
    fn python_list_literals_read_as_literal_eval_reads_them() {
        let s = |v: &[&str]| Some(v.iter().map(|x| x.to_string()).collect::<Vec<_>>());
        assert_eq!(python_strings("['a dog', 'a cat']"), s(&["a dog", "a cat"]));
        assert_eq!(python_strings(r#"["the dog's ball", 'say "hi"']"#), s(&["the dog's ball", "say \"hi\""]));
        assert_eq!(python_strings(r"['a\\b', 'it\'s', '\xe9t\u00e9']"), s(&["a\\b", "it's", "été"]));
        assert_eq!(python_strings(" [ ] "), s(&[]));
        assert_eq!(python_strings("['a',]"), s(&["a"]));
        for bad in ["", "a", "['a'", "['a' 'b']", "[1, 2]", "['a'] x", "{'a'}"] {
            assert_eq!(python_strings(bad), None, "{bad:?}");
        }
    }
}
