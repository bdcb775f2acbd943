//! [`Strings`]: many strings in one spilled buffer.

use super::SpillVec;

/// Strings one after another in one spilled byte buffer, with where each ends: a suite's ids
/// and texts, a dump's item ids, a report's problems, a retrieval run's dump lines. Bounded
/// like the rest of the per-item state, rather than a `String` each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Strings {
    pub(super) text: SpillVec<u8>,
    pub(super) ends: SpillVec<usize>,
}

impl Strings {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `string` (its bytes as given: a line break in it stays part of it).
    pub fn push(&mut self, string: &str) {
        self.text.extend_from_slice(string.as_bytes());
        self.ends.push(self.text.len());
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// String `i`.
    ///
    /// # Panics
    /// When `i` is not below [`Strings::len`].
    pub fn get(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        // `push` appends whole `&str`s and records where each ends, so every `start..end`
        // spans one of them: the check cannot fail.
        std::str::from_utf8(&self.text[start..self.ends[i]]).unwrap_or_default()
    }

    /// Every string in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> + Clone + '_ {
        (0..self.len()).map(|i| {
            let string = self.get(i);
            string
        })
    }
}

impl<S: AsRef<str>> Extend<S> for Strings {
    fn extend<I: IntoIterator<Item = S>>(&mut self, strings: I) {
        strings.into_iter().for_each(|string| self.push(string.as_ref()));
    }
}

impl<S: AsRef<str>> FromIterator<S> for Strings {
    fn from_iter<I: IntoIterator<Item = S>>(strings: I) -> Self {
        let mut all = Self::new();
        all.extend(strings);
        all
    }
}
