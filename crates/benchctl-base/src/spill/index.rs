//! [`Index`] (positions of values held elsewhere, found by hash) and the [`Map`] built on it,
//! both spilled like the rest of the per-item state.

use std::hash::BuildHasher;

use super::SpillVec;

/// A map of small `Copy` keys to `Copy` values, spilled with the rest of the per-item state:
/// the pairs in one [`SpillVec`], found through an [`Index`] (the embedding cache's locations,
/// the file-key memo).
#[derive(Debug, Clone)]
pub struct Map<K: Copy, V: Copy> {
    pairs: SpillVec<(K, V)>,
    index: Index,
}

impl<K: Copy, V: Copy> Default for Map<K, V> {
    fn default() -> Self {
        Self { pairs: SpillVec::new(), index: Index::default() }
    }
}

impl<K: Copy + Eq + std::hash::Hash, V: Copy> Map<K, V> {
    /// Maps `key` to `value`, replacing what it mapped to.
    pub fn insert(&mut self, key: K, value: V) {
        let pairs = &self.pairs;
        match self.index.find_or_add(&key, pairs.len(), |at| pairs[at].0 == key) {
            Some(at) => self.pairs[at as usize].1 = value,
            None => self.pairs.push((key, value)),
        }
    }

    pub fn get(&self, key: &K) -> Option<V> {
        self.index.find(key, |at| self.pairs[at].0 == *key).map(|at| self.pairs[at as usize].1)
    }

    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
}

/// Positions of values held elsewhere (a suite's image sources and item ids, its unique inputs, the embedding cache's records), found by hash: an
/// open-addressing table of positions and 32-bit hashes, 8 bytes a slot and spilled to a file
/// past the memory budget ([`SpillVec`]), rather than a second copy of each value. The hash is kept so
/// that growing the table never reads the values again (a million ids scattered through the
/// suite), and so that most lookups compare no value.
#[derive(Debug, Clone, Default)]
pub struct Index {
    /// Linear probing over a power of two of slots: 0 for an empty slot, else the position
    /// plus one in the high 32 bits and the value's hash in the low ones.
    slots: SpillVec<u64>,
    len: usize,
    hasher: std::hash::RandomState,
}

impl Index {
    /// The position of the value `is_at` recognises among those with `value`'s hash; if there
    /// is none, `next` is recorded as the position of `value` (which the caller then stores
    /// there), and `None` returned.
    ///
    /// # Panics
    /// When `next` does not fit in 32 bits (four billion values).
    pub fn find_or_add<T: std::hash::Hash + ?Sized>(
        &mut self,
        value: &T,
        next: usize,
        is_at: impl Fn(usize) -> bool,
    ) -> Option<u32> {
        if (self.len + 1) * 8 > self.slots.len() * 7 {
            self.grow();
        }
        let short = self.hasher.hash_one(value) as u32;
        match self.probe(short, is_at) {
            Ok(found) => Some(found),
            Err(empty) => {
                let position = u32::try_from(next + 1).unwrap_or_else(|_| panic!("position {next} past 32 bits"));
                self.slots[empty] = (u64::from(position) << 32) | u64::from(short);
                self.len += 1;
                None
            }
        }
    }

    /// The position of the value `is_at` recognises among those with `value`'s hash, if any.
    pub fn find<T: std::hash::Hash + ?Sized>(&self, value: &T, is_at: impl Fn(usize) -> bool) -> Option<u32> {
        if self.slots.is_empty() {
            return None;
        }
        self.probe(self.hasher.hash_one(value) as u32, is_at).ok()
    }

    /// Walks the slots from `short`'s bucket: the position `is_at` recognises, or the first
    /// empty slot. The table is never full (at most 7/8 of it is used).
    fn probe(&self, short: u32, is_at: impl Fn(usize) -> bool) -> Result<u32, usize> {
        let mask = self.slots.len() - 1;
        let mut at = Self::bucket(short, mask);
        loop {
            let slot = self.slots[at];
            if slot == 0 {
                return Err(at);
            }
            if slot as u32 == short && is_at((slot >> 32) as usize - 1) {
                return Ok((slot >> 32) as u32 - 1);
            }
            at = (at + 1) & mask;
        }
    }

    /// A hash's first slot: its bits mixed (the low bits of a 32-bit hash alone would cluster).
    fn bucket(short: u32, mask: usize) -> usize {
        (u64::from(short).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & mask
    }

    /// Twice the slots (16 at first), every entry placed again by its kept hash.
    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(16);
        let mut slots = SpillVec::from_elem(0u64, size);
        for &slot in self.slots.iter().filter(|&&s| s != 0) {
            let mut at = Self::bucket(slot as u32, size - 1);
            while slots[at] != 0 {
                at = (at + 1) & (size - 1);
            }
            slots[at] = slot;
        }
        self.slots = slots;
    }
}
