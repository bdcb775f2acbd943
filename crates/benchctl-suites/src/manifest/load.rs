//! Loading a manifest's suite: each annotation file read as records, records grouped and
//! expanded as `[source]` says, each made an item as `[item]` says; every problem goes to the
//! list with its file, record and key, readable items are kept.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use benchctl_scoring::TagSets;

use super::template::Record;
use super::{records, sources, Manifest};
use crate::{Error, ErrorKind, Problems, Suite};

/// What loading one manifest's files shares: the ids seen (and where), where images are, and
/// the tag sets the items share.
struct LoadState {
    seen: std::collections::HashMap<String, String>,
    images_root: PathBuf,
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
            images_root: data_dir.join(&self.item.image_dir),
            tag_sets: TagSets::default(),
        };
        for file in &files {
            suite.annotation_files.push(file.clone());
            self.load_file(file, &mut state, &mut suite, problems);
        }
        if suite.items.is_empty() && problems.is_empty() {
            let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
            problems.push(Error::new(ErrorKind::Malformed, format!("load {}: it holds no records", names.join(", "))));
        }
        suite
    }

    /// The items of one annotation file, into `suite`.
    fn load_file(&self, file: &Path, state: &mut LoadState, suite: &mut Suite, problems: &mut Problems) {
        let how_to_get = format!("the manifest's `{}` {}", self.sources.key(), sources::stem(file));
        let records = match records::read(file, self.format, &self.records, &how_to_get) {
            Ok(records) => records,
            Err(e) => {
                problems.push(e);
                return;
            }
        };
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
        let source = sources::stem(file);
        for (index, chunk) in records.chunks_exact(self.group).enumerate() {
            let (value, key, at) = if self.group == 1 {
                (chunk[0].value.clone(), chunk[0].key.as_deref(), chunk[0].at.clone())
            } else {
                let list = chunk.iter().map(|r| r.value.clone()).collect();
                (serde_json::Value::Array(list), None, format!("{} to {}", chunk[0].at, chunk[chunk.len() - 1].at))
            };
            let at = format!("{} {at}", file.display());
            let elements = match expanded(value, &self.expand) {
                Ok(elements) => elements,
                Err(what) => {
                    problems.push(Error::new(ErrorKind::Malformed, format!("read {at}: `source.expand`: {what}")));
                    continue;
                }
            };
            for (element, value) in elements {
                let at = element.map_or_else(|| at.clone(), |e| format!("{at} element {e}"));
                let record = Record { value: &value, index, key, source: &source, element };
                let default_id = || self.default_id(&record);
                match self.item.item(&record, default_id, &state.images_root, &mut state.tag_sets, &at) {
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

/// A record as the items it holds: itself (no `expand`), or one record per element of its
/// `expand` lists (all of one length), each list replaced by that element. A record whose
/// lists are empty holds no item.
fn expanded(
    value: serde_json::Value,
    paths: &[Vec<String>],
) -> std::result::Result<Vec<(Option<usize>, serde_json::Value)>, String> {
    use serde_json::Value;
    if paths.is_empty() {
        return Ok(vec![(None, value)]);
    }
    fn at<'v>(value: &'v mut Value, path: &[String]) -> std::result::Result<&'v mut Value, String> {
        let mut node = value;
        for (depth, part) in path.iter().enumerate() {
            let so_far = path[..=depth].join(".");
            node = match node {
                Value::Object(map) => map.get_mut(part).ok_or_else(|| format!("the record has no field `{so_far}`"))?,
                Value::Array(list) => {
                    let len = list.len();
                    let index: usize = part
                        .parse()
                        .map_err(|_| format!("`{so_far}`: `{part}` indexes a list, so it must be a number"))?;
                    list.get_mut(index).ok_or_else(|| format!("`{so_far}`: the list has {len} element(s)"))?
                }
                _ => return Err(format!("`{so_far}`: not an object or list")),
            };
        }
        Ok(node)
    }
    let mut template = value;
    let mut lists = Vec::with_capacity(paths.len());
    for path in paths {
        match at(&mut template, path)? {
            Value::Array(list) => lists.push(std::mem::take(list)),
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
    (0..len)
        .map(|i| {
            let mut value = template.clone();
            for (path, list) in paths.iter().zip(&lists) {
                *at(&mut value, path)? = list[i].clone();
            }
            Ok((Some(i), value))
        })
        .collect()
}
