//! Score dumps read back: an item suite's `N × K × L` scores from dump lines (a run file's
//! dump, a stored run's rows, `score`'s input), each item checked as it is read.

use std::path::{Path, PathBuf};

use benchctl_base::spill::{SpillVec, Strings};
use benchctl_scoring::{ScoreKind, ScoreTensor};
use benchctl_suites::Suite;
use serde_json::Value;

use crate::replies::ItemReplies;
use crate::results;
use crate::{Error, ErrorKind, Result};

pub(crate) fn bad(message: String) -> Error {
    Error::new(ErrorKind::Data, message)
}

/// Every item's K×L scores as they arrive, NaN until set: one flat spilled array with where
/// each item's start, and the items found by id through a spilled table of positions (a dump of
/// a million items is never a million small allocations). Text–text scores (L×L per item), when
/// the dump has any, fill a second such array.
pub(crate) struct Matrices<'a> {
    suite: &'a Suite,
    index: benchctl_base::spill::Index,
    scores: Cells,
    text: Option<Cells>,
    /// The generated replies of the items whose lines have them (`replies`).
    replies: Option<ItemReplies>,
}

/// One value per (row, column) of every item, NaN until set.
struct Cells {
    start: SpillVec<usize>,
    values: SpillVec<f64>,
}

impl Cells {
    fn new(suite: &Suite, size: impl Fn(&benchctl_suites::ItemRef<'_>) -> usize) -> Self {
        let mut start = SpillVec::with_capacity(suite.items.len() + 1);
        start.push(0);
        for (i, item) in suite.items.iter().enumerate() {
            start.push(start[i] + size(&item));
        }
        let values = SpillVec::from_elem(f64::NAN, start[suite.items.len()]);
        Self { start, values }
    }

    fn of(&self, item: usize) -> &[f64] {
        &self.values[self.start[item]..self.start[item + 1]]
    }

    /// The first few items with an unset value where their truth asks one (`asked`), and how
    /// many there are.
    fn unset<'s>(&self, suite: &'s Suite, asked: bool) -> (Vec<&'s str>, usize) {
        let missing = |i: usize, item: &benchctl_suites::ItemRef<'_>| {
            let (truth, texts) = (item.truth(), item.text_count().max(1));
            self.of(i).iter().enumerate().any(|(c, s)| s.is_nan() && (!asked || truth.is_asked(c / texts, c % texts)))
        };
        let mut unset = suite.items.iter().enumerate().filter(|(i, item)| missing(*i, item));
        let shown: Vec<&str> = unset.by_ref().take(5).map(|(_, item)| item.id()).collect();
        let count = shown.len() + unset.count();
        (shown, count)
    }
}

impl<'a> Matrices<'a> {
    pub(crate) fn new(suite: &'a Suite) -> Self {
        let mut index = benchctl_base::spill::Index::default();
        for (i, item) in suite.items.iter().enumerate() {
            // The loaders refuse duplicate ids, so every id is new here.
            index.find_or_add(item.id(), i, |at| suite.items.item(at).id() == item.id());
        }
        let scores = Cells::new(suite, |item| item.image_count() * item.text_count());
        Self { suite, index, scores, text: None, replies: None }
    }

    pub(crate) fn item(&self, id: &str, at: &str) -> Result<usize> {
        let found = self.index.find(id, |i| self.suite.items.item(i).id() == id);
        found.map(|i| i as usize).ok_or_else(|| bad(format!("score {at}: no item `{id}` in {}", self.suite.id)))
    }

    pub(crate) fn set(&mut self, item: usize, image: usize, text: usize, score: f64, at: &str) -> Result<()> {
        let it = self.suite.items.item(item);
        if image >= it.image_count() || text >= it.text_count() {
            return Err(bad(format!(
                "score {at}: item `{}` has {} image(s) and {} text(s), not image {image} and text {text}",
                it.id(),
                it.image_count(),
                it.text_count()
            )));
        }
        let slot = self.scores.start[item] + image * it.text_count() + text;
        set_once(&mut self.scores.values[slot], score, || {
            format!("score {at}: item `{}` image {image} text {text}", it.id())
        })
    }

    /// Item `item`'s text–text score of texts `a` and `b`.
    pub(crate) fn set_text(&mut self, item: usize, a: usize, b: usize, score: f64, at: &str) -> Result<()> {
        let it = self.suite.items.item(item);
        let texts = it.text_count();
        if a >= texts || b >= texts {
            return Err(bad(format!(
                "score {at}: item `{}` has {texts} text(s), so no text score [{a}][{b}]",
                it.id()
            )));
        }
        let suite = self.suite;
        let cells = self.text.get_or_insert_with(|| Cells::new(suite, |item| item.text_count() * item.text_count()));
        let slot = cells.start[item] + a * texts + b;
        set_once(&mut cells.values[slot], score, || format!("score {at}: item `{}` text score [{a}][{b}]", it.id()))
    }

    /// Item `item`'s generated replies, from its line's `replies`.
    pub(crate) fn set_replies(&mut self, item: usize, line_replies: &Value, at: &str) -> Result<()> {
        let it = self.suite.items.item(item);
        let items = self.suite.items.len();
        let replies = self.replies.get_or_insert_with(|| ItemReplies::new(items));
        replies.set_from_line(item, line_replies, it.image_count(), it.text_count(), at)
    }

    /// The generated replies read, where any line had them.
    pub(crate) fn take_replies(&mut self) -> Option<ItemReplies> {
        self.replies.take()
    }

    /// The score tensor, or an error naming the first unscored items (or the first items
    /// without text scores, when some items have them).
    pub(crate) fn finish(self, source: &Path, kind: ScoreKind) -> Result<ScoreTensor> {
        // Counted, and the first few named: all of a million items may lack scores.
        for (cells, what, asked) in [(Some(&self.scores), "scores", true), (self.text.as_ref(), "text scores", false)] {
            let Some(cells) = cells else { continue };
            let (shown, count) = cells.unset(self.suite, asked);
            if !shown.is_empty() {
                return Err(bad(format!(
                    "score {}: {count} item(s) lack {what}, e.g. {}",
                    source.display(),
                    shown.join(", ")
                )));
            }
        }
        let mut tensor = ScoreTensor::of_kind(kind);
        for (i, item) in self.suite.items.iter().enumerate() {
            let truth = item.truth();
            let mut pushed = if truth.asks_every_cell() {
                tensor.push_exact_asked(truth, self.scores.of(i))
            } else {
                // A value given for a cell the item does not ask is no score of it: dropped.
                let texts = item.text_count().max(1);
                let scores: Vec<f64> = (self.scores.of(i).iter().enumerate())
                    .map(|(c, &s)| if truth.is_asked(c / texts, c % texts) { s } else { f64::NAN })
                    .collect();
                tensor.push_exact_asked(truth, &scores)
            };
            if let (Ok(()), Some(text)) = (&pushed, &self.text) {
                pushed = tensor.push_text_scores(text.of(i));
            }
            pushed.map_err(|e| bad(format!("score {} item `{}`: {e}", source.display(), item.id())))?;
        }
        Ok(tensor)
    }
}

/// Sets a NaN `slot` to a finite `score`; `what` names the cell in errors.
fn set_once(slot: &mut f64, score: f64, what: impl Fn() -> String) -> Result<()> {
    if !score.is_finite() {
        return Err(bad(format!("{}: the score {score} is not a finite number", what())));
    }
    if !slot.is_nan() {
        return Err(bad(format!("{} is scored twice", what())));
    }
    *slot = score;
    Ok(())
}

/// What a score file that cannot be opened is named as.
pub(crate) const SCORE_FILE: &str = "the file given to `--scores`";

/// Each non-empty line of the score file at `path` parsed as JSON, with where it is
/// ([`results::json_lines`]); its problems are bad data.
pub(crate) fn lines(path: &Path) -> Result<impl Iterator<Item = Result<(String, Value)>> + '_> {
    results::json_lines(path, SCORE_FILE, ErrorKind::Data)
}

pub(crate) fn read_dump(path: &Path, m: &mut Matrices) -> Result<()> {
    read_dump_lines(lines(path)?, m)
}

fn read_dump_lines(lines: impl IntoIterator<Item = Result<(String, Value)>>, m: &mut Matrices) -> Result<()> {
    for line in lines {
        let (at, line) = line?;
        let (id, scores, text_scores) = item_line(&line, &at)?;
        let item = m.item(id, &at)?;
        for score in scores {
            let (k, l, value) = score?;
            m.set(item, k, l, value, &at)?;
        }
        for score in text_scores.into_iter().flatten() {
            let (a, b, value) = score?;
            m.set_text(item, a, b, value, &at)?;
        }
        if let Some(replies) = line.get("replies") {
            m.set_replies(item, replies, &at)?;
        }
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
        for (a, b, score) in lines.text_scores(i) {
            m.set_text(item, a, b, score, &at)?;
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
    /// Where each item's text–text scores end in `text_values` (and `text_cells`).
    text_ends: SpillVec<usize>,
    text_values: SpillVec<f64>,
    /// Each text–text score's (text, text).
    text_cells: SpillVec<(u32, u32)>,
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
            let (id, scores, text_scores) = item_line(&line, &at)?;
            for score in scores {
                let (k, l, value) = score?;
                out.values.push(value);
                out.cells.push((k as u32, l as u32));
            }
            for score in text_scores.into_iter().flatten() {
                let (a, b, value) = score?;
                out.text_values.push(value);
                out.text_cells.push((a as u32, b as u32));
            }
            out.item_ends.push(out.values.len());
            out.text_ends.push(out.text_values.len());
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
        span(&self.item_ends, i)
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

    /// Item `i`'s text–text scores with their (text, text), if its line has them.
    pub fn text_scores(&self, i: usize) -> impl Iterator<Item = (usize, usize, f64)> + '_ {
        let span = span(&self.text_ends, i);
        let cells = self.text_cells[span.clone()].iter().zip(&self.text_values[span]);
        cells.map(|(&(a, b), &v)| (a as usize, b as usize, v))
    }
}

/// Item `i`'s range in arrays where item `n` ends at `ends[n]`.
fn span(ends: &[usize], i: usize) -> std::ops::Range<usize> {
    (if i == 0 { 0 } else { ends[i - 1] })..ends[i]
}

/// One score of an item line: (image, text, score), or for text–text scores (text, text, score).
type Cell = (usize, usize, f64);

/// The scores of one matrix of an item line, each checked as it is read.
type CellIter<'v> = Box<dyn Iterator<Item = Result<Cell>> + 'v>;

/// An item line's id, its scores and its text–text scores if it has them (`text_scores`:
/// L rows of L), each checked as it is read.
fn item_line<'v>(line: &'v Value, at: &str) -> Result<(&'v str, CellIter<'v>, Option<CellIter<'v>>)> {
    let id = line.get("id").and_then(Value::as_str).ok_or_else(|| bad(format!("parse {at}: missing string `id`")))?;
    let scores = matrix_cells(line, "scores", at)?.ok_or_else(|| bad(format!("parse {at}: missing `scores` rows")))?;
    Ok((id, scores, matrix_cells(line, "text_scores", at)?))
}

/// The cells of the list of rows at `key` of a dump line, `None` when it has no such key.
fn matrix_cells<'v>(line: &'v Value, key: &'static str, at: &str) -> Result<Option<CellIter<'v>>> {
    let Some(rows) = line.get(key) else { return Ok(None) };
    let rows = rows.as_array().ok_or_else(|| bad(format!("parse {at}: `{key}` is not a list of rows")))?;
    let at = at.to_string();
    let cells = rows.iter().enumerate().flat_map(move |(k, row)| {
        let at = at.clone();
        let cells: CellIter<'v> = match row.as_array() {
            None => Box::new(std::iter::once(Err(bad(format!("parse {at}: row {k} of `{key}` is not a list"))))),
            // A null cell is one the item does not ask (its score dumped as null): left unset.
            Some(row) => {
                Box::new(row.iter().enumerate().filter(|(_, value)| !value.is_null()).map(move |(l, value)| {
                    let score =
                        value.as_f64().ok_or_else(|| bad(format!("parse {at}: `{key}` [{k}][{l}] is not a number")))?;
                    Ok((k, l, score))
                }))
            }
        };
        cells
    });
    Ok(Some(Box::new(cells)))
}

/// A suite's score tensor from our own score dumps, read in order (shards of one run).
pub(crate) fn from_dumps(
    suite: &Suite,
    dumps: &[PathBuf],
    kind: ScoreKind,
) -> Result<(ScoreTensor, Option<ItemReplies>)> {
    let mut matrices = Matrices::new(suite);
    for path in dumps {
        read_dump(path, &mut matrices)?;
    }
    let source = dumps.first().map(PathBuf::as_path).unwrap_or(Path::new("(no dumps)"));
    let replies = matrices.take_replies();
    Ok((matrices.finish(source, kind)?, replies))
}
