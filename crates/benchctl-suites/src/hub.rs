//! A suite's data as a Hugging Face dataset repo publishes it: where a manifest says its files
//! come from (its `[hub]` section, [`HubSource`]), and what a data directory knows of the
//! repo and commit it was fetched from ([`HubOrigin`]), which every run records.
//!
//! A data directory is a hub release when it is a snapshot of the hub cache
//! (`…/datasets--ORG--NAME/snapshots/COMMIT`, the layout `huggingface_hub` writes, whose files
//! are links into the repo's `blobs/`), or when `benchctl fetch` copied the files into it and
//! left [`ORIGIN_FILE`] beside them.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A dataset repo on the hub that a suite's files come from (a manifest's `[hub]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubSource {
    /// `ORG/NAME`.
    pub repo: String,
    /// The branch, tag or commit the suite is read at.
    pub revision: String,
    /// The repo files the suite needs: names or patterns where `*` stands for any run of
    /// characters (`data/test-*.parquet`), matched against the repo's whole file names.
    pub files: Vec<String>,
    /// Whether the repo asks users to accept its terms (a token is then needed).
    pub gated: bool,
    /// Whether the files include `.zip` archives that `fetch` unpacks into the data directory
    /// (as the release's own loader unzips them), where the suite is then read: never from the
    /// hub cache's snapshot, which holds the archives.
    pub unpack: bool,
}

impl HubSource {
    /// The repo files among `names` that the suite needs, in the repo's order.
    pub fn select(&self, names: &[String]) -> Vec<String> {
        select(&self.files, names)
    }
}

/// The names among `names` that one of `patterns` matches (`*`: any run of characters, `/`
/// included), each once, in `names`' order.
pub fn select(patterns: &[String], names: &[String]) -> Vec<String> {
    names.iter().filter(|n| patterns.iter().any(|p| crate::pattern::matches(p, n))).cloned().collect()
}

use benchctl_base::hub_names::is_commit_hash as is_commit;
pub use benchctl_base::hub_names::is_repo_id;

/// The file `benchctl fetch` leaves in a data directory it copied a hub release into.
pub const ORIGIN_FILE: &str = ".benchctl-hub-origin.json";

/// The dataset repo and commit a data directory's files came from, recorded in each run and
/// its data fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HubOrigin {
    pub repo: String,
    pub commit: String,
}

impl HubOrigin {
    /// Where `dir`'s files came from: the hub cache snapshot it is, else the [`ORIGIN_FILE`]
    /// it holds; `None` for other directories (or an origin file that is not one).
    pub fn of(dir: &Path) -> Option<Self> {
        if let Some(snapshot) = Snapshot::of(dir) {
            return Some(snapshot.origin);
        }
        let text = std::fs::read(dir.join(ORIGIN_FILE)).ok()?;
        let origin: HubOrigin = serde_json::from_slice(&text).ok()?;
        (is_repo_id(&origin.repo) && is_commit(&origin.commit)).then_some(origin)
    }
}

/// A data directory inside a dataset snapshot of the hub cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub origin: HubOrigin,
    /// The repo's `blobs/` folder, where the snapshot's links lead.
    pub blobs: PathBuf,
}

impl Snapshot {
    /// `dir` as a snapshot (`…/datasets--ORG--NAME/snapshots/COMMIT`, or a folder inside
    /// one), if it is one.
    pub fn of(dir: &Path) -> Option<Self> {
        let dir = std::path::absolute(dir).ok()?;
        let mut below = dir.as_path();
        loop {
            let parent = below.parent()?;
            if parent.file_name()? == "snapshots" {
                let commit = below.file_name()?.to_str()?;
                let repo_folder = parent.parent()?;
                let (org, name) = repo_folder.file_name()?.to_str()?.strip_prefix("datasets--")?.split_once("--")?;
                let repo = format!("{org}/{name}");
                if !is_commit(commit) || !is_repo_id(&repo) {
                    return None;
                }
                let origin = HubOrigin { repo, commit: commit.to_string() };
                return Some(Snapshot { origin, blobs: repo_folder.join("blobs") });
            }
            below = parent;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_folder_names_its_repo_and_commit() {
        let commit = "0123456789abcdef0123456789abcdef01234567";
        let dir = PathBuf::from(format!("/cache/hub/datasets--imirandam--BiVLC/snapshots/{commit}"));
        let snapshot = Snapshot::of(&dir).unwrap();
        assert_eq!(snapshot.origin, HubOrigin { repo: "imirandam/BiVLC".into(), commit: commit.into() });
        assert_eq!(snapshot.blobs, PathBuf::from("/cache/hub/datasets--imirandam--BiVLC/blobs"));
        assert_eq!(Snapshot::of(&dir.join("data")).unwrap().origin.commit, commit);
        // A model snapshot, a short commit or a folder outside the cache are not dataset snapshots.
        assert!(Snapshot::of(Path::new(&format!("/c/models--o--m/snapshots/{commit}"))).is_none());
        assert!(Snapshot::of(Path::new("/c/datasets--o--m/snapshots/main")).is_none());
        assert!(Snapshot::of(Path::new("/data/bivlc")).is_none());
    }

    #[test]
    fn patterns_select_whole_repo_paths() {
        let names: Vec<String> =
            ["README.md", "data/test-00000-of-00002.parquet", "data/test-00001-of-00002.parquet", "data/train.parquet"]
                .map(String::from)
                .to_vec();
        let picked = select(&["data/test-*.parquet".to_string()], &names);
        assert_eq!(picked, names[1..3]);
        assert_eq!(select(&["*.md".to_string(), "README.md".to_string()], &names), ["README.md"]);
        assert!(select(&["test-*.parquet".to_string()], &names).is_empty());
    }
}
