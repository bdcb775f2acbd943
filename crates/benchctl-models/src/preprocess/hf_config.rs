//! A `transformers` image processor's settings (`preprocessor_config.json`) as benchctl
//! reproduces them: each key read as `transformers`' PIL image processors read it, on top of
//! the architecture's defaults for keys the file leaves out. Settings benchctl does not
//! reproduce exactly are refused, naming the file and key, rather than approximated: a
//! resample other than bicubic (3), a non-square output, `do_resize` false, a centre crop after
//! a two-sided resize.

use serde_json::Value;

use super::{Filter, Pipeline, Preprocessor, Resize, RESCALE_1_255};
use crate::{Error, ErrorKind, Result};

/// A size as `preprocessor_config.json` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Extent {
    /// `{"shortest_edge": n}` (or an integer, for a processor that crops).
    ShortestEdge(usize),
    /// `{"height": h, "width": w}` (or an integer `n` for `n × n`).
    Box(usize, usize),
}

/// The keys of one image processor's settings, naming the file they came from in errors.
struct Keys<'a> {
    json: &'a Value,
    /// The file (and section) the keys are in, for messages.
    origin: String,
    /// Whether an integer `size` is a shortest edge (a processor that crops: CLIP).
    crops_by_default: bool,
}

impl Keys<'_> {
    fn bad(&self, key: &str, what: String) -> Error {
        Error::new(ErrorKind::BadConfig, format!("read {} key `{key}`: {what}", self.origin))
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.json.get(key).filter(|v| !v.is_null())
    }

    fn flag(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(self.bad(key, format!("expected true or false, got {other}"))),
        }
    }

    fn number(&self, v: &Value, key: &str) -> Result<usize> {
        v.as_u64()
            .filter(|&n| n > 0)
            .map(|n| n as usize)
            .ok_or_else(|| self.bad(key, format!("expected a positive integer, got {v}")))
    }

    /// `{"shortest_edge": n}`, `{"height": h, "width": w}`, or an integer: a shortest edge for
    /// a processor that crops (CLIP), a square otherwise and for crops, as `transformers`'
    /// `get_size_dict` reads it (`default_to_square`).
    fn extent(&self, key: &str) -> Result<Option<Extent>> {
        match self.get(key) {
            None => Ok(None),
            Some(v @ Value::Number(_)) if key == "size" && self.crops_by_default => {
                Ok(Some(Extent::ShortestEdge(self.number(v, key)?)))
            }
            Some(v @ Value::Number(_)) => {
                let n = self.number(v, key)?;
                Ok(Some(Extent::Box(n, n)))
            }
            Some(Value::Object(m)) => {
                if let Some(edge) = m.get("shortest_edge") {
                    return Ok(Some(Extent::ShortestEdge(self.number(edge, &format!("{key}.shortest_edge"))?)));
                }
                match (m.get("height"), m.get("width")) {
                    (Some(h), Some(w)) => Ok(Some(Extent::Box(
                        self.number(h, &format!("{key}.height"))?,
                        self.number(w, &format!("{key}.width"))?,
                    ))),
                    _ => Err(self.bad(key, "expected {\"shortest_edge\": n} or {\"height\": h, \"width\": w}".into())),
                }
            }
            Some(other) => Err(self.bad(key, format!("expected a size, got {other}"))),
        }
    }

    fn triple(&self, key: &str, default: [f32; 3]) -> Result<[f32; 3]> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::Array(a)) if a.len() == 3 && a.iter().all(Value::is_number) => {
                Ok([0, 1, 2].map(|i| a[i].as_f64().unwrap_or_default() as f32))
            }
            Some(Value::Number(n)) => Ok([n.as_f64().unwrap_or_default() as f32; 3]),
            Some(other) => Err(self.bad(key, format!("expected three numbers, got {other}"))),
        }
    }

    /// The rescale factor (1 without `do_rescale`).
    fn rescale_factor(&self) -> Result<f64> {
        if !self.flag("do_rescale", true)? {
            return Ok(1.0);
        }
        self.get("rescale_factor").map_or(Ok(RESCALE_1_255), |v| {
            v.as_f64()
                .filter(|f| f.is_finite() && *f > 0.0)
                .ok_or_else(|| self.bad("rescale_factor", format!("expected a positive number, got {v}")))
        })
    }

    /// The resize and the square side it gives, from `size` and (with `do_center_crop`)
    /// `crop_size`.
    fn resize(&self, defaults: &Preprocessor) -> Result<(Resize, usize)> {
        let crop = if self.flag("do_center_crop", self.crops_by_default)? { self.extent("crop_size")? } else { None };
        match (self.extent("size")?, crop) {
            (Some(Extent::ShortestEdge(edge)), Some(Extent::ShortestEdge(c))) if c <= edge => {
                Ok((Resize::ShorterSide(edge), c))
            }
            (Some(Extent::ShortestEdge(edge)), Some(Extent::Box(h, w))) if h == w && h <= edge => {
                Ok((Resize::ShorterSide(edge), h))
            }
            (Some(Extent::Box(h, w)), None) if h == w => Ok((Resize::Stretch, h)),
            (None, _) => Ok((defaults.resize, defaults.size)),
            (size, crop) => Err(self
                .bad("size", format!("{size:?} with crop {crop:?} does not give a square input benchctl reproduces"))),
        }
    }
}

/// The preprocessing `path` asks for on top of `defaults`.
pub(super) fn read(path: &std::path::Path, defaults: &Preprocessor) -> Result<Preprocessor> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::new(ErrorKind::BadConfig, format!("read {}: {e}", path.display())))?;
    let json: Value = serde_json::from_str(text.trim_start_matches('\u{feff}'))
        .map_err(|e| Error::new(ErrorKind::BadConfig, format!("parse {}: {e}", path.display())))?;
    let keys = Keys {
        json: &json,
        origin: path.display().to_string(),
        crops_by_default: defaults.resize == Resize::ShorterSideThenCrop,
    };
    if let Some(resample) = keys.get("resample") {
        if resample.as_u64() != Some(3) {
            return Err(keys.bad(
                "resample",
                format!("{resample} is not supported: benchctl reproduces Pillow's bicubic (3) only"),
            ));
        }
    }
    if !keys.flag("do_resize", true)? {
        return Err(keys.bad("do_resize", "false is not supported: the model needs a fixed input size".into()));
    }
    let rescale_factor = keys.rescale_factor()?;
    let (mean, std) = if keys.flag("do_normalize", true)? {
        (keys.triple("image_mean", defaults.mean)?, keys.triple("image_std", defaults.std)?)
    } else {
        ([0.0; 3], [1.0; 3])
    };
    if let Some(zero) = std.iter().position(|s| *s == 0.0 || !s.is_finite()) {
        return Err(keys.bad("image_std", format!("entry {zero} must be a non-zero finite number")));
    }
    let (resize, size) = keys.resize(defaults)?;
    Ok(Preprocessor {
        size,
        resize,
        mean,
        std,
        pipeline: Pipeline::Transformers { rescale_factor },
        filter: Filter::Bicubic,
    })
}
