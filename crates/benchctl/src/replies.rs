//! Generated replies (`--answer-rule generate`) kept beside the scores read from them: one per
//! unique pair as the model generates it, the server sends it or the cache holds it
//! ([`Replies`] by pair), then each item's K×L cells' replies ([`ItemReplies`]), the score
//! dump's `replies` (docs/results.md). Every option of one question about one image was read
//! from one reply, so their cells hold the same text.
//! NaturalBench's list of them is a submission format (`crate::submission`).

use benchctl_base::spill::{SpillVec, Strings};
use serde_json::Value;

use crate::{Error, ErrorKind, Result};

/// Texts by index, each set once or not at all (spilled with the suite: a million items have
/// millions of pairs).
#[derive(Default)]
pub struct Replies {
    texts: Strings,
    /// Where each index's text is in `texts` ([`NONE`] while unset).
    at: SpillVec<u32>,
}

const NONE: u32 = u32::MAX;

impl Replies {
    /// `len` indices, none set.
    pub fn new(len: usize) -> Self {
        Self { texts: Strings::new(), at: SpillVec::from_elem(NONE, len) }
    }

    /// Sets index `i`'s text (a later text replaces it).
    pub fn set(&mut self, i: usize, text: &str) {
        self.at[i] = self.texts.len() as u32;
        self.texts.push(text);
    }

    /// Index `i`'s text, if set.
    pub fn get(&self, i: usize) -> Option<&str> {
        self.at.get(i).filter(|&&at| at != NONE).map(|&at| self.texts.get(at as usize))
    }

    /// How many indices there are.
    pub fn len(&self) -> usize {
        self.at.len()
    }

    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }
}

/// Each item's replies as its dump line's `replies`: K rows of L, a reply or `null` (a cell the
/// item does not ask, or a reply the cache did not keep), kept as JSON text, by item in suite
/// order.
pub struct ItemReplies {
    rows: Replies,
}

impl ItemReplies {
    /// `items` items, none with replies yet.
    pub fn new(items: usize) -> Self {
        Self { rows: Replies::new(items) }
    }

    /// Sets item `item`'s replies from its K×L cells (row-major; `None` where unasked).
    pub fn set_cells<'a>(&mut self, item: usize, texts: usize, cells: impl IntoIterator<Item = Option<&'a str>>) {
        let cells: Vec<Value> = cells.into_iter().map(|c| c.map_or(Value::Null, Value::from)).collect();
        let rows: Vec<Value> = cells.chunks(texts.max(1)).map(|row| Value::from(row.to_vec())).collect();
        self.rows.set(item, &Value::from(rows).to_string());
    }

    /// Sets item `item`'s replies from a dump line's `replies` (`line_replies`), checked to be
    /// `images` rows of `texts` strings or nulls; `at` names the line.
    pub fn set_from_line(
        &mut self,
        item: usize,
        line_replies: &Value,
        images: usize,
        texts: usize,
        at: &str,
    ) -> Result<()> {
        let bad = |why: &str| Error::new(ErrorKind::Data, format!("parse {at}: `replies` {why}"));
        let rows = line_replies.as_array().ok_or_else(|| bad("is not a list of rows"))?;
        if rows.len() != images {
            return Err(bad(&format!("has {} row(s), not one per image ({images})", rows.len())));
        }
        for (k, row) in rows.iter().enumerate() {
            let cells = row.as_array().ok_or_else(|| bad(&format!("row {k} is not a list")))?;
            if cells.len() != texts || cells.iter().any(|c| !(c.is_string() || c.is_null())) {
                return Err(bad(&format!("row {k} is not {texts} replies (strings, or null where unasked)")));
            }
        }
        self.rows.set(item, &line_replies.to_string());
        Ok(())
    }

    /// Item `item`'s replies as JSON text, if it has them.
    pub fn json(&self, item: usize) -> Option<&str> {
        self.rows.get(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_text_is_read_back_and_an_unset_one_is_none() {
        let mut replies = Replies::new(3);
        replies.set(2, "Yes, it is.");
        replies.set(0, "");
        assert_eq!((replies.get(0), replies.get(1), replies.get(2)), (Some(""), None, Some("Yes, it is.")));
        assert_eq!(replies.get(3), None, "beyond the end");
    }

    #[test]
    fn item_cells_become_rows_and_a_line_of_another_shape_is_refused() {
        let mut items = ItemReplies::new(2);
        items.set_cells(0, 2, [Some("A"), None, Some("B \"quoted\""), Some("B")]);
        assert_eq!(items.json(0), Some(r#"[["A",null],["B \"quoted\"","B"]]"#));
        assert_eq!(items.json(1), None);
        let line: Value = serde_json::from_str(r#"[["x", null]]"#).unwrap();
        items.set_from_line(1, &line, 1, 2, "line 2").unwrap();
        assert_eq!(items.json(1), Some(r#"[["x",null]]"#));
        let error = items.set_from_line(1, &line, 2, 2, "line 2").unwrap_err().to_string();
        assert!(error.contains("line 2") && error.contains("1 row(s)"), "{error}");
        let numbers: Value = serde_json::from_str("[[1, 2]]").unwrap();
        assert!(items.set_from_line(1, &numbers, 1, 2, "line 2").is_err());
    }
}
