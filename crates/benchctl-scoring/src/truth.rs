//! Ground truth of one item and the tags used for breakdowns.
//!
//! Both are held once per item of suites of a million items, so both are compact: a truth
//! matrix of up to 64 cells is a bit mask (no allocation), and items with the same tags share
//! one allocation ([`TagSets`]).

use std::collections::HashSet;
use std::sync::Arc;

use crate::{Error, Result};

/// Which of an item's K images match which of its L texts (row = image, column = text).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Truth {
    images: usize,
    texts: usize,
    matches: Matches,
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
        Ok(Self { images, texts, matches: Matches::of(matches.into_iter()) })
    }

    /// Image k matches text k and nothing else (Winoground, EqBen).
    pub fn diagonal(n: usize) -> Self {
        Self { images: n, texts: n, matches: Matches::of((0..n * n).map(|i| i / n == i % n)) }
    }

    /// One image whose first of `texts` candidates matches (VALSE: `[caption, foils…]`).
    pub fn first_text_matches(texts: usize) -> Self {
        let texts = texts.max(1);
        Self { images: 1, texts, matches: Matches::of((0..texts).map(|l| l == 0)) }
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
