//! `benchctl score`: a suite's metrics from scores produced elsewhere, e.g. by a PyTorch
//! model outside the zoo. Every item must be scored exactly once; an unknown item or label,
//! a missing item or pair, or a non-finite score is an error naming the offending entry.
//! With `--model-name`, the result is stored as an external model's run (item scores,
//! bootstrap intervals, provenance of the score file) beside the zoo's runs, so it joins the
//! leaderboard and `compare`.

use benchctl_base::spill::Strings;
use benchctl_suites::paths::TextLines;
use std::path::{Path, PathBuf};

use benchctl_scoring::{Report, ScoreKind, ScoreTensor};
use benchctl_suites::Suite;
use serde_json::Value;

use crate::dump::{bad, lines, read_dump, Matrices, SCORE_FILE};
use crate::record::{Evaluation, Outcome};
use crate::replies::ItemReplies;
use crate::results::{self, ExternalModel, ModelRecord, Run, SuiteRecord};
use crate::submission::{self, Submission};
use crate::{Error, ErrorKind, Result};

/// What `benchctl score` reads, and how it stores the result.
#[derive(Debug, Clone)]
pub struct ScorePlan {
    pub suite: String,
    /// The suite's data [default: datasets/SUITE].
    pub data_dir: Option<PathBuf>,
    /// The score file.
    pub scores: PathBuf,
    /// Its layout; `None`: from the file (see [`detect_format`]).
    pub format: Option<ScoreFormat>,
    pub ties: benchctl_scoring::metrics::Ties,
    /// What the bootstrap resamples.
    pub bootstrap: crate::plan::BootstrapUnit,
    /// What the scores are (similarities, probabilities or logits).
    pub score_kind: ScoreKind,
    /// Store the result as a run of an external model of this name.
    pub model_name: Option<String>,
    pub model_description: Option<String>,
    pub model_url: Option<String>,
}

/// Layouts of externally produced scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScoreFormat {
    /// benchctl's own per-item dump: `{"id", "scores": [[...]]}` per line, rows = images.
    Dump,
    /// Winoground's published model scores: `{"label": "<id>_c<k>_i<j>", "score": s}` per line.
    WinogroundJsonl,
    /// A benchmark's official submission file ([`crate::submission`]), of the suite's format.
    Submission(Submission),
}

impl ScoreFormat {
    /// The format of a name `score --format` takes: `dump`, `winoground-jsonl` or a
    /// submission format's.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "dump" => Some(ScoreFormat::Dump),
            "winoground-jsonl" => Some(ScoreFormat::WinogroundJsonl),
            _ => Submission::from_name(name).map(ScoreFormat::Submission),
        }
    }

    /// Every name `score --format` takes.
    pub fn names() -> Vec<&'static str> {
        [&["dump", "winoground-jsonl"][..], &Submission::NAMES[..]].concat()
    }

    pub fn name(self) -> &'static str {
        match self {
            ScoreFormat::Dump => "dump",
            ScoreFormat::WinogroundJsonl => "winoground-jsonl",
            ScoreFormat::Submission(format) => format.name(),
        }
    }
}

/// What `score` computed: the suite's id and report, and what storing it as a run needs.
pub struct Scored {
    pub suite_id: String,
    pub report: Report,
    /// The score file's layout, as recorded (`dump`, `winoground-jsonl`, `eqben-npy`, `rococo-dump`).
    format: &'static str,
    detail: Detail,
}

enum Detail {
    /// A K×L item suite and the scores read into it (and a dump's generated replies, kept).
    Items { suite: Box<Suite>, scores: ScoreTensor, replies: Option<Box<ItemReplies>> },
    /// RoCOCO: the per-query dump (ranks against whole galleries), and the data directory named.
    Galleries { data_dir: PathBuf },
}

/// Reads the scores, fills the suite's score tensor and computes its metrics. RoCOCO takes
/// `eval`'s per-query dump (its scores are ranks against whole galleries, not K×L matrices).
pub fn run(args: &ScorePlan) -> Result<Scored> {
    if let Some(name) = &args.model_name {
        check_model_name(name)?;
    }
    let info = benchctl_suites::find(&args.suite)?;
    let data_dir =
        args.data_dir.clone().unwrap_or_else(|| crate::fetch::default_data_dir(&info, Path::new("datasets")));
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
    suite.summary.ties = crate::evaluate::tie_rule(&info, args.ties)?;
    args.bootstrap.apply(&mut suite.summary);
    let format = match args.format {
        Some(format) => format,
        None => detect_format(&args.scores, suite.submission)?,
    };
    let mut matrices = Matrices::new(&suite);
    // What the values are, where the format decides it (replies and answers).
    let fixed_kind = match format {
        ScoreFormat::Dump => read_dump(&args.scores, &mut matrices).map(|()| None)?,
        ScoreFormat::WinogroundJsonl => read_winoground(&args.scores, &mut matrices).map(|()| None)?,
        ScoreFormat::Submission(submission) => {
            submission::read(submission, &args.scores, &suite, info.reply_reading(), &mut matrices)?
        }
    };
    let kind = fixed_kind.unwrap_or(args.score_kind);
    let replies = matrices.take_replies().map(Box::new);
    let scores = matrices.finish(&args.scores, kind)?;
    let report = suite.evaluate(&scores)?;
    Ok(Scored {
        suite_id: suite.id.to_string(),
        report,
        format: format.name(),
        detail: Detail::Items { suite: Box::new(suite), scores, replies },
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
    pub fn external_run(self, args: &ScorePlan) -> Result<Evaluation> {
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
        let (suite_record, score_kind, (intervals, bootstrap), data_fingerprint, outcome) = match self.detail {
            Detail::Items { suite, scores, replies } => {
                let intervals = crate::record::bootstrap_intervals(&suite, &scores, &|_| None)?;
                let record = SuiteRecord::of(&suite);
                let fingerprint = results::fingerprint(&suite)?;
                (record, scores.kind(), intervals, fingerprint, Outcome::Items { suite, scores, replies })
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
                    ties: crate::evaluate::tie_rule(&benchctl_suites::find(&self.suite_id)?, args.ties)?
                        .name()
                        .to_string(),
                    incomplete: Vec::new(),
                    altered_images: None,
                    caption_normalisation: None,
                    manifest: None,
                    shortlist: None,
                    hub: None,
                };
                // Ranks, not scores: the annotations are not read, so there is no fingerprint.
                (record, ScoreKind::Similarity, (Vec::new(), None), String::new(), Outcome::Queries { dump })
            }
        };
        let run = Run {
            started_at: benchctl_base::time::now_rfc3339(),
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
                endpoint: None,
                image_settings: None,
                text_prep: None,
                architecture: None,
                max_patches: None,
                processor_pixels: None,
                answer_rule: None,
                reply_reading: None,
            },
            suite: suite_record,
            batch_size: 0,
            counts: results::Counts::default(),
            timings: results::Timings { score_s: started.elapsed().as_secs_f64(), ..Default::default() },
            report: self.report,
            intervals,
            bootstrap,
            tool_commit: results::TOOL_COMMIT.to_string(),
            data_fingerprint,
            image_fingerprint: String::new(),
            shard: None,
        };
        Ok(Evaluation { run, outcome })
    }
}

/// A score file's layout from its name and first non-empty line: a submission format's
/// (`submission::detect`); else Winoground's where the line has a `label`, a dump where it is
/// a JSON object, and otherwise the suite's own submission format, if it has one (so that a
/// file of neither kind is read, and its problem named, as the format the suite takes).
pub fn detect_format(path: &Path, suites_own: Option<Submission>) -> Result<ScoreFormat> {
    // The first line is enough; a file that cannot be read is named when it is read as a dump.
    let first = TextLines::open(path, SCORE_FILE)
        .ok()
        .and_then(|mut lines| lines.find_map(|line| line.ok().filter(|(_, l)| !l.trim().is_empty())))
        .map(|(_, line)| line)
        .unwrap_or_default();
    if let Some(format) = submission::detect(path, &first) {
        return Ok(ScoreFormat::Submission(format));
    }
    let json = serde_json::from_str::<Value>(&first).ok();
    if json.as_ref().is_some_and(|v| v.get("label").is_some()) {
        return Ok(ScoreFormat::WinogroundJsonl);
    }
    Ok(match suites_own {
        Some(format) if !first.trim_start().starts_with('{') => ScoreFormat::Submission(format),
        _ => ScoreFormat::Dump,
    })
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
