//! Templates of a manifest: text with `{field}` placeholders filled from one record.
//!
//! A field is a path of dot-separated segments: a key of an object, or the index of a list
//! element (`{attributes.0}`, or `{1.Statement}` for the second record of a group). Two
//! names are the loader's own: `{_index}`, the item's position in its file (from 0),
//! `{_element}`, its element of the record's lists with `source.expand`, `{_key}`,
//! the key of a record in a JSON object keyed by id, and `{_source}`, the stem of the file it
//! came from. Filters after `|` change a field's text, in order: `basename` (after the last
//! `/`), `stem` (the file name without its extension), `part:SEP:INDEX` (Python's
//! `text.split(SEP)[INDEX]`), `map:FROM=TO,…` (a text the map does not name is an error),
//! `zfill:WIDTH` (Python's `str.zfill`).
//! `{{` and `}}` are literal braces.

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
    Field(Vec<String>, Vec<Filter>),
}

/// What a field's text goes through before it is used, in order (`{field|stem|part:_:0}`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Filter {
    /// The text after its last `/`: a file name from a URL or a path (Cola's image links).
    Basename,
    /// The file name without its extension (after the last `/`, before the last `.`).
    Stem,
    /// Piece `index` of the text split at `separator` (from the end when negative), as
    /// Python's `text.split(separator)[index]`.
    Part { separator: String, index: isize },
    /// The value the text maps to; a text the map does not name is an error.
    Map(Vec<(String, String)>),
    /// Zeros on the left up to this width, as Python's `str.zfill` (COCO's file names).
    Zfill(usize),
    /// `true` where the text holds this text, else `false` (Python's `in`: ImageCoDe's static
    /// image sets are those whose name holds `open-images`).
    Has(String),
}

impl Filter {
    const KNOWN: &'static str = "basename, stem, part:SEPARATOR:INDEX, map:FROM=TO,…, zfill:WIDTH, has:TEXT";

    fn parse(spec: &str) -> Option<Filter> {
        let (name, args) = spec.split_once(':').unwrap_or((spec, ""));
        match name.trim() {
            "basename" if args.is_empty() => Some(Filter::Basename),
            "stem" if args.is_empty() => Some(Filter::Stem),
            "part" => {
                let (separator, index) = args.rsplit_once(':')?;
                let index = index.trim().parse().ok()?;
                (!separator.is_empty()).then(|| Filter::Part { separator: separator.to_string(), index })
            }
            "zfill" => args.trim().parse().ok().map(Filter::Zfill),
            "has" if !args.is_empty() => Some(Filter::Has(args.to_string())),
            "map" => {
                let pairs: Option<Vec<(String, String)>> = args
                    .split(',')
                    .map(|pair| pair.split_once('=').map(|(from, to)| (from.trim().to_string(), to.trim().to_string())))
                    .collect();
                pairs.filter(|p| !p.is_empty()).map(Filter::Map)
            }
            _ => None,
        }
    }

    fn apply(&self, text: String) -> Result<String, TemplateError> {
        let basename = |t: &str| t.rsplit('/').next().unwrap_or_default().to_string();
        Ok(match self {
            Filter::Basename => basename(&text),
            Filter::Stem => {
                let name = basename(&text);
                match name.rsplit_once('.') {
                    Some((stem, _)) if !stem.is_empty() => stem.to_string(),
                    _ => name,
                }
            }
            Filter::Part { separator, index } => {
                let parts: Vec<&str> = text.split(separator.as_str()).collect();
                let at = if *index < 0 { parts.len() as isize + index } else { *index };
                match usize::try_from(at).ok().and_then(|at| parts.get(at)) {
                    Some(part) => part.to_string(),
                    None => {
                        return Err(format!(
                            "{text:?} has {} part(s) split at {separator:?}, not part {index}",
                            parts.len()
                        )
                        .into())
                    }
                }
            }
            Filter::Zfill(width) => {
                let (sign, digits) = match text.strip_prefix(['-', '+']) {
                    Some(rest) => (&text[..1], rest),
                    None => ("", text.as_str()),
                };
                let pad = width.saturating_sub(text.chars().count());
                format!("{sign}{}{digits}", "0".repeat(pad))
            }
            Filter::Has(part) => text.contains(part.as_str()).to_string(),
            Filter::Map(pairs) => match pairs.iter().find(|(from, _)| *from == text) {
                Some((_, to)) => to.clone(),
                None => {
                    let known: Vec<&str> = pairs.iter().map(|(from, _)| from.as_str()).collect();
                    return Err(format!("{text:?} is not one the map names ({})", known.join(", ")).into());
                }
            },
        })
    }
}

/// What a template is filled from: one record (or a group's records, as a list) and where
/// it sits.
pub(crate) struct Record<'a> {
    pub value: &'a Value,
    /// With `source.expand`: each expanded list's path and the element standing for it.
    pub overrides: &'a [(&'a [String], &'a Value)],
    pub index: usize,
    pub key: Option<&'a str>,
    /// The stem of the annotation file it came from.
    pub source: &'a str,
    /// With `source.expand`: which element of the record's expanded lists this item is.
    pub element: Option<usize>,
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
                    let mut specs = field.split('|');
                    let name = specs.next().unwrap_or_default();
                    let filters = specs
                        .map(|spec| {
                            Filter::parse(spec).ok_or_else(|| {
                                TemplateError(format!(
                                    "unknown filter `{}` in `{{{field}}}` of {text:?} (known: {})",
                                    spec.trim(),
                                    Filter::KNOWN
                                ))
                            })
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    let path: Vec<String> = name.trim().split('.').map(|s| s.trim().to_string()).collect();
                    if path.iter().any(String::is_empty) {
                        return Err(format!("empty field name in `{{{field}}}` of {text:?}").into());
                    }
                    if !literal.is_empty() {
                        pieces.push(Piece::Literal(std::mem::take(&mut literal)));
                    }
                    pieces.push(Piece::Field(path, filters));
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
                Piece::Field(path, filters) => {
                    let mut text = field_text(record, path)?;
                    for filter in filters {
                        text = filter.apply(text)?;
                    }
                    out.push_str(&text);
                }
            }
        }
        Ok(out)
    }

    /// The single field a template made only of `{field}` names, for fields that hold a list.
    pub fn lone_field(&self) -> Option<&[String]> {
        match self.pieces.as_slice() {
            [Piece::Field(path, filters)] if filters.is_empty() => Some(path),
            _ => None,
        }
    }
}

/// The value at `path` in the record.
pub(crate) fn lookup<'a>(record: &'a Record<'_>, path: &[String]) -> Result<&'a Value, TemplateError> {
    // Under an expanded list's path, its element stands for the list.
    let (mut value, start) = record
        .overrides
        .iter()
        .find(|(over, _)| path.starts_with(over))
        .map_or((record.value, 0), |(over, element)| (*element, over.len()));
    for (depth, segment) in path.iter().enumerate().skip(start) {
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
            "_element" => {
                return record
                    .element
                    .map(|e| e.to_string())
                    .ok_or_else(|| TemplateError("`{_element}` is only defined with `source.expand`".to_string()))
            }
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
        parsed
            .render(&Record { value: &value, overrides: &[], index: 7, key: Some("k"), source: "file", element: None })
            .map_err(|e| e.to_string())
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
        assert_eq!(render("{_source|has:fi|map:true=yes,false=no}", url.clone()), Ok("yes".to_string()));
        assert_eq!(render("{_source|has:open-images}", url.clone()), Ok("false".to_string()));
        assert!(render("{0|upper}", url).unwrap_err().contains("unknown filter `upper`"));
        // What'sUp's file names carry the objects and the preposition.
        let path = serde_json::json!({"p": "data/controlled_images/beer-bottle_left_of_armchair.jpeg"});
        assert_eq!(render("{p|stem}", path.clone()), Ok("beer-bottle_left_of_armchair".to_string()));
        assert_eq!(
            render("{p|stem|part:_:0}+{p|stem|part:_:-1}", path.clone()),
            Ok("beer-bottle+armchair".to_string())
        );
        let axis = "{p|stem|part:_:1|map:left=x,right=x,on=y,under=y}";
        assert_eq!(render(axis, path.clone()), Ok("x".to_string()));
        assert!(render("{p|stem|part:_:9}", path.clone()).unwrap_err().contains("not part 9"));
        assert!(render("{p|stem|part:_:2|map:left=x}", path.clone())
            .unwrap_err()
            .contains("\"of\" is not one the map names"));
        assert!(render("{p|part:_}", path).unwrap_err().contains("unknown filter `part:_`"));
        let id = serde_json::json!([139, "-42"]);
        assert_eq!(render("{0|zfill:12}.jpg", id.clone()), Ok("000000000139.jpg".to_string()));
        assert_eq!(render("{1|zfill:5}", id), Ok("-0042".to_string()));
    }
}
