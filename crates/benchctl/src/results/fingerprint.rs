//! What a run's data was: the annotations' fingerprint and the images' (their content keys),
//! recorded in every run so that `compare` and `merge` know runs of the same data.

use benchctl_suites::Suite;

use crate::{cache, Error, ErrorKind, Result};

/// SHA-256 (hex) of a suite's data as the run saw it: the hub repo and commit it came from
/// (where known, [`benchctl_suites::hub::HubOrigin`]), its manifest's text (a suite read
/// from one), the annotation files' names and bytes,
/// then every item's id and image paths (relative to the data directory) in order. Images'
/// bytes are not read (a 251K-item suite would take minutes); the embedding cache keys them
/// by content anyway. A manifest's annotation file that holds its images (parquet or Arrow
/// cells) is named and sized but not read again (it is mostly those images: a second pass over
/// gigabytes): its images are the image fingerprint's, and what its records give each item
/// (texts, truth, tags) is hashed item by item instead.
pub fn fingerprint(suite: &Suite) -> Result<String> {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    // Files of another commit of the same hub release are another release, even where they
    // hash alike.
    if let Some(origin) = benchctl_suites::hub::HubOrigin::of(&suite.data_dir) {
        hash.update(b"hub");
        hash.update(origin.repo.as_bytes());
        hash.update([0]);
        hash.update(origin.commit.as_bytes());
    }
    // A manifest decides what the annotations mean: another manifest is other data.
    if let Some(manifest) = &suite.manifest {
        hash.update(b"manifest");
        hash.update((manifest.text.len() as u64).to_le_bytes());
        hash.update(manifest.text.as_bytes());
    }
    let holding_images: std::collections::HashSet<std::path::PathBuf> = match &suite.manifest {
        Some(manifest) if manifest.reads_cells() => suite
            .items
            .distinct_sources()
            .iter()
            .filter_map(|s| match s {
                benchctl_suites::ImageSource::Embedded(e) => Some(e.file),
                _ => None,
            })
            .collect(),
        _ => Default::default(),
    };
    for file in &suite.annotation_files {
        if holding_images.contains(file) {
            let len = std::fs::metadata(file)
                .map_err(|e| Error::caused_by(ErrorKind::Data, format!("read {}: {e}", file.display()), e))?
                .len();
            let name = file.strip_prefix(&suite.data_dir).unwrap_or(file);
            hash.update(b"holding images");
            hash.update(name.to_string_lossy().as_bytes());
            hash.update(len.to_le_bytes());
            continue;
        }
        // Streamed into the hash: an annotation file can be hundreds of megabytes.
        let read = |e: std::io::Error| Error::caused_by(ErrorKind::Data, format!("read {}: {e}", file.display()), e);
        let mut opened = std::fs::File::open(file).map_err(read)?;
        let len = opened.metadata().map_err(read)?.len();
        let name = file.strip_prefix(&suite.data_dir).unwrap_or(file);
        hash.update(name.to_string_lossy().as_bytes());
        hash.update(len.to_le_bytes());
        let copied = std::io::copy(&mut opened, &mut hash).map_err(read)?;
        if copied != len {
            return Err(Error::new(
                ErrorKind::Data,
                format!("read {}: it changed while it was read ({len} bytes, then {copied})", file.display()),
            ));
        }
    }
    let data_dir = format!("{}/", suite.data_dir.display());
    for item in &suite.items {
        hash.update(item.id().as_bytes());
        hash.update([0]);
        for image in item.images() {
            let name = image.display_name();
            hash.update(name.strip_prefix(&data_dir).unwrap_or(&name).as_bytes());
            hash.update([0]);
        }
        if !holding_images.is_empty() {
            hash_records_of(&mut hash, item);
        }
    }
    Ok(cache::hex(&hash.finalize()))
}

/// What an item's records gave it, for [`fingerprint`] where the file is not hashed: its
/// texts, its truth (row by row) and its tags, each delimited.
fn hash_records_of(hash: &mut sha2::Sha256, item: benchctl_suites::ItemRef<'_>) {
    use sha2::Digest;
    for text in item.texts() {
        hash.update(text.as_bytes());
        hash.update([0]);
    }
    let truth = item.truth();
    hash.update((truth.images() as u64).to_le_bytes());
    hash.update((truth.texts() as u64).to_le_bytes());
    let cells: Vec<u8> =
        (0..truth.images()).flat_map(|k| (0..truth.texts()).map(move |l| u8::from(truth.is_match(k, l)))).collect();
    hash.update(&cells);
    for (key, values) in item.tags().iter() {
        hash.update(key.as_bytes());
        hash.update([1]);
        for value in values {
            hash.update(value.as_bytes());
            hash.update([0]);
        }
    }
}

/// SHA-256 (hex) of images' content keys (the SHA-256 of each file's bytes, the embedding
/// cache's keys), in the order given: the suite's images item by item. Computed from keys
/// every run reads anyway, so it costs no extra pass over the images.
pub fn image_fingerprint(keys: impl Iterator<Item = cache::Key>) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for key in keys {
        hash.update(key);
    }
    cache::hex(&hash.finalize())
}
