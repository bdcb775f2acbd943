//! `benchctl score`: a suite's metrics from scores produced elsewhere, e.g. by a PyTorch
//! model outside the zoo. Every item must be scored exactly once; an unknown item or label,
//! a missing item or pair, or a non-finite score is an error naming the offending entry.
//! With `--model-name`, the result is stored as an external model's run (item scores,
//! bootstrap intervals, provenance of the score file) beside the zoo's runs, so it joins the
//! leaderboard and `compare`.

use benchctl_scoring::spill::Strings;
use benchctl_suites::paths::TextLines;
use std::path::{Path, PathBuf};

use benchctl_scoring::spill::SpillVec;
use benchctl_scoring::{Report, ScoreKind, ScoreTensor};
use benchctl_suites::Suite;
use serde_json::Value;

use crate::cli::{ScoreArgs, ScoreFormat, ScoreKindArg};
use crate::evaluate::{Evaluation, Outcome};
use crate::results::{self, ExternalModel, ModelRecord, Run, SuiteRecord};
use crate::{submission, Error, ErrorKind, Result};

/// What `score` computed: the suite's id and report, and what storing it as a run needs.
pub struct Scored {
    pub suite_id: String,
    pub report: Report,
    /// The score file's layout, as recorded (`dump`, `winoground-jsonl`, `eqben-npy`, `rococo-dump`).
    format: &'static str,
    detail: Detail,
}

enum Detail {
    /// A K×L item suite and the scores read into it.
    Items { suite: Box<Suite>, scores: ScoreTensor },
    /// RoCOCO: the per-query dump (ranks against whole galleries), and the data directory named.
    Galleries { data_dir: PathBuf },
}

/// Reads the scores, fills the suite's score tensor and computes its metrics. RoCOCO takes
/// `eval`'s per-query dump (its scores are ranks against whole galleries, not K×L matrices).
pub fn run(args: &ScoreArgs) -> Result<Scored> {
    if let Some(name) = &args.model_name {
        check_model_name(name)?;
    }
    let info = benchctl_suites::find(&args.suite)?;
    let data_dir = args.data_dir.clone().unwrap_or_else(|| Path::new("datasets").join(info.id));
    // Recorded absolute, as `eval` records it.
    let data_dir = std::path::absolute(&data_dir).unwrap_or(data_dir);
    if let benchctl_suites::SuiteKind::Galleries = info.kind {
        return Ok(Scored {
            suite_id: info.id.to_string(),
            report: crate::evaluate::galleries::report_from_dump(&args.scores)?,
            format: "rococo-dump",
            detail: Detail::Galleries { data_dir },
        });
    }
    let mut suite = info.load(&data_dir)?;
    suite.summary.ties = crate::evaluate::tie_rule(info, args.ties)?;
    let format = match args.format {
        Some(format) => format,
        None => detect_format(&args.scores)?,
    };
    let mut matrices = Matrices::new(&suite);
    let format_name = match format {
        ScoreFormat::Dump => {
            read_dump(&args.scores, &mut matrices)?;
            "dump"
        }
        ScoreFormat::WinogroundJsonl => {
            read_winoground(&args.scores, &mut matrices)?;
            "winoground-jsonl"
        }
        ScoreFormat::EqbenNpy => {
            read_eqben_npy(&args.scores, &suite, &mut matrices)?;
            "eqben-npy"
        }
    };
    let scores = matrices.finish(
        &args.scores,
        match args.score_kind {
            ScoreKindArg::Similarity => ScoreKind::Similarity,
            ScoreKindArg::Probability => ScoreKind::Probability,
            ScoreKindArg::Logit => ScoreKind::Logit,
        },
    )?;
    let report = suite.evaluate(&scores)?;
    Ok(Scored {
        suite_id: suite.id.to_string(),
        report,
        format: format_name,
        detail: Detail::Items { suite: Box::new(suite), scores },
    })
}

/// An external model's name: one printable line, and not a zoo id (a stored run named
/// `clip-vit-b32` that benchctl never ran would pass for the zoo model's).
fn check_model_name(name: &str) -> Result<()> {
    let usage = |why: &str| Error::new(ErrorKind::Usage, format!("use --model-name `{name}`: {why}"));
    if name.trim().is_empty() || name.trim() != name {
        return Err(usage("the name is empty or starts or ends with white space"));
    }
    if name.chars().count() > 100 || name.chars().any(char::is_control) {
        return Err(usage("the name must be one line of at most 100 characters"));
    }
    use benchctl_models::registry::{FIBER_CHECKPOINTS, MODELS};
    if MODELS.iter().any(|m| m.id == name) || FIBER_CHECKPOINTS.iter().any(|m| m.id == name) {
        return Err(usage("that is a zoo model's id; give the external model a name of its own"));
    }
    Ok(())
}

impl Scored {
    /// The result as a run of the external model `args.model_name`, ready to store: its item
    /// scores (so `compare` computes paired statistics against any run on the same items),
    /// the bootstrap intervals of its headline metrics, the suite's data fingerprint, and the
    /// score file's name and SHA-256. Such a run encoded nothing, so its counts, batch size
    /// and image fingerprint are empty, and its dtype and device are `-`.
    pub fn external_run(self, args: &ScoreArgs) -> Result<Evaluation> {
        let started = std::time::Instant::now();
        let name = args.model_name.clone().unwrap_or_default();
        let bytes = std::fs::read(&args.scores)
            .map_err(|e| Error::caused_by(ErrorKind::Data, format!("read {}: {e}", args.scores.display()), e))?;
        let scores_sha256 = {
            use sha2::{Digest, Sha256};
            crate::cache::hex(&Sha256::digest(&bytes))
        };
        let external = ExternalModel {
            description: args.model_description.clone(),
            url: args.model_url.clone(),
            scores_file: args.scores.display().to_string(),
            scores_sha256,
            scores_format: self.format.to_string(),
        };
        let (suite_record, score_kind, intervals, data_fingerprint, outcome) = match self.detail {
            Detail::Items { suite, scores } => {
                let intervals = crate::evaluate::bootstrap_intervals(&suite, &scores)?;
                let record = SuiteRecord::of(&suite);
                let fingerprint = results::fingerprint(&suite)?;
                (record, scores.kind(), intervals, fingerprint, Outcome::Items { suite, scores })
            }
            Detail::Galleries { data_dir } => {
                // `run` validated every line; they are the stored item scores.
                let mut dump = Strings::new();
                for line in results::dump_lines(&args.scores)? {
                    dump.push(&line?);
                }
                let record = SuiteRecord {
                    id: self.suite_id.clone(),
                    data_dir: data_dir.display().to_string(),
                    items: self.report.items,
                    ties: crate::evaluate::tie_rule(benchctl_suites::find(&self.suite_id)?, args.ties)?
                        .name()
                        .to_string(),
                    incomplete: Vec::new(),
                    altered_images: None,
                    caption_normalisation: None,
                    manifest: None,
                };
                // Ranks, not scores: the annotations are not read, so there is no fingerprint.
                (record, ScoreKind::Similarity, Vec::new(), String::new(), Outcome::Queries { dump })
            }
        };
        let run = Run {
            started_at: results::now_rfc3339(),
            model: ModelRecord {
                id: name,
                repo: None,
                revision: None,
                commit: None,
                path: None,
                dtype: "-".into(),
                device: "-".into(),
                score: None,
                score_kind: Some(score_kind.name().to_string()),
                external: Some(external),
            },
            suite: suite_record,
            batch_size: 0,
            counts: results::Counts::default(),
            timings: results::Timings { score_s: started.elapsed().as_secs_f64(), ..Default::default() },
            report: self.report,
            intervals,
            tool_commit: results::TOOL_COMMIT.to_string(),
            data_fingerprint,
            image_fingerprint: String::new(),
            shard: None,
        };
        Ok(Evaluation { run, outcome })
    }
}

fn detect_format(path: &Path) -> Result<ScoreFormat> {
    if path.extension().is_some_and(|e| e == "npy") {
        return Ok(ScoreFormat::EqbenNpy);
    }
    // The first line is enough; a file that cannot be read is named when it is read as a dump.
    let first = TextLines::open(path, SCORE_FILE)
        .ok()
        .and_then(|mut lines| lines.find_map(|line| line.ok().filter(|(_, l)| !l.trim().is_empty())))
        .map(|(_, line)| line)
        .unwrap_or_default();
    let labelled = serde_json::from_str::<Value>(&first).ok().is_some_and(|v| v.get("label").is_some());
    Ok(if labelled { ScoreFormat::WinogroundJsonl } else { ScoreFormat::Dump })
}

fn bad(message: String) -> Error {
    Error::new(ErrorKind::Data, message)
}

/// Every item's K×L scores as they arrive, NaN until set: one flat spilled array with where
/// each item's start, and the items found by id through a spilled table of positions (a dump of
/// a million items is never a million small allocations).
struct Matrices<'a> {
    suite: &'a Suite,
    index: benchctl_scoring::spill::Index,
    start: SpillVec<usize>,
    values: SpillVec<f64>,
}

impl<'a> Matrices<'a> {
    fn new(suite: &'a Suite) -> Self {
        let mut index = benchctl_scoring::spill::Index::default();
        let mut start = SpillVec::with_capacity(suite.items.len() + 1);
        start.push(0);
        for (i, item) in suite.items.iter().enumerate() {
            // The loaders refuse duplicate ids, so every id is new here.
            index.find_or_add(item.id(), i, |at| suite.items.item(at).id() == item.id());
            start.push(start[i] + item.image_count() * item.text_count());
        }
        let values = SpillVec::from_elem(f64::NAN, start[suite.items.len()]);
        Self { suite, index, start, values }
    }

    fn item(&self, id: &str, at: &str) -> Result<usize> {
        let found = self.index.find(id, |i| self.suite.items.item(i).id() == id);
        found.map(|i| i as usize).ok_or_else(|| bad(format!("score {at}: no item `{id}` in {}", self.suite.id)))
    }

    /// Item `item`'s scores.
    fn of(&self, item: usize) -> &[f64] {
        &self.values[self.start[item]..self.start[item + 1]]
    }

    fn set(&mut self, item: usize, image: usize, text: usize, score: f64, at: &str) -> Result<()> {
        let it = self.suite.items.item(item);
        if image >= it.image_count() || text >= it.text_count() {
            return Err(bad(format!(
                "score {at}: item `{}` has {} image(s) and {} text(s), not image {image} and text {text}",
                it.id(),
                it.image_count(),
                it.text_count()
            )));
        }
        if !score.is_finite() {
            return Err(bad(format!(
                "score {at}: item `{}` image {image} text {text}: the score {score} is not a finite number",
                it.id()
            )));
        }
        let slot = &mut self.values[self.start[item] + image * it.text_count() + text];
        if !slot.is_nan() {
            return Err(bad(format!("score {at}: item `{}` image {image} text {text} is scored twice", it.id())));
        }
        *slot = score;
        Ok(())
    }

    /// The score tensor, or an error naming the first unscored items.
    fn finish(self, source: &Path, kind: ScoreKind) -> Result<ScoreTensor> {
        // Counted, and the first few named: all of a million items may lack scores.
        let mut unscored = self.suite.items.iter().enumerate().filter(|&(i, _)| self.of(i).iter().any(|s| s.is_nan()));
        let shown: Vec<&str> = unscored.by_ref().take(5).map(|(_, item)| item.id()).collect();
        if !shown.is_empty() {
            let count = shown.len() + unscored.count();
            return Err(bad(format!(
                "score {}: {count} item(s) lack scores, e.g. {}",
                source.display(),
                shown.join(", ")
            )));
        }
        let mut tensor = ScoreTensor::of_kind(kind);
        for (i, item) in self.suite.items.iter().enumerate() {
            tensor
                .push_exact(item.image_count(), item.text_count(), self.of(i))
                .map_err(|e| bad(format!("score {} item `{}`: {e}", source.display(), item.id())))?;
        }
        Ok(tensor)
    }
}

/// What a score file that cannot be opened is named as.
const SCORE_FILE: &str = "the file given to `--scores`";

/// Each non-empty line of the score file at `path` parsed as JSON, with where it is
/// ([`results::json_lines`]); its problems are bad data.
fn lines(path: &Path) -> Result<impl Iterator<Item = Result<(String, Value)>> + '_> {
    results::json_lines(path, SCORE_FILE, ErrorKind::Data)
}

fn read_dump(path: &Path, m: &mut Matrices) -> Result<()> {
    read_dump_lines(lines(path)?, m)
}

fn read_dump_lines(lines: impl IntoIterator<Item = Result<(String, Value)>>, m: &mut Matrices) -> Result<()> {
    for line in lines {
        let (at, line) = line?;
        let (id, scores) = item_line(&line, &at)?;
        let item = m.item(id, &at)?;
        for score in scores {
            let (k, l, value) = score?;
            m.set(item, k, l, value, &at)?;
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
    for line in lines(path)? {
        let (at, line) = line?;
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
pub(crate) fn from_lines(suite: &Suite, lines: &DumpScores, source: &str, kind: ScoreKind) -> Result<ScoreTensor> {
    let mut m = Matrices::new(suite);
    for i in 0..lines.len() {
        let at = format!("{source} item line {}", i + 1);
        let item = m.item(lines.id(i), &at)?;
        for (k, l, score) in lines.scores(i) {
            m.set(item, k, l, score, &at)?;
        }
    }
    m.finish(Path::new(source), kind)
}

/// A run's item scores as its dump lists them: each item's id and scores, in dump order, read
/// as a stream into spilled arrays (what `compare` holds of each run; a million items' lines
/// are not held as JSON values).
#[derive(Default)]
pub struct DumpScores {
    ids: Strings,
    /// Where each item's scores end in `values` (and `cells`).
    item_ends: SpillVec<usize>,
    values: SpillVec<f64>,
    /// Each score's (image, text).
    cells: SpillVec<(u32, u32)>,
}

impl DumpScores {
    /// The item lines of the dump at `path`.
    pub fn read_file(path: &Path) -> Result<Self> {
        Self::from_lines(lines(path)?)
    }

    /// Item lines (`{"id": …, "scores": [[…], …]}`) with where each is, in order.
    pub fn from_lines(lines: impl IntoIterator<Item = Result<(String, Value)>>) -> Result<Self> {
        let mut out = DumpScores::default();
        for line in lines {
            let (at, line) = line?;
            let (id, scores) = item_line(&line, &at)?;
            for score in scores {
                let (k, l, value) = score?;
                out.values.push(value);
                out.cells.push((k as u32, l as u32));
            }
            out.item_ends.push(out.values.len());
            out.ids.push(id);
        }
        Ok(out)
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Item `i`'s id.
    pub fn id(&self, i: usize) -> &str {
        self.ids.get(i)
    }

    fn span(&self, i: usize) -> std::ops::Range<usize> {
        (if i == 0 { 0 } else { self.item_ends[i - 1] })..self.item_ends[i]
    }

    /// Item `i`'s scores, in dump order.
    pub fn flat(&self, i: usize) -> &[f64] {
        &self.values[self.span(i)]
    }

    /// Item `i`'s scores with their (image, text).
    pub fn scores(&self, i: usize) -> impl Iterator<Item = (usize, usize, f64)> + '_ {
        let span = self.span(i);
        self.cells[span.clone()].iter().zip(&self.values[span]).map(|(&(k, l), &v)| (k as usize, l as usize, v))
    }
}

/// One score of an item line: (image, text, score).
type Cell = (usize, usize, f64);

/// An item line's id and its scores, each checked as it is read.
fn item_line<'v>(line: &'v Value, at: &str) -> Result<(&'v str, impl Iterator<Item = Result<Cell>> + 'v)> {
    let id = line.get("id").and_then(Value::as_str).ok_or_else(|| bad(format!("parse {at}: missing string `id`")))?;
    let rows = line
        .get("scores")
        .and_then(Value::as_array)
        .ok_or_else(|| bad(format!("parse {at}: missing `scores` rows")))?;
    let at = at.to_string();
    let scores = rows.iter().enumerate().flat_map(move |(k, row)| {
        let at = at.clone();
        let cells: Box<dyn Iterator<Item = Result<Cell>>> = match row.as_array() {
            None => Box::new(std::iter::once(Err(bad(format!("parse {at}: row {k} of `scores` is not a list"))))),
            Some(row) => Box::new(row.iter().enumerate().map(move |(l, value)| {
                let score =
                    value.as_f64().ok_or_else(|| bad(format!("parse {at}: score [{k}][{l}] is not a number")))?;
                Ok((k, l, score))
            })),
        };
        cells
    });
    Ok((id, scores))
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
