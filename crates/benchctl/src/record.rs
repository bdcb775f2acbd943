//! The record stage: a finished evaluation's [`Run`] (made once, by [`RunBuilder`]) and what
//! it scored, stored all or nothing ([`Evaluation::store`]: run file and score dump, then the
//! store's row).

use std::path::{Path, PathBuf};
use std::time::Instant;

use benchctl_base::spill::Strings;
use benchctl_scoring::metrics::stats::{bootstrap_by, Interval, Unit};
use benchctl_scoring::{Report, ScoreTensor};
use benchctl_suites::{ContentKeys, Suite};

use crate::plan::Shard;
use crate::replies::ItemReplies;
use crate::results::{self, BootstrapRecord, Counts, ModelRecord, Run, SuiteRecord, Timings};
use crate::{Error, ErrorKind, Result};

/// A finished evaluation, not yet stored.
pub struct Evaluation {
    pub run: Run,
    pub outcome: Outcome,
}

/// What an evaluation scored, and so its score dump (one JSON object per line).
pub enum Outcome {
    /// An item suite and its scores (and the replies they were read from, where generated):
    /// one dump line per item, made as it is written (a million items' lines are never held at
    /// once).
    Items { suite: Box<Suite>, scores: ScoreTensor, replies: Option<Box<ItemReplies>> },
    /// A retrieval suite's per-query dump lines (RoCOCO: ranks against whole galleries).
    Queries { dump: Strings },
}

impl Evaluation {
    /// An item suite's scores, when the evaluation has them.
    pub fn scored(&self) -> Option<(&Suite, &ScoreTensor)> {
        match &self.outcome {
            Outcome::Items { suite, scores, .. } => Some((suite, scores)),
            Outcome::Queries { .. } => None,
        }
    }

    /// The replies the scores were read from, where the run generated them.
    pub fn replies(&self) -> Option<&ItemReplies> {
        match &self.outcome {
            Outcome::Items { replies, .. } => replies.as_deref(),
            Outcome::Queries { .. } => None,
        }
    }

    /// The score dump's lines, in order.
    pub fn dump_lines(&self) -> Box<dyn Iterator<Item = String> + '_> {
        match &self.outcome {
            Outcome::Items { suite, scores, replies } => {
                Box::new(results::item_dump(suite, scores, replies.as_deref()))
            }
            Outcome::Queries { dump } => Box::new(dump.iter().map(str::to_string)),
        }
    }

    /// Stores the run under `results_dir`, all or nothing: the run file and score dump
    /// first, then the store's row that names them (one transaction); returns the run's id
    /// and the run file.
    pub fn store(&self, results_dir: &Path) -> Result<(i64, PathBuf)> {
        let mut store = crate::store::Store::open(results_dir)?;
        // An item suite's dump lines are made twice, for the file and for the store's rows,
        // rather than held between the two (a million lines took about 100 MB).
        let path = results::store(results_dir, &self.run, self.dump_lines())?;
        crate::fault::at("store-files", 0);
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        // The files are complete: the next store that opens this directory imports them, so
        // a row that cannot be written (a full disk) loses nothing; say so.
        let id = store.insert(&self.run, self.dump_lines().map(Ok), Some(name)).map_err(|e| {
            let kept = format!(
                "{e}; the run is kept in {} and enters the store when it is next opened (any benchctl command on this --results-dir, once it can be written)",
                path.display()
            );
            Error::caused_by(ErrorKind::Results, kept, e)
        })?;
        Ok((id, path))
    }
}

/// What a run scored, for its record: the suite as recorded, the metrics and what they were
/// computed on.
pub struct Scored {
    pub suite: SuiteRecord,
    pub report: Report,
    pub intervals: Vec<Interval>,
    /// How the intervals were drawn (`None` without intervals).
    pub bootstrap: Option<BootstrapRecord>,
    /// [`results::fingerprint`] of the annotations (or the suite's own, RoCOCO's).
    pub data_fingerprint: String,
    /// [`results::image_fingerprint`] of the images' contents.
    pub image_fingerprint: String,
}

/// A run's record as it is made: started with the run, its counts and timings filled by the
/// stages, finished with what was scored.
pub struct RunBuilder {
    started: Instant,
    started_at: String,
    pub model: ModelRecord,
    batch_size: usize,
    pub counts: Counts,
    /// Every time but the total, which [`RunBuilder::finish`] takes.
    pub timings: Timings,
    shard: Option<Shard>,
    /// The process's image decodes when the run started ([`benchctl_suites::image::decodes`]).
    decodes_at_start: u64,
}

impl RunBuilder {
    /// A run of `model` starting now.
    pub fn start(model: ModelRecord, batch_size: usize, shard: Option<Shard>) -> Self {
        RunBuilder {
            started: Instant::now(),
            started_at: benchctl_base::time::now_rfc3339(),
            model,
            batch_size,
            counts: Counts::default(),
            timings: Timings::default(),
            shard,
            decodes_at_start: benchctl_suites::image::decodes(),
        }
    }

    /// An item suite's record: the metrics of `scores` over `suite` (the scored slice of
    /// `whole`) and their bootstrap intervals, timed with the scoring; `fingerprints` are the
    /// annotations' and the images', `content_keys` the embedded images' keys the run made.
    pub fn finish_items(
        mut self,
        suite: &Suite,
        whole: &Suite,
        scores: &ScoreTensor,
        fingerprints: [&str; 2],
        content_keys: &ContentKeys<'_>,
    ) -> Result<Run> {
        let started = Instant::now();
        let (report, (intervals, bootstrap)) = if suite.items.is_empty() {
            // An empty shard (more shards than items) is legal: nothing to score, and `merge`
            // joins it with the others.
            (Report { items: 0, metrics: Vec::new(), breakdowns: Vec::new() }, (Vec::new(), None))
        } else {
            (suite.evaluate(scores)?, bootstrap_intervals(suite, scores, content_keys)?)
        };
        self.timings.score_s += started.elapsed().as_secs_f64();
        let [data_fingerprint, image_fingerprint] = fingerprints.map(str::to_string);
        let suite = SuiteRecord { incomplete: whole.incomplete.clone(), ..SuiteRecord::of(suite) };
        Ok(self.finish(Scored { suite, report, intervals, bootstrap, data_fingerprint, image_fingerprint }))
    }

    /// The record, its total time up to now.
    pub fn finish(self, scored: Scored) -> Run {
        Run {
            started_at: self.started_at,
            model: self.model,
            suite: scored.suite,
            batch_size: self.batch_size,
            counts: Counts {
                images_decoded: (benchctl_suites::image::decodes() - self.decodes_at_start) as usize,
                ..self.counts
            },
            timings: Timings { total_s: self.started.elapsed().as_secs_f64(), ..self.timings },
            report: scored.report,
            intervals: scored.intervals,
            bootstrap: scored.bootstrap,
            tool_commit: results::TOOL_COMMIT.to_string(),
            data_fingerprint: scored.data_fingerprint,
            image_fingerprint: scored.image_fingerprint,
            shard: self.shard.map(|s| s.to_string()),
        }
    }
}

/// The bootstrap intervals of a suite's headline metrics ([`results::BOOTSTRAP_RESAMPLES`]
/// resamples, seed [`results::BOOTSTRAP_SEED`]): of whole clusters where the suite's items
/// cluster ([`Suite::clusters_knowing`] the embedded images' `content_keys` where the caller
/// holds them), with each per-item metric's design effect; of items otherwise. Also how they
/// were drawn.
pub fn bootstrap_intervals(
    suite: &Suite,
    scores: &ScoreTensor,
    content_keys: &ContentKeys<'_>,
) -> Result<(Vec<Interval>, Option<BootstrapRecord>)> {
    let clusters = suite.clusters_knowing(content_keys);
    let unit = clusters.as_ref().map_or(Unit::Items, Unit::Clusters);
    let (resamples, seed) = (results::BOOTSTRAP_RESAMPLES, results::BOOTSTRAP_SEED);
    let intervals = bootstrap_by(&suite.summary, scores, &suite.item_views(), resamples, seed, unit)?;
    let record = match (&clusters, &suite.summary.clusters) {
        (Some(clusters), Some(rule)) => BootstrapRecord {
            unit: crate::plan::BootstrapUnit::Clusters,
            rule: Some(rule.describe()),
            clusters: Some(clusters.count()),
            mean_cluster_size: Some(clusters.mean_size()),
            design_effects: intervals
                .iter()
                .filter_map(|i| Some((i.metric.clone(), serde_json::json!(i.design_effect?))))
                .collect(),
        },
        // No clusters (every item alone) or items asked for.
        _ => {
            BootstrapRecord { rule: suite.summary.clusters.as_ref().map(|r| r.describe()), ..BootstrapRecord::items() }
        }
    };
    Ok((intervals, Some(record)))
}
