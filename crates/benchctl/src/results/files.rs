//! Run files and score dumps on disk: written whole or not at all ([`store`]), read back
//! bounded ([`read_run_file`], [`dump_lines`]).

use std::io::Write;
use std::path::{Path, PathBuf};

use benchctl_scoring::ScoreTensor;
use benchctl_suites::Suite;
use serde::Deserialize;

use super::Run;
use crate::{Error, ErrorKind, Result};

/// The score dump of an item suite: one line per item with its id and K×L scores, its L×L
/// text–text scores (`text_scores`) where the run has them, and its K×L generated replies
/// (`replies`) where the run generated them.
pub fn item_dump<'a>(
    suite: &'a Suite,
    scores: &'a ScoreTensor,
    replies: Option<&'a crate::replies::ItemReplies>,
) -> impl Iterator<Item = String> + 'a {
    // At the scores' own precision: f32 model scores print as they did, f64 external scores
    // keep every digit.
    let rows = |matrix: benchctl_scoring::ScoreMatrix<'_>| -> Vec<Vec<f64>> {
        (0..matrix.images()).map(|k| (0..matrix.texts()).map(|l| matrix.get(k, l)).collect()).collect()
    };
    suite.items.iter().zip(scores.iter()).enumerate().map(move |(i, (item, matrix))| {
        let mut line = serde_json::json!({"id": item.id(), "scores": rows(matrix)});
        if let Some(text) = scores.text_scores(i) {
            line["text_scores"] = serde_json::json!(rows(text));
        }
        let mut line = line.to_string();
        // Kept as JSON text: spliced in, not parsed again.
        if let Some(json) = replies.and_then(|r| r.json(i)) {
            line.pop();
            line.push_str(",\"replies\":");
            line.push_str(json);
            line.push('}');
        }
        line
    })
}

/// Writes the run and its dump (one JSON line each) under `results_dir/runs/`; returns the
/// run file. Files are written to a temporary name and renamed, so a crash leaves no half file.
pub fn store(
    results_dir: &Path,
    run: &Run,
    dump_lines: impl IntoIterator<Item = impl std::fmt::Display>,
) -> Result<PathBuf> {
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
    // Written line by line as made: a million items' dump is never held whole.
    write_atomically(&scores_path, |out| dump_lines.into_iter().try_for_each(|line| writeln!(out, "{line}")))?;
    crate::fault::at("store-dump", 0);
    let mut json = run.to_json();
    json["scores_file"] = serde_json::Value::from(format!("{stem}.scores.jsonl"));
    let text = serde_json::to_string_pretty(&json).map_err(|e| Error::results(format!("format run: {e}")))? + "\n";
    let run_path = runs.join(format!("{stem}.json"));
    if let Err(e) = write_atomically(&run_path, |out| out.write_all(text.as_bytes())) {
        // A dump no run file names would only be litter (and block nothing): remove it.
        let _ = std::fs::remove_file(&scores_path);
        return Err(e);
    }
    Ok(run_path)
}

/// Writes `path` whole or not at all: `write` fills a temporary `<path>.partial`, which is
/// synced to disk and renamed.
fn write_atomically(path: &Path, write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = PathBuf::from(tmp);
    let write = || -> std::io::Result<()> {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        write(&mut out)?;
        out.into_inner().map_err(std::io::IntoInnerError::into_error)?.sync_all()
    };
    if let Err(e) = write() {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::results(format!("write {}: {e}", tmp.display())));
    }
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

/// The largest run file read back (a run's report with every breakdown is kilobytes).
pub const MAX_RUN_FILE_BYTES: u64 = 64 << 20;

/// The largest score dump read whole ([`read_scores`]; streamed dumps are bounded per line).
pub const MAX_DUMP_BYTES: u64 = 4 << 30;

/// A results file's text: a regular file (not a FIFO or a device such as `/dev/zero`, which
/// could block or never end) of at most `max` bytes.
fn read_bounded(path: &Path, max: u64) -> Result<String> {
    use std::io::Read;
    let read = |e: String| Error::bad_results(format!("read {}: {e}", path.display()));
    benchctl_suites::paths::require_regular_file(path)
        .map_err(|e| Error::caused_by(ErrorKind::BadResults, e.to_string(), e))?;
    let file = std::fs::File::open(path).map_err(|e| read(e.to_string()))?;
    let mut text = String::new();
    file.take(max + 1).read_to_string(&mut text).map_err(|e| read(e.to_string()))?;
    if text.len() as u64 > max {
        return Err(read(format!("it is larger than {max} bytes, more than a results file holds")));
    }
    Ok(text)
}

/// Reads a run file (as `store` writes it), naming the file in errors.
pub fn read_run_file(path: &Path) -> Result<RunFile> {
    let text = read_bounded(path, MAX_RUN_FILE_BYTES)?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::bad_results(format!("parse {}: {e}", path.display())))?;
    let run = Run::from_json(&json)
        .map_err(|e| Error::caused_by(ErrorKind::BadResults, format!("read run {}: {e}", path.display()), e))?;
    let dump = json.get("scores_file").and_then(|f| f.as_str()).map(|f| path.with_file_name(f));
    Ok(RunFile { run, dump })
}

/// Each non-empty line of `path` parsed as JSON, with where it is (`<path> line <n>`), read as a
/// stream (a dump of a million lines is never held whole) as annotation files are read: a UTF-8
/// byte order mark dropped, `\r\n` line ends taken, a byte that is not UTF-8 named with its
/// offset. Every error is of `kind`; `named_as` says what the file is when it cannot be read.
pub fn json_lines<'p>(
    path: &'p Path,
    named_as: &str,
    kind: ErrorKind,
) -> Result<impl Iterator<Item = Result<(String, serde_json::Value)>> + 'p> {
    let unreadable = move |e: benchctl_suites::Error| Error::caused_by(kind, e.to_string(), e);
    let lines = benchctl_suites::paths::TextLines::open(path, named_as).map_err(unreadable)?;
    Ok(lines.filter_map(move |line| match line {
        Err(e) => Some(Err(unreadable(e))),
        Ok((_, line)) if line.trim().is_empty() => None,
        Ok((number, line)) => {
            let at = format!("{} line {number}", path.display());
            Some(match serde_json::from_str(&line) {
                Ok(json) => Ok((at, json)),
                Err(e) => Err(Error::caused_by(kind, format!("parse {at}: {e}"), e)),
            })
        }
    }))
}

/// A score dump's lines, in file order (blank lines skipped), each checked to be JSON and
/// given back in compact form, as a stream ([`json_lines`]).
pub fn dump_lines(path: &Path) -> Result<impl Iterator<Item = Result<String>> + '_> {
    let lines = json_lines(path, "the score dump its run file names", ErrorKind::BadResults)?;
    Ok(lines.map(|line| line.map(|(_, json)| json.to_string())))
}

/// Reads a score dump back: item ids and their K×L scores, in file order; a cell its item does
/// not ask (null in the dump) is NaN.
pub fn read_scores(path: &Path) -> Result<Vec<(String, Vec<Vec<f32>>)>> {
    let text = read_bounded(path, MAX_DUMP_BYTES)?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, line)| {
            #[derive(Deserialize)]
            struct Line {
                id: String,
                scores: Vec<Vec<Option<f32>>>,
            }
            let l: Line = serde_json::from_str(line)
                .map_err(|e| Error::bad_results(format!("parse {} line {}: {e}", path.display(), i + 1)))?;
            let rows = l.scores.into_iter().map(|row| row.into_iter().map(|s| s.unwrap_or(f32::NAN)).collect());
            Ok((l.id, rows.collect()))
        })
        .collect()
}
