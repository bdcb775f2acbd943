//! Templates of a manifest: text with `{field}` placeholders filled from one record.
//!
//! A field is a path of dot-separated segments: a key of an object, or the index of a list
//! element (`{attributes.0}`, or `{1.Statement}` for the second record of a group). Two
//! names are the loader's own: `{_index}`, the item's position in its file (from 0), `{_key}`,
//! the key of a record in a JSON object keyed by id, and `{_source}`, the stem of the file it
//! came from. `{field|basename}` keeps the text after the field's last `/` (a file name from a
//! URL). `{{` and `}}` are literal braces.

use serde_json::Value;

/// What is wrong with a template, or with filling it from a record: the callers add the
/// manifest key and the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TemplateError(String);

impl std::fmt::Display for TemplateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for TemplateError {
    fn from(what: String) -> Self {
        TemplateError(what)
    }
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Template {
    pieces: Vec<Piece>,
}

#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Literal(String),
    Field(Vec<String>, Option<Filter>),
}

/// What a field's text goes through before it is used (`{field|basename}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Filter {
    /// The text after its last `/`: a file name from a URL or a path (Cola's image links).
    Basename,
}

impl Filter {
    fn parse(name: &str) -> Option<Filter> {
        match name {
            "basename" => Some(Filter::Basename),
            _ => None,
        }
    }

    fn apply(self, text: String) -> String {
        match self {
            Filter::Basename => text.rsplit('/').next().unwrap_or_default().to_string(),
        }
    }
}

/// What a template is filled from: one record (or a group's records, as a list) and where
/// it sits.
pub(crate) struct Record<'a> {
    pub value: &'a Value,
    pub index: usize,
    pub key: Option<&'a str>,
    /// The stem of the annotation file it came from.
    pub source: &'a str,
}

impl Template {
    /// Parses `text`; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    literal.push('}');
                }
                '}' => return Err(format!("`}}` without its `{{` in {text:?} (write `}}}}` for a brace)").into()),
                '{' => {
                    let mut field = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some('{') | None => return Err(format!("unclosed `{{` in {text:?}").into()),
                            Some(c) => field.push(c),
                        }
                    }
                    let (name, filter) = match field.split_once('|') {
                        None => (field.as_str(), None),
                        Some((name, filter)) => match Filter::parse(filter.trim()) {
                            Some(f) => (name, Some(f)),
                            None => {
                                return Err(format!(
                                    "unknown filter `{}` in `{{{field}}}` of {text:?} (known: basename)",
                                    filter.trim()
                                )
                                .into())
                            }
                        },
                    };
                    let path: Vec<String> = name.trim().split('.').map(|s| s.trim().to_string()).collect();
                    if path.iter().any(String::is_empty) {
                        return Err(format!("empty field name in `{{{field}}}` of {text:?}").into());
                    }
                    if !literal.is_empty() {
                        pieces.push(Piece::Literal(std::mem::take(&mut literal)));
                    }
                    pieces.push(Piece::Field(path, filter));
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            pieces.push(Piece::Literal(literal));
        }
        Ok(Template { pieces })
    }

    /// The template filled from `record`; the error names the field.
    pub fn render(&self, record: &Record<'_>) -> Result<String, TemplateError> {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Literal(text) => out.push_str(text),
                Piece::Field(path, None) => out.push_str(&field_text(record, path)?),
                Piece::Field(path, Some(filter)) => out.push_str(&filter.apply(field_text(record, path)?)),
            }
        }
        Ok(out)
    }

    /// The single field a template made only of `{field}` names, for fields that hold a list.
    pub fn lone_field(&self) -> Option<&[String]> {
        match self.pieces.as_slice() {
            [Piece::Field(path, None)] => Some(path),
            _ => None,
        }
    }
}

/// The value at `path` in the record.
pub(crate) fn lookup<'a>(record: &'a Record<'_>, path: &[String]) -> Result<&'a Value, TemplateError> {
    let mut value = record.value;
    for (depth, segment) in path.iter().enumerate() {
        let so_far = || path[..=depth].join(".");
        value = match value {
            Value::Object(map) => map.get(segment).ok_or_else(|| format!("the record has no field `{}`", so_far()))?,
            Value::Array(list) => {
                let index: usize = segment
                    .parse()
                    .map_err(|_| format!("`{}`: `{segment}` indexes a list, so it must be a number", so_far()))?;
                list.get(index).ok_or_else(|| format!("`{}`: the list has {} element(s)", so_far(), list.len()))?
            }
            other => {
                return Err(format!("`{}`: `{}` is {}, not an object or list", so_far(), segment, kind(other)).into())
            }
        };
    }
    Ok(value)
}

fn field_text(record: &Record<'_>, path: &[String]) -> Result<String, TemplateError> {
    if let [name] = path {
        match name.as_str() {
            "_index" => return Ok(record.index.to_string()),
            "_source" => return Ok(record.source.to_string()),
            "_key" => {
                return record.key.map(str::to_string).ok_or_else(|| {
                    TemplateError(
                        "`{_key}` is only defined for a JSON object keyed by id (`format = \"json\"` with an object)"
                            .to_string(),
                    )
                })
            }
            _ => {}
        }
    }
    scalar_text(lookup(record, path)?)
        .map_err(|what| TemplateError(format!("`{}` is {what}, not text or a number", path.join("."))))
}

/// A scalar as a template writes it: text as is, a number as JSON writes it (as Python's
/// `str` does for the integers and floats of annotation files).
pub(crate) fn scalar_text(value: &Value) -> Result<String, &'static str> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        other => Err(kind(other)),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(template: &str, value: Value) -> Result<String, String> {
        let parsed = Template::parse(template).map_err(|e| e.to_string())?;
        parsed.render(&Record { value: &value, index: 7, key: Some("k"), source: "file" }).map_err(|e| e.to_string())
    }

    #[test]
    fn fields_lists_groups_and_escapes() {
        let record = serde_json::json!({"a": {"b": 3}, "l": ["x", 2.5], "s": "t"});
        assert_eq!(render("{a.b}-{l.0}-{l.1}-{s}", record.clone()), Ok("3-x-2.5-t".to_string()));
        assert_eq!(render("{{{_index}}} {_key}", record.clone()), Ok("{7} k".to_string()));
        let group = serde_json::json!([{"q": "one"}, {"q": "two"}]);
        assert_eq!(render("{0.q}/{1.q}", group), Ok("one/two".to_string()));
        assert!(render("{missing}", record.clone()).unwrap_err().contains("no field `missing`"));
        assert!(render("{l.5}", record.clone()).unwrap_err().contains("2 element(s)"));
        assert!(render("{a}", record).unwrap_err().contains("an object"));
        assert!(Template::parse("{open").unwrap_err().to_string().contains("unclosed"));
        assert!(Template::parse("x}").unwrap_err().to_string().contains("without its"));
        assert!(Template::parse("{a..b}").unwrap_err().to_string().contains("empty field"));
        let url = serde_json::json!(["https://host/data/vg_gqa_images/2390970.jpg"]);
        assert_eq!(render("{0|basename}", url.clone()), Ok("2390970.jpg".to_string()));
        assert_eq!(render("{_source|basename}", url.clone()), Ok("file".to_string()));
        assert!(render("{0|upper}", url).unwrap_err().contains("unknown filter `upper`"));
    }
}
