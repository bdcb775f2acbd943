//! Ground truth of one item and the tags used for breakdowns.

use crate::{Error, Result};

/// Which of an item's K images match which of its L texts (row = image, column = text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truth {
    images: usize,
    texts: usize,
    matches: Vec<bool>,
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
        Ok(Self { images, texts, matches })
    }

    /// Image k matches text k and nothing else (Winoground, EqBen).
    pub fn diagonal(n: usize) -> Self {
        let matches = (0..n * n).map(|i| i / n == i % n).collect();
        Self { images: n, texts: n, matches }
    }

    /// One image whose first of `texts` candidates matches (VALSE: `[caption, foils…]`).
    pub fn first_text_matches(texts: usize) -> Self {
        let texts = texts.max(1);
        Self { images: 1, texts, matches: (0..texts).map(|l| l == 0).collect() }
    }

    pub fn images(&self) -> usize {
        self.images
    }

    pub fn texts(&self) -> usize {
        self.texts
    }

    pub fn is_match(&self, image: usize, text: usize) -> bool {
        self.matches[image * self.texts + text]
    }
}

/// Ordered tag key → values of one item (an item may carry several values for a key).
pub type Tags = Vec<(String, Vec<String>)>;
