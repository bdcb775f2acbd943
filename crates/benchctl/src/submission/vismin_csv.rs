//! VisMin-bench's submission CSV (the README of `vismin-bench/` in
//! github.com/rabiulcste/vismin, scored by its `metric.py`), in two forms:
//! - **similarities** for its 2 × 2 items: `id,T0_I0,T0_I1,T1_I0,T1_I1`, `Tt_Ii` the score of
//!   text t with image i (`compute_contrastive_accuracy`);
//! - **answers** for its VQA form: `id,Text_Q0,Text_Q1,Image_Q0,Image_Q1`, the label answered to
//!   the text question asked of image 0 and of image 1 (`A`, `B`), and to the image question
//!   of caption 0 and of caption 1 (`First`, `Second`), empty where none was chosen
//!   (`compute_vqa_accuracy` compares each with the label of `solutions/vqa_solution.csv`).
//!
//! Scores are written as the shortest decimal that reads back to the same `f64`, so the
//! official scorer compares exactly what the run compared. A file may have more columns
//! (`category`); they are not read.

use std::ops::Range;
use std::path::Path;

use benchctl_scoring::metrics::answers::split_asked;
use benchctl_scoring::metrics::Ties;
use benchctl_scoring::{ScoreKind, ScoreTensor, LOG_ZERO};
use benchctl_suites::{ItemRef, Suite};

use super::Written;
use crate::dump::{bad, Matrices};
use crate::Result;

/// The file name a run's CSV is written to.
pub const FILE: &str = "vismin.csv";

/// The similarity columns: `Tt_Ii` is (image i, text t).
const SIMILARITIES: [(&str, usize, usize); 4] = [("T0_I0", 0, 0), ("T0_I1", 1, 0), ("T1_I0", 0, 1), ("T1_I1", 1, 1)];

/// The answer columns: (candidate, question) of the VQA form's items, whose candidates are
/// image 0, image 1 and both together, and whose questions are the text question (asked of
/// each image alone) and the image question of caption 0 and of caption 1 (asked of both).
const ANSWERS: [(&str, usize, usize); 4] =
    [("Text_Q0", 0, 0), ("Text_Q1", 1, 0), ("Image_Q0", 2, 1), ("Image_Q1", 2, 2)];

/// Which form a header line is, if either.
fn form_of(header: &[String]) -> Option<&'static [(&'static str, usize, usize); 4]> {
    let has = |columns: &[(&str, usize, usize); 4]| {
        header.iter().any(|h| h == "id") && columns.iter().all(|(name, _, _)| header.iter().any(|h| h == name))
    };
    [&SIMILARITIES, &ANSWERS].into_iter().find(|form| has(form))
}

/// Whether a file's first line is the header of either form.
pub(super) fn is_header(first_line: &str) -> bool {
    let fields: Vec<String> = first_line.trim_end().split(',').map(|f| f.trim_matches('"').to_string()).collect();
    form_of(&fields).is_some()
}

/// A run's scores (its suite of 2 × 2 items) or answers (its VQA form) as the CSV; `None`,
/// with a note, where an answer cannot be written.
pub(super) fn written(suite: &Suite, scores: &ScoreTensor) -> Result<Option<Written>> {
    let asks = suite.summary.family.facts().asks_questions;
    let (columns, about) = match asks {
        false => (&SIMILARITIES, "each item's similarity of text t with image i, Tt_Ii"),
        true => (&ANSWERS, "each question's answer, empty where none was chosen"),
    };
    let mut text = String::from("id");
    columns.iter().for_each(|(name, _, _)| text.extend([",", name]));
    text.push('\n');
    let mut shared = 0;
    for (n, item) in suite.items.iter().enumerate() {
        text.push_str(&csv_field(item.id()));
        for &(_, k, q) in columns {
            let cell = match asks {
                false => similarity(item, scores, n, (k, q))?.to_string(),
                true => match answer(item, scores, n, (k, q), suite.summary.ties)? {
                    Answer::One(option) => option.to_string(),
                    Answer::None => String::new(),
                    Answer::Several => {
                        shared += 1;
                        String::new()
                    }
                },
            };
            text.push(',');
            text.push_str(&csv_field(&cell));
        }
        text.push('\n');
    }
    if shared > 0 {
        benchctl_base::stderr_line!(
            "note: the answers are not written as VisMin's submission CSV: {shared} of them tie between options, which the run counts as answered (--ties shared) and the CSV cannot say"
        );
        return Ok(None);
    }
    Ok(Some(Written {
        file: FILE,
        bytes: text.into_bytes(),
        about: format!(
            "{} items, {about}: VisMin-bench's submission CSV; `score --format vismin-csv` reads it back",
            suite.items.len()
        ),
    }))
}

/// A field as Python's `csv` module writes it: quoted where it holds a comma, quote or line break.
fn csv_field(value: &str) -> String {
    match value.contains([',', '"', '\n', '\r']) {
        true => format!("\"{}\"", value.replace('"', "\"\"")),
        false => value.to_string(),
    }
}

fn not_two_by_two(item: ItemRef<'_>) -> crate::Error {
    bad(format!(
        "write item `{}` as VisMin's submission CSV: it is {} image(s) × {} text(s), not 2 × 2",
        item.id(),
        item.image_count(),
        item.text_count()
    ))
}

/// The score of (image, text) of a 2 × 2 item.
fn similarity(item: ItemRef<'_>, scores: &ScoreTensor, n: usize, (image, text): (usize, usize)) -> Result<f64> {
    if (item.image_count(), item.text_count()) != (2, 2) {
        return Err(not_two_by_two(item));
    }
    Ok(scores.item(n).get(image, text))
}

/// What a question asked of a candidate was answered.
enum Answer<'a> {
    One(&'a str),
    /// No option chosen: a tie the run counts as a miss, or every option of probability zero.
    None,
    /// Options tied at the top, each counted as chosen (`--ties shared`).
    Several,
}

/// The texts of question `q` of a VQA-form item (its options, consecutive), checked to be the
/// form's: three questions of two options, the first asked of images 0 and 1 alone, the others
/// of both together.
fn question(item: ItemRef<'_>, q: usize) -> Result<Range<usize>> {
    let truth = item.truth();
    let asked = |k: usize, t: usize| truth.is_asked(k, t);
    let fits = item.image_count() == 3
        && item.text_count() == 6
        && (0..3).all(|k| (0..6).all(|t| asked(k, t) == if t < 2 { k < 2 } else { k == 2 }));
    if !fits {
        return Err(bad(format!(
            "write item `{}` as VisMin's submission CSV: it is not VisMin's VQA form (images 0 and 1 each asked the text question, both together the two image questions)",
            item.id()
        )));
    }
    Ok(2 * q..2 * q + 2)
}

/// The answer the scores give to question `q` asked of candidate `k`.
fn answer<'i>(
    item: ItemRef<'i>,
    scores: &ScoreTensor,
    n: usize,
    (k, q): (usize, usize),
    ties: Ties,
) -> Result<Answer<'i>> {
    let options = question(item, q)?;
    let matrix = scores.item(n);
    let top = options.clone().map(|t| matrix.get(k, t)).fold(f64::NEG_INFINITY, f64::max);
    let at_top: Vec<usize> = options.filter(|&t| matrix.get(k, t) == top).collect();
    Ok(match (at_top.as_slice(), ties) {
        _ if top <= LOG_ZERO => Answer::None,
        ([t], _) => Answer::One(split_asked(item.text(*t)).map_or("", |(_, option)| option)),
        (_, Ties::Shared) => Answer::Several,
        _ => Answer::None,
    })
}

/// Reads a CSV of either form into `m`; returns the kind its values are (answers: 0 for the
/// option chosen, [`LOG_ZERO`] for the others, as replies are read).
pub(super) fn read(path: &Path, suite: &Suite, m: &mut Matrices) -> Result<Option<ScoreKind>> {
    let text = super::read_text(path, "a submission CSV")?;
    let at = |line: usize| format!("{} line {line}", path.display());
    let mut rows = benchctl_suites::manifest::delimited_rows(&text, ',')
        .map_err(|e| bad(format!("read {}: {e}", path.display())))?
        .into_iter()
        .filter(|(_, fields)| !(fields.len() == 1 && fields[0].is_empty()));
    let (_, header) =
        rows.next().ok_or_else(|| bad(format!("read {}: it is empty (no header row)", path.display())))?;
    let form = form_of(&header).ok_or_else(|| {
        bad(format!(
            "read {}: its header is neither `id,T0_I0,T0_I1,T1_I0,T1_I1` nor `id,Text_Q0,Text_Q1,Image_Q0,Image_Q1`",
            path.display()
        ))
    })?;
    let column = |name: &str| header.iter().position(|h| h == name).unwrap_or(0);
    let id_column = column("id");
    let asks = std::ptr::eq(form, &ANSWERS);
    if asks != suite.summary.family.facts().asks_questions {
        let (holds, wants) = match asks {
            true => ("answers (VisMin's VQA form)", "similarities of 2 × 2 items"),
            false => ("similarities (VisMin's 2 × 2 items)", "answers to its questions"),
        };
        return Err(bad(format!(
            "read {}: it holds {holds}, and {} is scored from {wants} (`vismin` takes the similarities, `vismin-vqa` the answers)",
            path.display(),
            suite.id
        )));
    }
    let mut unknown: Vec<String> = Vec::new();
    for (line, fields) in rows {
        if fields.len() != header.len() {
            return Err(bad(format!("read {}: {} field(s), the header {}", at(line), fields.len(), header.len())));
        }
        let item = m.item(&fields[id_column], &at(line))?;
        let item_ref = suite.items.item(item);
        for &(name, k, q) in form {
            let value = &fields[column(name)];
            let where_ = format!("{} column {name}", at(line));
            if !asks {
                let score: f64 =
                    value.trim().parse().map_err(|_| bad(format!("read {where_}: `{value}` is not a number")))?;
                m.set(item, k, q, score, &where_)?;
                continue;
            }
            let options = question(item_ref, q)?;
            let named = options.clone().find(|&t| split_asked(item_ref.text(t)).is_some_and(|(_, o)| o == value));
            if named.is_none() && !value.is_empty() {
                unknown.push(format!("{value:?} ({where_})"));
            }
            for t in options {
                m.set(item, k, t, if Some(t) == named { 0.0 } else { LOG_ZERO }, &where_)?;
            }
        }
    }
    if let Some(first) = unknown.first() {
        benchctl_base::stderr_line!(
            "warning: {} answer(s) are none of their question's options and count as wrong, as the official comparison counts them: first {first}",
            unknown.len()
        );
    }
    Ok(asks.then_some(ScoreKind::LogProbability))
}
