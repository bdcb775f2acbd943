//! `benchctl score`: a suite's metrics from scores produced elsewhere, e.g. by a PyTorch
//! model outside the zoo. Every item must be scored exactly once; an unknown item or label,
//! a missing item or pair, or a non-finite score is an error naming the offending entry.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use benchctl_scoring::{Report, ScoreKind, ScoreTensor};
use benchctl_suites::Suite;
use serde_json::Value;

use crate::cli::{ScoreArgs, ScoreFormat, ScoreKindArg};
use crate::{submission, Error, ErrorKind, Result};

/// Reads the scores, fills the suite's score tensor and computes its metrics; returns the
/// suite's id and its report. RoCOCO takes `eval`'s per-query dump (its scores are ranks
/// against whole galleries, not K×L matrices).
pub fn run(args: &ScoreArgs) -> Result<(String, Report)> {
    let info = benchctl_suites::find(&args.suite)?;
    if let benchctl_suites::SuiteKind::Galleries = info.kind {
        return Ok((info.id.to_string(), crate::evaluate::galleries::report_from_dump(&args.scores)?));
    }
    let data_dir = args.data_dir.clone().unwrap_or_else(|| Path::new("datasets").join(info.id));
    let mut suite = info.load(&data_dir)?;
    suite.summary.ties = crate::evaluate::tie_rule(info, args.ties)?;
    let format = match args.format {
        Some(format) => format,
        None => detect_format(&args.scores)?,
    };
    let mut matrices = Matrices::new(&suite);
    match format {
        ScoreFormat::Dump => read_dump(&args.scores, &mut matrices)?,
        ScoreFormat::WinogroundJsonl => read_winoground(&args.scores, &mut matrices)?,
        ScoreFormat::EqbenNpy => read_eqben_npy(&args.scores, &suite, &mut matrices)?,
    }
    let scores = matrices.finish(
        &args.scores,
        match args.score_kind {
            ScoreKindArg::Similarity => ScoreKind::Similarity,
            ScoreKindArg::Probability => ScoreKind::Probability,
            ScoreKindArg::Logit => ScoreKind::Logit,
        },
    )?;
    let report = suite.evaluate(&scores)?;
    Ok((suite.id.to_string(), report))
}

fn detect_format(path: &Path) -> Result<ScoreFormat> {
    if path.extension().is_some_and(|e| e == "npy") {
        return Ok(ScoreFormat::EqbenNpy);
    }
    let text = std::fs::read_to_string(path).map_err(|e| bad(format!("read {}: {e}", path.display())))?;
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let labelled = serde_json::from_str::<Value>(first).ok().is_some_and(|v| v.get("label").is_some());
    Ok(if labelled { ScoreFormat::WinogroundJsonl } else { ScoreFormat::Dump })
}

fn bad(message: String) -> Error {
    Error::new(ErrorKind::Data, message)
}

/// Every item's K×L scores as they arrive, NaN until set.
struct Matrices<'a> {
    suite: &'a Suite,
    index: HashMap<&'a str, usize>,
    values: Vec<Vec<f64>>,
}

impl<'a> Matrices<'a> {
    fn new(suite: &'a Suite) -> Self {
        let index = suite.items.iter().enumerate().map(|(i, item)| (item.id.as_str(), i)).collect();
        let values = suite.items.iter().map(|i| vec![f64::NAN; i.images.len() * i.texts.len()]).collect();
        Self { suite, index, values }
    }

    fn item(&self, id: &str, at: &str) -> Result<usize> {
        self.index.get(id).copied().ok_or_else(|| bad(format!("score {at}: no item `{id}` in {}", self.suite.id)))
    }

    fn set(&mut self, item: usize, image: usize, text: usize, score: f64, at: &str) -> Result<()> {
        let it = &self.suite.items[item];
        if image >= it.images.len() || text >= it.texts.len() {
            return Err(bad(format!(
                "score {at}: item `{}` has {} image(s) and {} text(s), not image {image} and text {text}",
                it.id,
                it.images.len(),
                it.texts.len()
            )));
        }
        if !score.is_finite() {
            return Err(bad(format!(
                "score {at}: item `{}` image {image} text {text}: the score {score} is not a finite number",
                it.id
            )));
        }
        let slot = &mut self.values[item][image * it.texts.len() + text];
        if !slot.is_nan() {
            return Err(bad(format!("score {at}: item `{}` image {image} text {text} is scored twice", it.id)));
        }
        *slot = score;
        Ok(())
    }

    /// The score tensor, or an error naming the first unscored items.
    fn finish(self, source: &Path, kind: ScoreKind) -> Result<ScoreTensor> {
        let unscored: Vec<&str> = self
            .values
            .iter()
            .zip(&self.suite.items)
            .filter(|(v, _)| v.iter().any(|s| s.is_nan()))
            .map(|(_, item)| item.id.as_str())
            .collect();
        if !unscored.is_empty() {
            let shown: Vec<&str> = unscored.iter().take(5).copied().collect();
            return Err(bad(format!(
                "score {}: {} item(s) lack scores, e.g. {}",
                source.display(),
                unscored.len(),
                shown.join(", ")
            )));
        }
        let mut tensor = ScoreTensor::of_kind(kind);
        for (item, values) in self.suite.items.iter().zip(&self.values) {
            tensor
                .push_exact(item.images.len(), item.texts.len(), values)
                .map_err(|e| bad(format!("score {} item `{}`: {e}", source.display(), item.id)))?;
        }
        Ok(tensor)
    }
}

fn lines(path: &Path) -> Result<Vec<(String, Value)>> {
    let text = std::fs::read_to_string(path).map_err(|e| bad(format!("read {}: {e}", path.display())))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, line)| {
            let at = format!("{} line {}", path.display(), i + 1);
            let value = serde_json::from_str(line).map_err(|e| bad(format!("parse {at}: {e}")))?;
            Ok((at, value))
        })
        .collect()
}

fn read_dump(path: &Path, m: &mut Matrices) -> Result<()> {
    read_dump_lines(lines(path)?, m)
}

fn read_dump_lines(lines: Vec<(String, Value)>, m: &mut Matrices) -> Result<()> {
    for (at, line) in lines {
        let id =
            line.get("id").and_then(Value::as_str).ok_or_else(|| bad(format!("parse {at}: missing string `id`")))?;
        let item = m.item(id, &at)?;
        let rows = line
            .get("scores")
            .and_then(Value::as_array)
            .ok_or_else(|| bad(format!("parse {at}: missing `scores` rows")))?;
        for (k, row) in rows.iter().enumerate() {
            let row = row.as_array().ok_or_else(|| bad(format!("parse {at}: row {k} of `scores` is not a list")))?;
            for (l, value) in row.iter().enumerate() {
                let score =
                    value.as_f64().ok_or_else(|| bad(format!("parse {at}: score [{k}][{l}] is not a number")))?;
                m.set(item, k, l, score, &at)?;
            }
        }
    }
    Ok(())
}

/// `<id>_c<k>_i<j>`: caption k of item id with image j.
fn parse_label(label: &str) -> Option<(&str, usize, usize)> {
    let (rest, image) = label.rsplit_once("_i")?;
    let (id, caption) = rest.rsplit_once("_c")?;
    Some((id, caption.parse().ok()?, image.parse().ok()?))
}

fn read_winoground(path: &Path, m: &mut Matrices) -> Result<()> {
    for (at, line) in lines(path)? {
        let label = line
            .get("label")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("parse {at}: missing string `label`")))?;
        let (id, caption, image) = parse_label(label)
            .ok_or_else(|| bad(format!("parse {at}: label `{label}` is not of the form <id>_c<k>_i<j>")))?;
        let item = m.item(id, &format!("{at} (label `{label}`)"))?;
        let score = line
            .get("score")
            .and_then(Value::as_f64)
            .ok_or_else(|| bad(format!("parse {at}: `score` is not a number")))?;
        m.set(item, image, caption, score, &at)?;
    }
    Ok(())
}

/// EqBen's `prediction.npy`: one score per entry of the flat annotation list, in its order.
fn read_eqben_npy(path: &Path, suite: &Suite, m: &mut Matrices) -> Result<()> {
    let order = suite.pair_order.as_ref().ok_or_else(|| {
        Error::new(
            ErrorKind::Usage,
            format!("read {} as a prediction vector: {} has no official submission order", path.display(), suite.id),
        )
    })?;
    let values = submission::read_prediction(path, order)?;
    for (i, (slot, value)) in order.slots.iter().zip(values).enumerate() {
        let at = format!("{} entry {i} (entry {i} of {})", path.display(), order.file.display());
        if slot.is_missing() {
            return Err(bad(format!("score {at}: the entry is not part of a readable item")));
        }
        m.set(slot.item as usize, usize::from(slot.image), usize::from(slot.text), value, &at)?;
    }
    Ok(())
}

/// A suite's score tensor from dump lines held in memory (a stored run's item scores);
/// `source` names them in errors.
pub(crate) fn from_lines(suite: &Suite, lines: &[Value], source: &str, kind: ScoreKind) -> Result<ScoreTensor> {
    let mut matrices = Matrices::new(suite);
    let numbered =
        lines.iter().enumerate().map(|(i, v)| (format!("{source} item line {}", i + 1), v.clone())).collect();
    read_dump_lines(numbered, &mut matrices)?;
    matrices.finish(Path::new(source), kind)
}

/// A suite's score tensor from our own score dumps, read in order (shards of one run).
pub(crate) fn from_dumps(suite: &Suite, dumps: &[PathBuf], kind: ScoreKind) -> Result<ScoreTensor> {
    let mut matrices = Matrices::new(suite);
    for path in dumps {
        read_dump(path, &mut matrices)?;
    }
    let source = dumps.first().map(PathBuf::as_path).unwrap_or(Path::new("(no dumps)"));
    matrices.finish(source, kind)
}
