//! A `transformers` image processor's settings as benchctl reproduces them: each key read as
//! `transformers`' PIL image processors read it, on top of the architecture's defaults for keys
//! the checkpoint leaves out. They are the whole of `preprocessor_config.json`, or the
//! `image_processor` section of `processor_config.json` (where transformers 5 saves them)
//! ([`ImageSettings`]). Settings benchctl does not reproduce exactly are refused, naming the
//! file and key, rather than approximated: a resample other than bicubic (3) or bilinear (2), a non-square
//! output, `do_resize` false, a centre crop after a two-sided resize.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{ColourKey, Filter, ModeRule, Pipeline, Preprocessor, Resize, RESCALE_1_255};
use crate::hub::{ModelFiles, PROCESSOR_FILE};
use crate::{Error, ErrorKind, Result};

/// An image processor's settings as a checkpoint holds them, with where they are (for errors
/// and run records).
#[derive(Debug, Clone)]
pub struct ImageSettings {
    json: Value,
    path: PathBuf,
    /// The section of the file holding them (`image_processor` in `processor_config.json`).
    section: Option<&'static str>,
}

impl ImageSettings {
    /// The settings in `path`: the `image_processor` section of a `processor_config.json`
    /// (`None` where it has none), else the whole file.
    pub fn read(path: &Path) -> Result<Option<Self>> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::caused_by(ErrorKind::BadConfig, format!("read {}: {e}", path.display()), e))?;
        let json: Value = serde_json::from_str(text.trim_start_matches('\u{feff}'))
            .map_err(|e| Error::caused_by(ErrorKind::BadConfig, format!("parse {}: {e}", path.display()), e))?;
        let in_section = path.file_name().is_some_and(|name| name == PROCESSOR_FILE);
        let (json, section) = match (in_section, json) {
            (true, Value::Object(mut whole)) => match whole.remove("image_processor") {
                None | Some(Value::Null) => return Ok(None),
                Some(section) => (section, Some("image_processor")),
            },
            (_, json) => (json, None),
        };
        let settings = Self { json, path: path.to_path_buf(), section };
        if !settings.json.is_object() {
            return Err(settings.bad_section());
        }
        Ok(Some(settings))
    }

    /// A model's settings ([`ModelFiles::preprocessor`]); `None` where it has none.
    pub fn of(files: &ModelFiles) -> Result<Option<Self>> {
        files.preprocessor.as_deref().map_or(Ok(None), Self::read)
    }

    /// Where they are: the file, and the section within it.
    pub fn origin(&self) -> String {
        match self.section {
            Some(section) => format!("{} (its `{section}`)", self.path.display()),
            None => self.path.display().to_string(),
        }
    }

    /// The file name and section, as run records give them (`processor_config.json:image_processor`).
    pub fn source(&self) -> String {
        let name = self.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        match self.section {
            Some(section) => format!("{name}:{section}"),
            None => name,
        }
    }

    fn bad_section(&self) -> Error {
        Error::new(ErrorKind::BadConfig, format!("read {}: the image settings are not a JSON object", self.origin()))
    }

    /// An error naming the file and `key` (with its section).
    pub fn bad(&self, key: &str, what: String) -> Error {
        let key = match self.section {
            Some(section) => format!("{section}.{key}"),
            None => key.to_string(),
        };
        Error::new(ErrorKind::BadConfig, format!("use {} key `{key}`: {what}", self.path.display()))
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.json.get(key).filter(|v| !v.is_null())
    }

    fn flag(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(self.bad(key, format!("expected true or false, got {other}"))),
        }
    }

    /// Whether the image processor runs `convert_to_rgb` (`do_convert_rgb`): absent, the
    /// processors' default (true); `null`, false, as `transformers` then skips it.
    pub fn converts_rgb(&self) -> Result<bool> {
        self.converts_rgb_or(true)
    }

    /// [`ImageSettings::converts_rgb`] for a processor whose own default is `absent` (false
    /// for `Siglip2ImageProcessor`, which declares none).
    pub fn converts_rgb_or(&self, absent: bool) -> Result<bool> {
        match self.json.get("do_convert_rgb") {
            None => Ok(absent),
            Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(self.bad("do_convert_rgb", format!("expected true, false or null, got {other}"))),
        }
    }

    /// The [`ModeRule`] of a family whose reference opens images with `convert("RGB")` and
    /// then feeds them to this image processor: its transparent colours kept where the
    /// processor does not convert; `rule` unchanged otherwise.
    pub fn mode_rule(&self, rule: ModeRule) -> Result<ModeRule> {
        Ok(match rule {
            ModeRule::ConvertFirst { .. } if !self.converts_rgb()? => {
                ModeRule::ConvertFirst { colour_key: ColourKey::Kept }
            }
            other => other,
        })
    }

    /// Three numbers (or one, for all three channels), `default` where absent.
    pub fn triple(&self, key: &str, default: [f32; 3]) -> Result<[f32; 3]> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::Array(a)) if a.len() == 3 && a.iter().all(Value::is_number) => {
                Ok([0, 1, 2].map(|i| a[i].as_f64().unwrap_or_default() as f32))
            }
            Some(Value::Number(n)) => Ok([n.as_f64().unwrap_or_default() as f32; 3]),
            Some(other) => Err(self.bad(key, format!("expected three numbers, got {other}"))),
        }
    }
}

/// A size as `preprocessor_config.json` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Extent {
    /// `{"shortest_edge": n}` (or an integer, for a processor that crops).
    ShortestEdge(usize),
    /// `{"height": h, "width": w}` (or an integer `n` for `n × n`).
    Box(usize, usize),
}

/// The keys of one image processor's settings, as one processor reads them.
struct Keys<'a> {
    settings: &'a ImageSettings,
    /// Whether an integer `size` is a shortest edge (a processor that crops: CLIP).
    crops_by_default: bool,
}

impl Keys<'_> {
    fn bad(&self, key: &str, what: String) -> Error {
        self.settings.bad(key, what)
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.settings.get(key)
    }

    fn flag(&self, key: &str, default: bool) -> Result<bool> {
        self.settings.flag(key, default)
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
        self.settings.triple(key, default)
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

    /// A patch budget's resize (`Siglip2ImageProcessor`): `patch_size` and `max_num_patches`,
    /// each the default where absent; the side it gives is the patch's.
    fn patches(&self, patch: usize, max_patches: usize) -> Result<(Resize, usize)> {
        let read = |key: &str, default: usize| self.get(key).map_or(Ok(default), |v| self.number(v, key));
        let patch = read("patch_size", patch)?;
        let max_patches = read("max_num_patches", max_patches)?;
        // The largest image the budget allows must stay within the resize's pixel bound.
        if (max_patches as u64).saturating_mul((patch * patch) as u64) > super::MAX_RESIZED_PIXELS {
            return Err(self.bad("max_num_patches", format!("{max_patches} patches of {patch} px is too many pixels")));
        }
        Ok((Resize::Patches { patch, max_patches }, patch))
    }

    /// The resize and the square side it gives, from `size` and (with `do_center_crop`)
    /// `crop_size`.
    fn resize(&self, defaults: &Preprocessor) -> Result<(Resize, usize)> {
        if let Resize::Patches { patch, max_patches } = defaults.resize {
            return self.patches(patch, max_patches);
        }
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

/// The preprocessing `settings` ask for on top of `defaults`.
pub(crate) fn read(settings: &ImageSettings, defaults: &Preprocessor) -> Result<Preprocessor> {
    let keys = Keys { settings, crops_by_default: defaults.resize == Resize::ShorterSideThenCrop };
    // Pillow's filters by number; absent means the processors' default, bicubic.
    let filter = match keys.get("resample").map(|r| (r, r.as_u64())) {
        None | Some((_, Some(3))) => Filter::Bicubic,
        Some((_, Some(2))) => Filter::Bilinear,
        Some((resample, _)) => {
            return Err(keys.bad(
                "resample",
                format!("{resample} is not supported: benchctl reproduces Pillow's bicubic (3) and bilinear (2)"),
            ))
        }
    };
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
        filter,
        modes: settings.mode_rule(defaults.modes)?,
        square_canvas: defaults.square_canvas,
    })
}
