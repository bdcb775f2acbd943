//! NaturalBench's output list: its evaluation (`naturalbench_vqa.py` of
//! github.com/Baiqi-Li/NaturalBench) keeps a model's generated replies as one JSON list,
//! `output_file`: per item, each question asked of each image, question by question
//! ([`official_order`]), each read by its `extract_answer`. A run that generated replies
//! writes them so; `score --format naturalbench-outputs` reads such a list.

use std::ops::Range;
use std::path::Path;

use benchctl_scoring::metrics::answers::split_asked;
use benchctl_suites::{ItemRef, ReplyReading, Suite};
use serde_json::Value;

use super::Written;
use crate::dump::Matrices;
use crate::replies::ItemReplies;
use crate::{Error, ErrorKind, Result};

/// The file name a run's list is written to.
pub const FILE: &str = "outputs.json";

/// A run's replies as the official output list, or `None` (with a note) where a reply is
/// missing: the official code reads a reply of every entry.
pub(super) fn written(suite: &Suite, replies: &ItemReplies) -> Result<Option<Written>> {
    let Some(outputs) = official_outputs(suite, replies) else { return Ok(None) };
    let unknown = outputs.iter().filter(|o| o.is_none()).count();
    if unknown > 0 {
        benchctl_base::stderr_line!(
            "note: the replies are not written as NaturalBench's output list: {unknown} of them were not kept by the cache"
        );
        return Ok(None);
    }
    let text = serde_json::to_string_pretty(&outputs).map_err(|e| Error::results(format!("format replies: {e}")))?;
    Ok(Some(Written {
        file: FILE,
        bytes: (text + "\n").into_bytes(),
        about: format!(
            "{} replies, each question asked of each image, item by item: NaturalBench's output_file; `score --format naturalbench-outputs` reads it back",
            outputs.len()
        ),
    }))
}

/// An item's replies in the official order: `(image, texts of the question)` for each question
/// (its options' texts, consecutive) and each image, question by question; `None` for an item
/// that is not questions with answer options asked of every image.
pub fn official_order(item: ItemRef<'_>) -> Option<Vec<(usize, Range<usize>)>> {
    let asked: Vec<(&str, &str)> = item.texts().map(split_asked).collect::<Option<_>>()?;
    // A question's options are consecutive texts; the same question asked twice starts again
    // at an option it already has.
    let mut questions: Vec<Range<usize>> = Vec::new();
    for (t, &(question, option)) in asked.iter().enumerate() {
        match questions.last_mut() {
            Some(last) if asked[last.start].0 == question && !asked[last.clone()].iter().any(|a| a.1 == option) => {
                last.end = t + 1
            }
            _ => questions.push(t..t + 1),
        }
    }
    let truth = item.truth();
    let mut cells = Vec::new();
    for question in questions {
        for image in 0..item.image_count() {
            if !truth.is_asked(image, question.start) {
                return None;
            }
            cells.push((image, question.clone()));
        }
    }
    Some(cells)
}

/// A run's replies as the official output list (`None` for a reply the run does not hold), or
/// `None` where the suite's items are not all questions asked of every image.
fn official_outputs(suite: &Suite, replies: &ItemReplies) -> Option<Vec<Option<String>>> {
    let mut outputs = Vec::new();
    for (n, item) in suite.items.iter().enumerate() {
        let rows: Value = replies.json(n).and_then(|json| serde_json::from_str(json).ok()).unwrap_or(Value::Null);
        for (image, question) in official_order(item)? {
            outputs.push(rows[image][question.start].as_str().map(str::to_string));
        }
    }
    Some(outputs)
}

/// Reads an official output list into `m`: each reply read for each of its question's options as
/// `reading` (the suite's official code's) reads replies (0 where it gives the option,
/// [`LOG_ZERO`] where not), and kept as the cells' replies.
///
/// [`LOG_ZERO`]: benchctl_scoring::LOG_ZERO
pub(super) fn read(path: &Path, suite: &Suite, reading: ReplyReading, m: &mut Matrices) -> Result<()> {
    let bad = |what: String| Error::new(ErrorKind::Data, format!("read {}: {what}", path.display()));
    let text = super::read_text(path, "an output list")?;
    let outputs: Vec<Value> =
        serde_json::from_str(&text).map_err(|e| bad(format!("not a JSON list of replies ({e})")))?;
    let orders: Vec<Vec<(usize, std::ops::Range<usize>)>> = suite
        .items
        .iter()
        .map(|item| official_order(item).ok_or_else(|| bad(format!("item `{}` of {} is not questions with answer options asked of every image: it has no official output list", item.id(), suite.id))))
        .collect::<Result<_>>()?;
    let wanted: usize = orders.iter().map(Vec::len).sum();
    if outputs.len() != wanted {
        return Err(bad(format!(
            "it holds {} replies; {} has {wanted} (each question asked of each image, item by item)",
            outputs.len(),
            suite.id
        )));
    }
    let mut at = 0;
    for (n, (item, order)) in suite.items.iter().zip(orders).enumerate() {
        let mut rows = vec![vec![Value::Null; item.text_count()]; item.image_count()];
        let texts: Vec<&str> = item.texts().collect();
        for (image, question) in order {
            let reply =
                outputs[at].as_str().ok_or_else(|| bad(format!("entry {at} is not a string: {}", outputs[at])))?;
            for t in question {
                let option = split_asked(texts[t]).map_or("", |(_, option)| option);
                let read = benchctl_models::vqascore::reply::names(reading, reply, option);
                let score = if read { 0.0 } else { benchctl_scoring::LOG_ZERO };
                m.set(n, image, t, score, &format!("{} entry {at}", path.display()))?;
                rows[image][t] = Value::from(reply);
            }
            at += 1;
        }
        m.set_replies(n, &Value::from(rows), &format!("{} item `{}`", path.display(), item.id()))?;
    }
    Ok(())
}
