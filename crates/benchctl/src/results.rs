//! Stored runs: `results/runs/<stamp>_<model>_<suite>.json` (the run) and
//! `….scores.jsonl` (one line per item: its id and K×L scores), from which every metric
//! can be recomputed without the model.

use std::io::Write;
use std::path::{Path, PathBuf};

use benchctl_scoring::metrics::stats::Interval;
use benchctl_scoring::{Report, ScoreTensor};
use benchctl_suites::Suite;
use serde::{Deserialize, Serialize};

use crate::eval::Counts;
use crate::{Error, Result};

/// Version of the run file layout.
pub const SCHEMA: u32 = 1;

/// One evaluation of one model on one suite.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub started_at: String,
    pub model: ModelRecord,
    pub suite: SuiteRecord,
    pub batch_size: usize,
    pub counts: Counts,
    pub timings: Timings,
    pub report: Report,
    /// Bootstrap 95 % intervals of the headline metrics (empty for retrieval suites).
    pub intervals: Vec<Interval>,
    /// The benchctl build's git commit (`unknown` outside a checkout).
    pub tool_commit: String,
    /// SHA-256 of the suite's annotation files and image list ([`crate::eval::fingerprint`]).
    pub data_fingerprint: String,
    /// `i/n` for a shard's run.
    pub shard: Option<String>,
}

/// The git commit benchctl was built from.
pub const TOOL_COMMIT: &str = env!("BENCHCTL_GIT_COMMIT");

/// Resamples and seed of every run's bootstrap intervals.
pub const BOOTSTRAP_RESAMPLES: usize = 1000;
pub const BOOTSTRAP_SEED: u64 = 0;

impl ModelRecord {
    /// What the recorded score head yields: probabilities for SigLIP's sigmoid and ITM.
    pub fn score_kind(&self) -> benchctl_scoring::ScoreKind {
        match self.score.as_deref() {
            Some("sigmoid" | "itm") => benchctl_scoring::ScoreKind::Probability,
            _ => benchctl_scoring::ScoreKind::Similarity,
        }
    }
}

/// Which model ran: zoo id with hub repo, revision and resolved commit, or a local path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelRecord {
    pub id: String,
    pub repo: Option<String>,
    pub revision: Option<String>,
    pub commit: Option<String>,
    pub path: Option<String>,
    pub dtype: String,
    pub device: String,
    /// The score head (`contrastive`, `sigmoid`, `itm`, `itc`); absent in older run files.
    #[serde(default)]
    pub score: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuiteRecord {
    pub id: String,
    pub data_dir: String,
    pub items: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    pub load_model_s: f64,
    pub encode_images_s: f64,
    pub encode_texts_s: f64,
    pub score_s: f64,
    pub total_s: f64,
}

impl Timings {
    /// Adds another run's times (shards run one after another or side by side: their sum is
    /// the compute spent).
    pub fn add(&mut self, other: &Timings) {
        self.load_model_s += other.load_model_s;
        self.encode_images_s += other.encode_images_s;
        self.encode_texts_s += other.encode_texts_s;
        self.score_s += other.score_s;
        self.total_s += other.total_s;
    }
}

impl Run {
    pub fn to_json(&self) -> serde_json::Value {
        let c = &self.counts;
        serde_json::json!({
            "schema": SCHEMA,
            "tool": {"name": "benchctl", "version": env!("CARGO_PKG_VERSION"), "commit": self.tool_commit},
            "started_at": self.started_at,
            "model": self.model,
            "suite": self.suite,
            "data_fingerprint": self.data_fingerprint,
            "options": {"batch_size": self.batch_size, "shard": self.shard},
            "counts": {
                "unique_images": c.unique_images,
                "unique_texts": c.unique_texts,
                "images_encoded": c.images_encoded,
                "image_batches": c.image_batches,
                "texts_encoded": c.texts_encoded,
                "text_batches": c.text_batches,
                "images_cached": c.images_cached,
                "texts_cached": c.texts_cached,
                "pairs_scored": c.pairs_scored,
                "pairs_cached": c.pairs_cached,
            },
            "timings": self.timings,
            "report": self.report.to_json(),
            "intervals": intervals_json(&self.intervals),
        })
    }

    /// Reads a run file's JSON; `None` names nothing, so callers add the file.
    pub fn from_json(v: &serde_json::Value) -> std::result::Result<Self, String> {
        let field = |k: &str| v.get(k).ok_or_else(|| format!("missing key `{k}`"));
        let schema = field("schema")?.as_u64().ok_or("`schema` is not a number")?;
        if schema != SCHEMA as u64 {
            return Err(format!("schema {schema} is not supported (expected {SCHEMA})"));
        }
        let parse = |k: &str| -> std::result::Result<serde_json::Value, String> { Ok(field(k)?.clone()) };
        let counts = field("counts")?;
        let count = |k: &str| counts.get(k).and_then(|v| v.as_u64()).map(|v| v as usize).ok_or(format!("missing key `counts.{k}`"));
        Ok(Run {
            started_at: field("started_at")?.as_str().ok_or("`started_at` is not a string")?.to_string(),
            model: serde_json::from_value(parse("model")?).map_err(|e| format!("key `model`: {e}"))?,
            suite: serde_json::from_value(parse("suite")?).map_err(|e| format!("key `suite`: {e}"))?,
            batch_size: v.pointer("/options/batch_size").and_then(|b| b.as_u64()).unwrap_or(0) as usize,
            counts: Counts {
                unique_images: count("unique_images")?,
                unique_texts: count("unique_texts")?,
                images_encoded: count("images_encoded")?,
                image_batches: count("image_batches")?,
                texts_encoded: count("texts_encoded")?,
                text_batches: count("text_batches")?,
                images_cached: count("images_cached").unwrap_or(0),
                texts_cached: count("texts_cached").unwrap_or(0),
                pairs_scored: count("pairs_scored").unwrap_or(0),
                pairs_cached: count("pairs_cached").unwrap_or(0),
            },
            timings: serde_json::from_value(parse("timings")?).map_err(|e| format!("key `timings`: {e}"))?,
            report: Report::from_json(field("report")?).ok_or("key `report` is malformed")?,
            intervals: intervals_from_json(v.get("intervals"), &Report::from_json(field("report")?).ok_or("key `report` is malformed")?)?,
            tool_commit: v.pointer("/tool/commit").and_then(|c| c.as_str()).unwrap_or("unknown").to_string(),
            data_fingerprint: v.get("data_fingerprint").and_then(|c| c.as_str()).unwrap_or("").to_string(),
            shard: v.pointer("/options/shard").and_then(|c| c.as_str()).map(String::from),
        })
    }

    /// The model's name in tables: its id, and the score head for models with several
    /// (BLIP's ITM and ITC are different entries).
    pub fn label(&self) -> String {
        match self.model.score.as_deref() {
            Some(head @ ("itm" | "itc")) => format!("{} ({head})", self.model.id),
            _ => self.model.id.clone(),
        }
    }

    /// The interval of a headline metric.
    pub fn interval(&self, metric: &str) -> Option<&Interval> {
        self.intervals.iter().find(|i| i.metric == metric)
    }
}

/// `{metric: [low, high]}` in report order.
fn intervals_json(intervals: &[Interval]) -> serde_json::Value {
    let map: serde_json::Map<String, serde_json::Value> =
        intervals.iter().map(|i| (i.metric.clone(), serde_json::json!([i.low, i.high]))).collect();
    serde_json::Value::Object(map)
}

fn intervals_from_json(v: Option<&serde_json::Value>, report: &Report) -> std::result::Result<Vec<Interval>, String> {
    let Some(map) = v.and_then(|v| v.as_object()) else { return Ok(Vec::new()) };
    map.iter()
        .map(|(metric, bounds)| {
            let pair = bounds.as_array().filter(|a| a.len() == 2).and_then(|a| Some((a[0].as_f64()?, a[1].as_f64()?)));
            let (low, high) = pair.ok_or(format!("key `intervals.{metric}` is not [low, high]"))?;
            let value = report.metric(metric).ok_or(format!("key `intervals.{metric}` names no reported metric"))?;
            Ok(Interval { metric: metric.clone(), value, low, high })
        })
        .collect()
}

/// The score dump of an item suite: one line per item with its id and K×L scores.
pub fn item_dump(suite: &Suite, scores: &ScoreTensor) -> Vec<serde_json::Value> {
    suite
        .items
        .iter()
        .zip(scores.iter())
        .map(|(item, matrix)| {
            let rows: Vec<&[f32]> = (0..matrix.images()).map(|k| matrix.row(k)).collect();
            serde_json::json!({"id": item.id, "scores": rows})
        })
        .collect()
}

/// Writes the run and its dump (one JSON line each) under `results_dir/runs/`; returns the
/// run file. Files are written to a temporary name and renamed, so a crash leaves no half file.
pub fn store(results_dir: &Path, run: &Run, dump_lines: &[serde_json::Value]) -> Result<PathBuf> {
    let runs = results_dir.join("runs");
    std::fs::create_dir_all(&runs)
        .map_err(|e| Error::results(format!("create results directory {}: {e}", runs.display())))?;
    let stamp: String = run.started_at.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    let shard = run.shard.as_deref().map(|s| format!("_shard{}", s.replace('/', "of"))).unwrap_or_default();
    let base = format!("{stamp}_{}_{}{shard}", sanitise(&run.model.id), sanitise(&run.suite.id));
    // Runs started in the same second (a merge and its first shard) get distinct files.
    let stem = (1..)
        .map(|n| if n == 1 { base.clone() } else { format!("{base}-{n}") })
        .find(|stem| !runs.join(format!("{stem}.json")).exists())
        .unwrap_or(base);
    let scores_path = runs.join(format!("{stem}.scores.jsonl"));
    let mut dump = Vec::new();
    for line in dump_lines {
        writeln!(dump, "{line}").map_err(|e| Error::results(format!("format scores: {e}")))?;
    }
    write_atomically(&scores_path, &dump)?;
    let mut json = run.to_json();
    json["scores_file"] = serde_json::Value::from(format!("{stem}.scores.jsonl"));
    let text = serde_json::to_string_pretty(&json).map_err(|e| Error::results(format!("format run: {e}")))? + "\n";
    let run_path = runs.join(format!("{stem}.json"));
    write_atomically(&run_path, text.as_bytes())?;
    Ok(run_path)
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, bytes).map_err(|e| Error::results(format!("write {}: {e}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::results(format!("write {}: {e}", path.display())))
}

fn sanitise(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '-' }).collect()
}

/// A run file read back: the run, and its score dump beside it (`scores_file`).
pub struct RunFile {
    pub run: Run,
    pub dump: Option<PathBuf>,
}

/// Reads a run file (as `store` writes it), naming the file in errors.
pub fn read_run_file(path: &Path) -> Result<RunFile> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::results(format!("read {}: {e}", path.display())))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::results(format!("parse {}: {e}", path.display())))?;
    let run = Run::from_json(&json).map_err(|e| Error::results(format!("read run {}: {e}", path.display())))?;
    let dump = json.get("scores_file").and_then(|f| f.as_str()).map(|f| path.with_file_name(f));
    Ok(RunFile { run, dump })
}

/// Reads a score dump back: item ids and their K×L scores, in file order.
pub fn read_scores(path: &Path) -> Result<Vec<(String, Vec<Vec<f32>>)>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::results(format!("read {}: {e}", path.display())))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, line)| {
            #[derive(Deserialize)]
            struct Line {
                id: String,
                scores: Vec<Vec<f32>>,
            }
            let l: Line = serde_json::from_str(line)
                .map_err(|e| Error::results(format!("parse {} line {}: {e}", path.display(), i + 1)))?;
            Ok((l.id, l.scores))
        })
        .collect()
}

/// The current UTC time as `YYYY-MM-DDThh:mm:ssZ`.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339(secs)
}

/// Seconds since the epoch as `YYYY-MM-DDThh:mm:ssZ` (proleptic Gregorian, UTC).
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + if month <= 2 { 1 } else { 0 };
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn formats_utc_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_000_000), "2026-11-18T11:06:40Z");
    }
}
