//! A suite's items, stored compactly: a million-item suite is held by every `eval` and
//! `check`, so its items are not a million small allocations each.
//!
//! Every item's id and texts live one after another in one string, each image source, truth
//! matrix and tag set is held once however many items share it, and an item is a 24-byte head
//! (which truth and tags, where its strings and images start). Loaders build an [`Item`] at a
//! time and [`Items::push`] it; readers get [`ItemRef`]s that borrow from the store.

use std::hash::Hash;

use benchctl_base::spill::{Index, SpillVec, Strings};
use benchctl_scoring::metrics::ItemView;
use benchctl_scoring::{Tags, Truth};

use crate::{ImageSource, Item};

/// The items of a suite, in suite order. What grows with the suite (strings, heads, image
/// indices) is in [`SpillVec`]s: past the memory budget, in mapped files ([`benchctl_base::spill`]).
#[derive(Debug, Clone, Default)]
pub struct Items {
    /// Every item's id, then its texts, one after another.
    strings: Strings,
    /// The distinct image sources (spilled: a suite may show a million images), truth
    /// matrices and tag sets (a few, shared by many items).
    sources: Sources,
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

/// The distinct image sources of a suite, each once, in first-seen order, as records in
/// spilled bytes: a file's path (the common case, and the one a million-image suite has) is
/// its bytes and a tag, not a `PathBuf` on the heap. The rare kinds (an image embedded in a
/// parquet file, RoCOCO's altered images) are held as values, their record naming which.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// Each record: a kind byte, then its fields (see [`Sources::encode`]).
    bytes: SpillVec<u8>,
    ends: SpillVec<usize>,
    others: Vec<ImageSource>,
    /// The position of each of `others`: a suite may embed thousands of images.
    others_at: std::collections::HashMap<ImageSource, u32>,
    index: Index,
}

/// The kind byte of a [`Sources`] record.
const FILE: u8 = 0;
const NPY_BGR: u8 = 1;
const CROPPED: u8 = 2;
const OTHER: u8 = 3;

impl Sources {
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// How many candidates show several images together in one prompt
    /// ([`ImageSource::Together`]): only a model that takes several images per prompt scores
    /// them.
    pub fn shown_together(&self) -> usize {
        self.others.iter().filter(|source| matches!(source, ImageSource::Together(_))).count()
    }

    /// Source `i`.
    pub fn get(&self, i: usize) -> ImageSource {
        let record = self.record(i);
        let (&kind, rest) = record.split_first().unwrap_or((&OTHER, &[]));
        match kind {
            FILE => ImageSource::File(path_of(rest)),
            NPY_BGR => ImageSource::NpyBgr(path_of(rest)),
            CROPPED => {
                let (corners, file) = rest.split_at(32.min(rest.len()));
                let corner = |c: usize| {
                    i64::from_le_bytes(
                        corners.get(c * 8..c * 8 + 8).and_then(|b| b.try_into().ok()).unwrap_or_default(),
                    )
                };
                let region =
                    crate::image::CropRegion { left: corner(0), top: corner(1), right: corner(2), bottom: corner(3) };
                ImageSource::Cropped(Box::new(crate::image::CroppedSource { file: path_of(file), region }))
            }
            _ => {
                let at = u32::from_le_bytes(rest.try_into().unwrap_or_default());
                self.others[at as usize].clone()
            }
        }
    }

    /// Every source, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = ImageSource> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// The embedded images among the sources, each with its index, in order.
    pub fn embedded(&self) -> impl Iterator<Item = (usize, &crate::EmbeddedImage)> + '_ {
        (0..self.len()).filter_map(|i| match self.record(i).split_first() {
            Some((&OTHER, rest)) => match &self.others[u32::from_le_bytes(rest.try_into().ok()?) as usize] {
                ImageSource::Embedded(embedded) => Some((i, &**embedded)),
                _ => None,
            },
            _ => None,
        })
    }

    fn record(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    /// The index of `source`, added when it is new.
    fn intern(&mut self, source: ImageSource) -> u32 {
        let record = self.encode(&source);
        let (bytes, ends) = (&self.bytes, &self.ends);
        let record_at = |i: usize| &bytes[if i == 0 { 0 } else { ends[i - 1] }..ends[i]];
        if let Some(at) = self.index.find_or_add(&record[..], ends.len(), |i| record_at(i) == &record[..]) {
            return at;
        }
        if record[0] == OTHER {
            self.others_at.insert(source.clone(), self.others.len() as u32);
            self.others.push(source);
        }
        self.bytes.extend_from_slice(&record);
        self.ends.push(self.bytes.len());
        self.ends.len() as u32 - 1
    }

    /// A source's record: a file (or BGR frame) is its kind and path; a crop, its kind, four
    /// corners (i64 LE) and path; any other kind is identified by its value, held in `others`
    /// (an equal value already there is found by the index, so the record is its position).
    fn encode(&self, source: &ImageSource) -> Vec<u8> {
        let mut record = Vec::new();
        match source {
            ImageSource::File(path) => {
                record.push(FILE);
                record.extend_from_slice(path_bytes(path));
            }
            ImageSource::NpyBgr(path) => {
                record.push(NPY_BGR);
                record.extend_from_slice(path_bytes(path));
            }
            ImageSource::Cropped(crop) => {
                record.push(CROPPED);
                let r = crop.region;
                for corner in [r.left, r.top, r.right, r.bottom] {
                    record.extend_from_slice(&corner.to_le_bytes());
                }
                record.extend_from_slice(path_bytes(&crop.file));
            }
            other => {
                record.push(OTHER);
                let at = self.others_at.get(other).copied().unwrap_or(self.others.len() as u32);
                record.extend_from_slice(&at.to_le_bytes());
            }
        }
        record
    }
}

#[cfg(unix)]
fn path_bytes(path: &std::path::Path) -> &[u8] {
    use std::os::unix::ffi::OsStrExt;
    path.as_os_str().as_bytes()
}

#[cfg(unix)]
fn path_of(bytes: &[u8]) -> std::path::PathBuf {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::OsStr::from_bytes(bytes).into()
}

#[cfg(not(unix))]
fn path_bytes(path: &std::path::Path) -> &[u8] {
    path.as_os_str().as_encoded_bytes()
}

#[cfg(not(unix))]
fn path_of(bytes: &[u8]) -> std::path::PathBuf {
    // Bytes this process took from an `OsStr` with `as_encoded_bytes`, unchanged.
    String::from_utf8_lossy(bytes).into_owned().into()
}

/// What an item holds besides its strings and images.
#[derive(Debug, Clone, Copy)]
struct Head {
    /// Indices into `truths` and `tags`.
    truth: u32,
    tags: u32,
    /// The index in `strings` of the item's id (its texts follow).
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
        let first_string = self.strings.len();
        for text in std::iter::once(&id).chain(&texts) {
            self.strings.push(text);
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

    /// Every distinct image source of the items, in the order they first appear (each
    /// item's [`ItemRef::source_indices`] point into it).
    pub fn distinct_sources(&self) -> &Sources {
        &self.sources
    }

    fn string(&self, index: usize) -> &str {
        self.strings.get(index)
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

    /// The item's images, in order (each made from its spilled record as it is asked for).
    pub fn images(self) -> impl ExactSizeIterator<Item = ImageSource> + Clone + 'a {
        let items = self.items;
        self.source_indices().iter().map(move |&s| items.sources.get(s as usize))
    }

    /// Where each of the item's images is among [`Items::distinct_sources`], in order.
    pub fn source_indices(self) -> &'a [u32] {
        let first = self.head().first_image;
        &self.items.images[first..first + self.image_count()]
    }

    /// Image `i` of the item.
    pub fn image(self, i: usize) -> ImageSource {
        assert!(i < self.image_count(), "image {i} of an item of {}", self.image_count());
        self.items.sources.get(self.source_indices()[i] as usize)
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
            images: self.images().collect(),
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
            assert_eq!(Some(&stored.image(stored.image_count() - 1)), original.images.last());
            assert_eq!(Some(stored.text(stored.text_count() - 1)), original.texts.last().map(String::as_str));
        }
        // Three distinct sources for five images; a fourth item of the first one's shape and
        // tags adds no truth matrix or tag set.
        assert_eq!(items.sources.len(), 3);
        let mut more = items.clone();
        more.push(item("a", &["w.png", "v.png"], &["x", "y", "z"])?);
        assert_eq!((more.truths.values.len(), more.tags.values.len(), more.sources.len()), (3, 3, 5));
        assert_eq!(more.item(3).truth(), more.item(0).truth());
        let slice = items.range(1..3);
        assert_eq!(slice.iter().map(|i| i.id()).collect::<Vec<_>>(), ["", "c"]);
        assert_eq!(
            slice.item(1).images().collect::<Vec<_>>(),
            [pushed[2].images[0].clone(), pushed[2].images[1].clone()]
        );
        Ok(())
    }
}
