//! A suite's items, stored compactly: a million-item suite is held by every `eval` and
//! `check`, so its items are not a million small allocations each.
//!
//! Every item's id and texts live one after another in one string, each image source, truth
//! matrix and tag set is held once however many items share it, and an item is a 24-byte head
//! (which truth and tags, where its strings and images start). Loaders build an [`Item`] at a
//! time and [`Items::push`] it; readers get [`ItemRef`]s that borrow from the store.

use std::hash::{BuildHasher, Hash};

use benchctl_scoring::metrics::ItemView;
use benchctl_scoring::spill::{self, SpillVec};
use benchctl_scoring::{Tags, Truth};

use crate::{ImageSource, Item};

/// The items of a suite, in suite order. What grows with the suite (strings, heads, image
/// indices) is in [`SpillVec`]s: past a few MiB, in a mapped file ([`spill`]).
#[derive(Debug, Clone, Default)]
pub struct Items {
    /// Every item's id, then its texts, one after another (UTF-8: only `&str`s are pushed).
    strings: SpillVec<u8>,
    /// Where each string of `strings` ends.
    string_ends: SpillVec<usize>,
    /// The distinct image sources, truth matrices and tag sets.
    sources: Shared<ImageSource>,
    truths: Shared<Truth>,
    tags: Shared<Tags>,
    /// Each item's images in order, as indices into `sources`.
    images: SpillVec<u32>,
    heads: SpillVec<Head>,
}

/// Values items share (an image many items show; most items of a suite have one of a few truth
/// matrices and tag sets), each held once, in first-seen order.
#[derive(Debug, Clone)]
struct Shared<T> {
    values: Vec<T>,
    index: Index,
}

impl<T> Default for Shared<T> {
    fn default() -> Self {
        Shared { values: Vec::new(), index: Index::default() }
    }
}

impl<T: Eq + Hash> Shared<T> {
    /// The index of `value`, added when it is new.
    fn intern(&mut self, value: T) -> u32 {
        let values = &mut self.values;
        self.index.find_or_add(&value, values.len(), |at| values[at] == value).unwrap_or_else(|| {
            values.push(value);
            values.len() as u32 - 1
        })
    }
}

/// What an item holds besides its strings and images.
#[derive(Debug, Clone, Copy)]
struct Head {
    /// Indices into `truths` and `tags`.
    truth: u32,
    tags: u32,
    /// The index in `string_ends` of the item's id (its texts follow).
    first_string: usize,
    /// The index in `images` of the item's first image.
    first_image: usize,
}

impl Items {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.heads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heads.is_empty()
    }

    /// Room for `additional` more items' heads.
    pub fn reserve(&mut self, additional: usize) {
        self.heads.reserve(additional);
    }

    /// Adds `item` after the others.
    pub fn push(&mut self, item: Item) {
        let Item { id, images, texts, truth, tags } = item;
        let first_string = self.string_ends.len();
        for text in std::iter::once(&id).chain(&texts) {
            self.strings.extend_from_slice(text.as_bytes());
            self.string_ends.push(self.strings.len());
        }
        let first_image = self.images.len();
        for source in images {
            let index = self.sources.intern(source);
            self.images.push(index);
        }
        let (truth, tags) = (self.truths.intern(truth), self.tags.intern(tags));
        self.heads.push(Head { truth, tags, first_string, first_image });
    }

    /// Item `n`.
    ///
    /// # Panics
    /// When `n` is not below [`Items::len`], as indexing a slice would.
    pub fn item(&self, n: usize) -> ItemRef<'_> {
        assert!(n < self.heads.len(), "item {n} of {}", self.heads.len());
        ItemRef { items: self, n }
    }

    /// Every item, in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter { items: self, next: 0..self.heads.len() }
    }

    /// Items `range`, copied into a store of their own (a shard's slice).
    pub fn range(&self, range: std::ops::Range<usize>) -> Items {
        let mut slice = Items::new();
        slice.reserve(range.len());
        for n in range {
            slice.push(self.item(n).to_item());
        }
        slice
    }

    /// Every distinct image source of the items, in the order they first appear.
    pub fn distinct_sources(&self) -> &[ImageSource] {
        &self.sources.values
    }

    fn string(&self, index: usize) -> &str {
        let start = if index == 0 { 0 } else { self.string_ends[index - 1] };
        let bytes = &self.strings[start..self.string_ends[index]];
        // SAFETY: `push` appends whole `&str`s and records where each ends, so every
        // `start..end` here spans one of them.
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }
}

/// Positions of values held elsewhere (a store's sources, its items' ids), found by hash: an
/// open-addressing table of positions and 32-bit hashes, 8 bytes a slot and spilled to a file
/// with the suite ([`SpillVec`]), rather than a second copy of each value. The hash is kept so
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
    pub fn find_or_add<T: Hash + ?Sized>(
        &mut self,
        value: &T,
        next: usize,
        is_at: impl Fn(usize) -> bool,
    ) -> Option<u32> {
        if (self.len + 1) * 8 > self.slots.len() * 7 {
            self.grow();
        }
        let short = self.hasher.hash_one(value) as u32;
        let mask = self.slots.len() - 1;
        let mut at = Self::bucket(short, mask);
        spill::touched(spill::PAGE_BYTES);
        loop {
            let slot = self.slots[at];
            if slot == 0 {
                let position = u32::try_from(next + 1).unwrap_or_else(|_| panic!("position {next} past 32 bits"));
                self.slots[at] = (u64::from(position) << 32) | u64::from(short);
                self.len += 1;
                return None;
            }
            if slot as u32 == short && is_at((slot >> 32) as usize - 1) {
                return Some((slot >> 32) as u32 - 1);
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
            spill::touched(spill::PAGE_BYTES);
        }
        self.slots = slots;
    }
}

/// The ids already in an [`Items`] store, to refuse a duplicate as it arrives (by position,
/// not a second copy of a million ids).
#[derive(Debug, Default)]
pub(crate) struct IdIndex(Index);

impl IdIndex {
    /// The position of the item of `items` with `id`, if there is one; else `id` is recorded
    /// as the next item's (the caller pushes it).
    pub(crate) fn earlier(&mut self, items: &Items, id: &str) -> Option<usize> {
        let found = self.0.find_or_add(id, items.len(), |at| items.item(at).id() == id);
        found.map(|at| at as usize)
    }
}

impl From<Vec<Item>> for Items {
    fn from(items: Vec<Item>) -> Self {
        items.into_iter().collect()
    }
}

impl FromIterator<Item> for Items {
    fn from_iter<I: IntoIterator<Item = Item>>(iter: I) -> Self {
        let mut items = Items::new();
        iter.into_iter().for_each(|item| items.push(item));
        items
    }
}

impl<'a> IntoIterator for &'a Items {
    type Item = ItemRef<'a>;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// The items of an [`Items`] store, in order.
#[derive(Clone)]
pub struct Iter<'a> {
    items: &'a Items,
    next: std::ops::Range<usize>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = ItemRef<'a>;

    fn next(&mut self) -> Option<ItemRef<'a>> {
        // A pass over the items reads what they spilled: counted, so that it is trimmed as it
        // goes (`spill::touched`) and a pass leaves no more resident than its last steps.
        spill::touched(spill::ITEM_BYTES);
        self.next.next().map(|n| ItemRef { items: self.items, n })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.next.size_hint()
    }
}

impl ExactSizeIterator for Iter<'_> {}

/// One item of an [`Items`] store: K candidate images, L candidate texts and which pairs match.
#[derive(Clone, Copy)]
pub struct ItemRef<'a> {
    items: &'a Items,
    n: usize,
}

impl<'a> ItemRef<'a> {
    fn head(self) -> &'a Head {
        &self.items.heads[self.n]
    }

    /// The suite's own id of the item, as written in score dumps.
    pub fn id(self) -> &'a str {
        self.items.string(self.head().first_string)
    }

    /// K, the item's candidate images.
    pub fn image_count(self) -> usize {
        self.truth().images()
    }

    /// L, the item's candidate texts.
    pub fn text_count(self) -> usize {
        self.truth().texts()
    }

    /// The item's images, in order.
    pub fn images(self) -> impl ExactSizeIterator<Item = &'a ImageSource> + Clone + 'a {
        let first = self.head().first_image;
        let items = self.items;
        items.images[first..first + self.image_count()].iter().map(move |&s| &items.sources.values[s as usize])
    }

    /// Image `i` of the item.
    pub fn image(self, i: usize) -> &'a ImageSource {
        assert!(i < self.image_count(), "image {i} of an item of {}", self.image_count());
        &self.items.sources.values[self.items.images[self.head().first_image + i] as usize]
    }

    /// The item's texts, in order.
    pub fn texts(self) -> impl ExactSizeIterator<Item = &'a str> + Clone + 'a {
        let first = self.head().first_string + 1;
        let items = self.items;
        (first..first + self.text_count()).map(move |s| items.string(s))
    }

    /// Text `j` of the item.
    pub fn text(self, j: usize) -> &'a str {
        assert!(j < self.text_count(), "text {j} of an item of {}", self.text_count());
        self.items.string(self.head().first_string + 1 + j)
    }

    pub fn truth(self) -> &'a Truth {
        &self.items.truths.values[self.head().truth as usize]
    }

    pub fn tags(self) -> &'a Tags {
        &self.items.tags.values[self.head().tags as usize]
    }

    pub fn view(self) -> ItemView<'a> {
        ItemView { truth: self.truth(), tags: self.tags() }
    }

    /// The item as a value of its own.
    pub fn to_item(self) -> Item {
        Item {
            id: self.id().to_string(),
            images: self.images().cloned().collect(),
            texts: self.texts().map(str::to_string).collect(),
            truth: self.truth().clone(),
            tags: self.tags().clone(),
        }
    }
}

impl std::fmt::Debug for ItemRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.to_item().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn item(id: &str, images: &[&str], texts: &[&str]) -> benchctl_scoring::Result<Item> {
        let matches = (0..images.len() * texts.len()).map(|c| c % (texts.len() + 1) == 0).collect();
        Ok(Item {
            id: id.to_string(),
            images: images.iter().map(|p| ImageSource::File(PathBuf::from(p))).collect(),
            texts: texts.iter().map(|t| t.to_string()).collect(),
            truth: Truth::new(images.len(), texts.len(), matches)?,
            tags: Tags::from(vec![("tag".to_string(), vec![id.to_string()])]),
        })
    }

    #[test]
    fn items_read_back_as_they_were_pushed() -> benchctl_scoring::Result<()> {
        let pushed = vec![
            item("a", &["x.png", "y.png"], &["one", "", "three"])?,
            item("", &["y.png"], &["é"])?,
            item("c", &["z.png", "x.png"], &["4", "5"])?,
        ];
        let items = Items::from(pushed.clone());
        assert_eq!(items.len(), 3);
        for (stored, original) in items.iter().zip(&pushed) {
            let back = stored.to_item();
            assert_eq!((&back.id, &back.images, &back.texts), (&original.id, &original.images, &original.texts));
            assert_eq!((back.truth, back.tags), (original.truth.clone(), original.tags.clone()));
            assert_eq!(Some(stored.image(stored.image_count() - 1)), original.images.last());
            assert_eq!(Some(stored.text(stored.text_count() - 1)), original.texts.last().map(String::as_str));
        }
        // Three distinct sources for five images; a fourth item of the first one's shape and
        // tags adds no truth matrix or tag set.
        assert_eq!(items.sources.values.len(), 3);
        let mut more = items.clone();
        more.push(item("a", &["w.png", "v.png"], &["x", "y", "z"])?);
        assert_eq!((more.truths.values.len(), more.tags.values.len(), more.sources.values.len()), (3, 3, 5));
        assert_eq!(more.item(3).truth(), more.item(0).truth());
        let slice = items.range(1..3);
        assert_eq!(slice.iter().map(|i| i.id()).collect::<Vec<_>>(), ["", "c"]);
        assert_eq!(slice.item(1).images().collect::<Vec<_>>(), [&pushed[2].images[0], &pushed[2].images[1]]);
        Ok(())
    }
}
