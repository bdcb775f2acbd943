//! Ground truth of one item and the tags used for breakdowns.
//!
//! Both are held once per item of suites of a million items, so both are compact: a truth
//! matrix of up to 64 cells is a bit mask (no allocation), and items with the same tags share
//! one allocation ([`TagSets`]).

use std::collections::HashSet;
use std::sync::Arc;

use crate::{Error, Result};

/// Which of an item's K images match which of its L texts (row = image, column = text), and
/// which cells are asked at all: an item whose questions are each asked of some of its
/// images (VisMin's VQA form) leaves the others unscored.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Truth {
    images: usize,
    texts: usize,
    matches: Matches,
    /// The cells scored; `None`: every cell.
    asked: Option<Matches>,
}

/// Row-major match flags: a bit mask up to 64 cells (every suite's usual items), else a
/// shared slice.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Matches {
    Bits(u64),
    Flags(Arc<[bool]>),
}

impl Matches {
    fn of(flags: impl ExactSizeIterator<Item = bool>) -> Self {
        if flags.len() <= 64 {
            Matches::Bits(flags.enumerate().fold(0, |bits, (i, m)| bits | (u64::from(m) << i)))
        } else {
            Matches::Flags(flags.collect())
        }
    }

    fn get(&self, cell: usize) -> bool {
        match self {
            Matches::Bits(bits) => bits.checked_shr(cell as u32).is_some_and(|b| b & 1 == 1),
            Matches::Flags(flags) => flags[cell],
        }
    }
}

impl Truth {
    /// A K×L truth matrix from row-major flags.
    pub fn new(images: usize, texts: usize, matches: Vec<bool>) -> Result<Self> {
        if images == 0 || texts == 0 {
            return Err(Error::new(format!("an item needs at least one image and one text, got {images}×{texts}")));
        }
        if matches.len() != images * texts {
            return Err(Error::new(format!(
                "truth matrix of {images}×{texts} needs {} flags, got {}",
                images * texts,
                matches.len()
            )));
        }
        Ok(Self { images, texts, matches: Matches::of(matches.into_iter()), asked: None })
    }

    /// A K×L truth matrix whose cells are scored only where `asked` (row-major) says so; a
    /// matching cell must be asked. Every cell asked is [`Truth::new`]'s matrix.
    pub fn with_asked(images: usize, texts: usize, matches: Vec<bool>, asked: Vec<bool>) -> Result<Self> {
        if asked.len() != images * texts {
            return Err(Error::new(format!(
                "the asked cells of a {images}×{texts} matrix need {} flags, got {}",
                images * texts,
                asked.len()
            )));
        }
        if let Some(cell) = matches.iter().zip(&asked).position(|(&m, &a)| m && !a) {
            let texts = texts.max(1);
            return Err(Error::new(format!(
                "image {} matches text {}, which is not asked of it",
                cell / texts,
                cell % texts
            )));
        }
        let mut truth = Self::new(images, texts, matches)?;
        if asked.iter().any(|&a| !a) {
            truth.asked = Some(Matches::of(asked.into_iter()));
        }
        Ok(truth)
    }

    /// Image k matches text k and nothing else (Winoground, EqBen).
    pub fn diagonal(n: usize) -> Self {
        Self { images: n, texts: n, matches: Matches::of((0..n * n).map(|i| i / n == i % n)), asked: None }
    }

    /// One image whose first of `texts` candidates matches (VALSE: `[caption, foils…]`).
    pub fn first_text_matches(texts: usize) -> Self {
        let texts = texts.max(1);
        Self { images: 1, texts, matches: Matches::of((0..texts).map(|l| l == 0)), asked: None }
    }

    pub fn images(&self) -> usize {
        self.images
    }

    pub fn texts(&self) -> usize {
        self.texts
    }

    pub fn is_match(&self, image: usize, text: usize) -> bool {
        debug_assert!(
            image < self.images && text < self.texts,
            "cell ({image}, {text}) outside {}×{}",
            self.images,
            self.texts
        );
        self.matches.get(image * self.texts + text)
    }

    /// Whether cell (image, text) is scored: a model is asked it and a metric reads it.
    pub fn is_asked(&self, image: usize, text: usize) -> bool {
        self.asked.as_ref().is_none_or(|asked| asked.get(image * self.texts + text))
    }

    /// Whether every cell is scored (every suite's items but those of questions asked of
    /// some images only).
    pub fn asks_every_cell(&self) -> bool {
        self.asked.is_none()
    }
}

/// Ordered tag key → values of one item (an item may carry several values for a key).
///
/// Shared, not copied, between the items a [`TagSets`] gave the same tags: a suite of a
/// million items has a few hundred distinct tag sets at most.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Tags(Arc<[(String, Vec<String>)]>);

impl Tags {
    /// No tags.
    pub fn new() -> Self {
        Self::default()
    }
}

impl std::ops::Deref for Tags {
    type Target = [(String, Vec<String>)];

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl<'a> IntoIterator for &'a Tags {
    type Item = &'a (String, Vec<String>);
    type IntoIter = std::slice::Iter<'a, (String, Vec<String>)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl From<Vec<(String, Vec<String>)>> for Tags {
    fn from(tags: Vec<(String, Vec<String>)>) -> Self {
        Tags(tags.into())
    }
}

/// The distinct tag sets of one suite: items with equal tags get one shared [`Tags`].
#[derive(Debug, Default)]
pub struct TagSets(HashSet<Tags>);

impl TagSets {
    pub fn intern(&mut self, tags: Vec<(String, Vec<String>)>) -> Tags {
        let tags = Tags::from(tags);
        match self.0.get(&tags) {
            Some(shared) => shared.clone(),
            None => {
                self.0.insert(tags.clone());
                tags
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A truth that leaves cells unasked reads them back, in a bit mask and past it, refuses a
    /// match it does not ask, and is a different truth from the one that asks every cell.
    #[test]
    fn unasked_cells_read_back_and_a_match_must_be_asked() -> std::result::Result<(), String> {
        for (k, l) in [(3, 6), (1, 65)] {
            let matches: Vec<bool> = (0..k * l).map(|i| i % 4 == 0).collect();
            let asked: Vec<bool> = (0..k * l).map(|i| i % 4 < 2).collect();
            let truth = Truth::with_asked(k, l, matches.clone(), asked.clone()).map_err(|e| e.to_string())?;
            let read: Vec<bool> = (0..k * l).map(|c| truth.is_asked(c / l, c % l)).collect();
            assert_eq!(read, asked, "{k}×{l}");
            assert!(!truth.asks_every_cell());
            assert_ne!(truth, Truth::new(k, l, matches.clone()).map_err(|e| e.to_string())?);
            let every = Truth::with_asked(k, l, matches.clone(), vec![true; k * l]).map_err(|e| e.to_string())?;
            assert!(every.asks_every_cell() && every == Truth::new(k, l, matches).map_err(|e| e.to_string())?);
        }
        let refused = Truth::with_asked(1, 2, vec![false, true], vec![true, false]);
        assert!(refused.is_err_and(|e| e.to_string().contains("image 0 matches text 1, which is not asked")));
        Ok(())
    }

    #[test]
    fn every_cell_of_small_and_large_matrices_reads_back() {
        // 8×8 fills the bit mask exactly; 9×9 and 1×65 go past it.
        for (k, l) in [(1, 1), (2, 2), (8, 8), (9, 9), (1, 65), (65, 1)] {
            let flags: Vec<bool> = (0..k * l).map(|i| (i * 7 + i / 3) % 5 < 2).collect();
            let truth = Truth::new(k, l, flags.clone()).map_err(|e| e.to_string());
            assert!(truth.is_ok(), "{k}×{l}: {truth:?}");
            if let Ok(truth) = truth {
                let read: Vec<bool> =
                    (0..k).flat_map(|i| (0..l).map(move |t| (i, t))).map(|(i, t)| truth.is_match(i, t)).collect();
                assert_eq!(read, flags, "{k}×{l}");
            }
        }
        assert_eq!(
            Truth::diagonal(9),
            Truth::new(9, 9, (0..81).map(|i| i / 9 == i % 9).collect())
                .map_err(|e| e.to_string())
                .unwrap_or_else(|_| Truth::diagonal(1))
        );
    }

    #[test]
    fn equal_tags_share_one_allocation() {
        let mut sets = TagSets::default();
        let tag = |v: &str| vec![("split".to_string(), vec![v.to_string()])];
        let (a, b, c) = (sets.intern(tag("x")), sets.intern(tag("x")), sets.intern(tag("y")));
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert!(!Arc::ptr_eq(&a.0, &c.0));
        assert_eq!(&*a, tag("x").as_slice());
    }
}
