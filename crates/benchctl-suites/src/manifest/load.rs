//! Loading a manifest's suite: each annotation file read as records, records grouped and
//! expanded as `[source]` says, each made an item as `[item]` says; every problem goes to the
//! list with its file, record and key, readable items are kept.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use benchctl_scoring::TagSets;
use serde_json::Value;

use super::cells::{Blobs, SourceRecord};
use super::item::ImagesFrom;
use super::template::Record;
use super::{records, sources, Manifest};
use crate::{Error, ErrorKind, Problems, Suite};

/// What loading one manifest's files shares: the ids seen (and where), where images are, and
/// the tag sets the items share.
struct LoadState {
    seen: std::collections::HashMap<String, String>,
    images_roots: Vec<PathBuf>,
    tag_sets: TagSets,
}

impl Manifest {
    /// Reads the items under `data_dir`: every problem goes to `problems`, readable items are kept.
    pub fn load(self: &Arc<Self>, data_dir: &Path, problems: &mut Problems) -> Suite {
        let mut suite = Suite::new(&self.id, data_dir, self.summary.clone());
        suite.manifest = Some(Arc::clone(self));
        let files = match self.sources.files(data_dir) {
            Ok(files) => files,
            Err(e) => {
                problems.push(e);
                return suite;
            }
        };
        let mut state = LoadState {
            seen: Default::default(),
            images_roots: match self.item.image_dirs.as_slice() {
                [] => vec![data_dir.to_path_buf()],
                dirs => dirs.iter().map(|d| data_dir.join(d)).collect(),
            },
            tag_sets: TagSets::default(),
        };
        let names = sources::source_names(&files, data_dir);
        let mut empty = Vec::new();
        for (file, name) in files.iter().zip(&names) {
            suite.annotation_files.push(file.clone());
            let before = suite.items.len();
            self.load_file(file, name, &mut state, &mut suite, problems);
            if suite.items.len() == before {
                empty.push(file.display().to_string());
            }
        }
        // A file that gives no item leaves the averages over the files' tag (a macro average,
        // a paper's subset average) to the others: said in the run and by `check`, not silent.
        if let (Some(tag), false, true) = (&self.sources.tag, empty.is_empty(), files.len() > 1) {
            suite.incomplete.push(format!(
                "{} of {} annotation files give no item ({}), so the averages over `{tag}` cover the other {}",
                empty.len(),
                files.len(),
                empty.join(", "),
                files.len() - empty.len()
            ));
        }
        if suite.items.is_empty() && problems.is_empty() {
            let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
            problems.push(Error::new(ErrorKind::Malformed, format!("load {}: it holds no records", names.join(", "))));
        }
        suite
    }

    /// The items of one annotation file, into `suite`; `source` is its name in tags and ids
    /// ([`sources::source_names`]).
    fn load_file(&self, file: &Path, source: &str, state: &mut LoadState, suite: &mut Suite, problems: &mut Problems) {
        let how_to_get = format!("the manifest's `{}` {source}", self.sources.key());
        let blobs = Blobs::new(file);
        let mut records = match records::read(file, self.format, &self.records, &how_to_get, &blobs) {
            Ok(records) => records,
            Err(e) => {
                problems.push(e);
                return;
            }
        };
        // `source.first`: the records past it are not read into items (nor checked).
        if let Some(first) = self.first {
            records.truncate(first);
        }
        if self.entries {
            records = entries_of(records, file, problems);
        }
        if records.len() % self.group != 0 {
            problems.push(Error::new(
                ErrorKind::Malformed,
                format!(
                    "read {}: {} record(s) do not make whole groups of {} (`source.group`); the last {} left out",
                    file.display(),
                    records.len(),
                    self.group,
                    records.len() % self.group
                ),
            ));
        }
        for (index, chunk) in records.chunks_exact_mut(self.group).enumerate() {
            // Each record's value is moved out, not copied: a group is a list of them.
            let (value, key, at) = if self.group == 1 {
                (std::mem::take(&mut chunk[0].value), chunk[0].key.take(), chunk[0].at.clone())
            } else {
                let at = format!("{} to {}", chunk[0].at, chunk[chunk.len() - 1].at);
                (serde_json::Value::Array(chunk.iter_mut().map(|r| std::mem::take(&mut r.value)).collect()), None, at)
            };
            let place = at;
            let at = format!("{} {place}", file.display());
            let lists = match expansion(&value, &self.expand) {
                Ok(lists) => lists,
                Err(what) => {
                    problems.push(Error::new(ErrorKind::Malformed, format!("read {at}: `source.expand`: {what}")));
                    continue;
                }
            };
            let elements: Vec<Option<usize>> = match &lists {
                None => vec![None],
                Some(lists) => (0..lists[0].len()).map(Some).collect(),
            };
            for element in elements {
                let at = element.map_or_else(|| at.clone(), |e| format!("{at} element {e}"));
                let place = element.map_or_else(|| place.clone(), |e| format!("{place} element {e}"));
                let images_from = ImagesFrom { roots: &state.images_roots, blobs: &blobs, place: &place };
                // The element of each expanded list stands for the list; every other field is
                // the record's own, shared by all its items.
                let overrides: Vec<(&[String], &serde_json::Value)> = match (&lists, element) {
                    (Some(lists), Some(e)) => {
                        self.expand.iter().map(Vec::as_slice).zip(lists.iter().map(|l| &l[e])).collect()
                    }
                    _ => Vec::new(),
                };
                let record =
                    Record { value: &value, overrides: &overrides, index, key: key.as_deref(), source, element };
                let default_id = || self.default_id(&record);
                match self.item.item(&record, default_id, &images_from, &mut state.tag_sets, &at) {
                    Ok(item) => match state.seen.get(&item.id) {
                        Some(first) => problems.push(Error::new(
                            ErrorKind::Malformed,
                            format!("read {at}: duplicate item id {:?} (`item.id`), first at {first}", item.id),
                        )),
                        None => {
                            state.seen.insert(item.id.clone(), at);
                            suite.items.push(item);
                        }
                    },
                    Err(e) => problems.push(e),
                }
            }
        }
    }

    /// An item's id without `item.id`: the record's key or position (and element), after its
    /// file's stem where several files number their records alike.
    fn default_id(&self, record: &Record<'_>) -> String {
        let mut own = record.key.map(str::to_string).unwrap_or_else(|| record.index.to_string());
        if let Some(element) = record.element {
            own = format!("{own}/{element}");
        }
        if self.sources.tag.is_some() {
            format!("{}/{own}", record.source)
        } else {
            own
        }
    }
}

/// `source.entries`: each record, a JSON object, as one record per entry, `{"key": …, "value":
/// …}`, in the file's order, the outer record's key kept; a record that is not an object is a
/// problem naming it.
fn entries_of(records: Vec<SourceRecord>, file: &Path, problems: &mut Problems) -> Vec<SourceRecord> {
    let mut out = Vec::new();
    for record in records {
        match record.value {
            Value::Object(map) => out.extend(map.into_iter().map(|(k, v)| SourceRecord {
                at: format!("{} entry {k:?}", record.at),
                value: serde_json::json!({"key": k, "value": v}),
                key: record.key.clone(),
            })),
            _ => problems.push(Error::new(
                ErrorKind::Malformed,
                format!(
                    "read {} {}: `source.entries` reads a record's entries, and it is not an object",
                    file.display(),
                    record.at
                ),
            )),
        }
    }
    out
}

/// The most items one record may expand to (`source.expand`): a benchmark's record holds a
/// few candidates or frames, not a dataset; past it the record is refused, naming it.
pub const MAX_EXPANDED: usize = 100_000;

/// The lists a record expands along (`source.expand`), borrowed from it (`None` without
/// `expand`): all of one length, at most [`MAX_EXPANDED`]. The record's items are made from it
/// one by one, each element standing for its list, the rest of the record shared.
fn expansion<'v>(value: &'v Value, paths: &[Vec<String>]) -> std::result::Result<Option<Vec<&'v Vec<Value>>>, String> {
    if paths.is_empty() {
        return Ok(None);
    }
    let mut lists = Vec::with_capacity(paths.len());
    for path in paths {
        let mut node = value;
        for (depth, part) in path.iter().enumerate() {
            let so_far = path[..=depth].join(".");
            node = match node {
                Value::Object(map) => map.get(part).ok_or_else(|| format!("the record has no field `{so_far}`"))?,
                Value::Array(list) => {
                    let index: usize = part
                        .parse()
                        .map_err(|_| format!("`{so_far}`: `{part}` indexes a list, so it must be a number"))?;
                    list.get(index).ok_or_else(|| format!("`{so_far}`: the list has {} element(s)", list.len()))?
                }
                _ => return Err(format!("`{so_far}`: not an object or list")),
            };
        }
        match node {
            Value::Array(list) => lists.push(list),
            _ => return Err(format!("`{}` is not a list", path.join("."))),
        }
    }
    let len = lists[0].len();
    if let Some((path, list)) = paths.iter().zip(&lists).find(|(_, l)| l.len() != len) {
        return Err(format!(
            "`{}` has {len} element(s) but `{}` has {}: lists expanded together must be of one length",
            paths[0].join("."),
            path.join("."),
            list.len()
        ));
    }
    if len > MAX_EXPANDED {
        return Err(format!(
            "`{}` has {len} elements, and one record may expand to at most {MAX_EXPANDED} items",
            paths[0].join(".")
        ));
    }
    Ok(Some(lists))
}
