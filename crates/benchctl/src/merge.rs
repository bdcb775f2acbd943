//! `benchctl merge`: the shard runs of one evaluation (`eval --shard i/n`, any machines,
//! any job runner) combined into the run an unsharded evaluation gives.
//!
//! The shards must be the same model (id, commit, dtype, device, head), suite and data
//! fingerprint, batch size, and cover `0/n … (n−1)/n` once each. Their score dumps are read
//! in shard order into the suite's score tensor and the metrics and intervals recomputed
//! from it; each shard encoded its inputs in the same global batches as an unsharded run
//! (see `encode::stream::EmbeddingPlan`), so the scores, and so the merged run's report,
//! intervals and dump, are bit-identical to the unsharded run's.

use std::path::{Path, PathBuf};

use crate::plan::Shard;
use crate::record::{bootstrap_intervals, Evaluation, Outcome};
use crate::results::{self, Run, Timings};
use crate::results::{fingerprint, Counts};
use crate::{Error, ErrorKind, Result};

fn usage(message: String) -> Error {
    Error::new(ErrorKind::Usage, message)
}

/// A shard's run file, parsed, with its dump.
struct ShardRun {
    path: PathBuf,
    run: Run,
    dump: PathBuf,
    index: usize,
    count: usize,
}

fn read_shard(path: &Path) -> Result<ShardRun> {
    let results::RunFile { run, dump } = results::read_run_file(path)?;
    let shard = run
        .shard
        .clone()
        .ok_or_else(|| usage(format!("merge {}: it is not a shard run (no options.shard)", path.display())))?;
    let Shard { index, count } =
        Shard::parse(&shard).map_err(|e| usage(format!("merge {}: shard `{shard}`: {e}", path.display())))?;
    let dump =
        dump.ok_or_else(|| Error::bad_results(format!("read run {}: missing key `scores_file`", path.display())))?;
    Ok(ShardRun { path: path.to_path_buf(), run, dump, index, count })
}

/// What `benchctl merge` joins.
#[derive(Debug, Clone)]
pub struct MergePlan {
    /// The shard run files, their score dumps beside them.
    pub runs: Vec<PathBuf>,
    /// The suite's data, if not where the shards found it.
    pub data_dir: Option<PathBuf>,
}

/// Merges the shard runs into one run, not yet stored.
pub fn run(args: &MergePlan) -> Result<Evaluation> {
    let mut shards = args.runs.iter().map(|p| read_shard(p)).collect::<Result<Vec<_>>>()?;
    shards.sort_by_key(|s| s.index);
    let first = shards.first().ok_or_else(|| usage("merge: name the shard run files".into()))?;
    let n = first.count;
    let indices: Vec<usize> = shards.iter().map(|s| s.index).collect();
    if shards.iter().any(|s| s.count != n) || indices != (0..n).collect::<Vec<_>>() {
        let got: Vec<String> = shards.iter().map(|s| format!("{}/{}", s.index, s.count)).collect();
        return Err(usage(format!("merge: need shards 0/{n} … {}/{n} once each, got {}", n - 1, got.join(", "))));
    }
    for s in &shards[1..] {
        let (a, b) = (&first.run, &s.run);
        let same = a.model == b.model
            && a.suite.id == b.suite.id
            && a.suite.ties == b.suite.ties
            && a.data_fingerprint == b.data_fingerprint
            && a.image_fingerprint == b.image_fingerprint
            && a.batch_size == b.batch_size;
        if !same {
            return Err(usage(format!(
                "merge {} with {}: shards must share model, suite, data fingerprint and batch size",
                s.path.display(),
                first.path.display()
            )));
        }
    }
    let base = &first.run;
    let info = base.suite.info()?;
    let data_dir = args.data_dir.clone().unwrap_or_else(|| PathBuf::from(&base.suite.data_dir));
    let mut suite = info.load(&data_dir)?;
    suite.summary.ties = benchctl_scoring::metrics::Ties::from_name(&base.suite.ties).ok_or_else(|| {
        Error::new(
            ErrorKind::Data,
            format!("merge: the shards' tie rule `{}` is not strict, first or shared", base.suite.ties),
        )
    })?;
    // The shards' bootstrap unit: items where they asked for items (no rule recorded).
    if base.bootstrap.as_ref().is_some_and(|b| b.rule.is_none()) {
        crate::plan::BootstrapUnit::Items.apply(&mut suite.summary);
    }
    let data_fingerprint = fingerprint(&suite)?;
    if data_fingerprint != base.data_fingerprint {
        return Err(Error::new(
            ErrorKind::Data,
            format!(
                "merge: the data in {} is not the data the shards evaluated (fingerprints differ)",
                data_dir.display()
            ),
        ));
    }
    let dumps: Vec<PathBuf> = shards.iter().map(|s| s.dump.clone()).collect();
    let (scores, replies) = crate::dump::from_dumps(&suite, &dumps, base.model.score_kind())?;
    let report = suite.evaluate(&scores)?;
    let (intervals, bootstrap) = bootstrap_intervals(&suite, &scores, &|_| None)?;

    // The shards' work and time add up; the unique inputs are the suite's, the same in each.
    let mut counts = Counts {
        unique_images: base.counts.unique_images,
        unique_texts: base.counts.unique_texts,
        captions_truncated: base.counts.captions_truncated,
        text_context: base.counts.text_context,
        ..Default::default()
    };
    let mut timings = Timings::default();
    for s in &shards {
        counts.add_work(&s.run.counts);
        timings.add(&s.run.timings);
    }
    let started_at = shards.iter().map(|s| s.run.started_at.clone()).min().unwrap_or_default();
    let run = Run {
        started_at,
        model: base.model.clone(),
        suite: results::SuiteRecord { ties: base.suite.ties.clone(), ..results::SuiteRecord::of(&suite) },
        batch_size: base.batch_size,
        counts,
        timings,
        report,
        intervals,
        bootstrap,
        tool_commit: base.tool_commit.clone(),
        data_fingerprint,
        // Every shard hashed the whole suite's images (they agree, checked above).
        image_fingerprint: base.image_fingerprint.clone(),
        shard: None,
    };
    Ok(Evaluation { run, outcome: Outcome::Items { suite: Box::new(suite), scores, replies: replies.map(Box::new) } })
}
