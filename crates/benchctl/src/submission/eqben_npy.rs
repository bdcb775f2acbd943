//! EqBen's `prediction.npy`.
//!
//! EqBen's official scorer (`evaluate_eqben_locally.py`, the one its CodaLab server ran)
//! reads one `<f4` score per entry of the flat annotation list
//! (`eqben_ann/ann_json_finegrained_random.json`), in the list's order, shape
//! `(4 × items,)` = (1,004,192,) for the full release. The loader keeps that order as the
//! suite's [`PairOrder`].

use std::path::Path;

use benchctl_scoring::ScoreTensor;
use benchctl_suites::{PairOrder, Suite};
use npyz::WriterBuilder;

use super::Written;
use crate::dump::{bad, Matrices};
use crate::{Error, ErrorKind, Result};

/// The file name the official scorer reads.
pub const FILE: &str = benchctl_suites::eqben::SUBMISSION_FILE;

/// A run's scores as the vector the official scorer reads.
pub(super) fn written(suite: &Suite, scores: &ScoreTensor) -> Result<Option<Written>> {
    let Some(ordered) = ordered_scores(suite, scores)? else { return Ok(None) };
    let order = suite.pair_order.as_ref().map(|o| o.file.display().to_string()).unwrap_or_default();
    let npy = |e: std::io::Error| Error::results(format!("write {FILE}: {e}"));
    let mut bytes = Vec::new();
    let mut writer = npyz::WriteOptions::new()
        .default_dtype()
        .shape(&[ordered.len() as u64])
        .writer(&mut bytes)
        .begin_nd()
        .map_err(npy)?;
    writer.extend(ordered.iter().copied()).map_err(npy)?;
    writer.finish().map_err(npy)?;
    Ok(Some(Written {
        file: FILE,
        bytes,
        about: format!(
            "{} scores in the order of {order}; the official scorer reads it as src_file/{FILE}",
            ordered.len()
        ),
    }))
}

/// Reads `prediction.npy` into `m`: one score per entry of the suite's pair order.
pub(super) fn read(path: &Path, suite: &Suite, m: &mut Matrices) -> Result<()> {
    let order = suite.pair_order.as_ref().ok_or_else(|| {
        Error::new(
            ErrorKind::Usage,
            format!("read {} as a prediction vector: {} has no official submission order", path.display(), suite.id),
        )
    })?;
    let values = read_prediction(path, order)?;
    for (i, (slot, value)) in order.slots.iter().zip(values).enumerate() {
        let at = format!("{} entry {i} (entry {i} of {})", path.display(), order.file.display());
        if slot.is_missing() {
            return Err(bad(format!("score {at}: the entry is not part of a readable item")));
        }
        m.set(slot.item as usize, usize::from(slot.image), usize::from(slot.text), value, &at)?;
    }
    Ok(())
}

/// Every pair's score in the suite's official submission order, or `None` when the suite has
/// no such order. Every entry must name a scored pair.
fn ordered_scores(suite: &Suite, scores: &ScoreTensor) -> Result<Option<Vec<f32>>> {
    let Some(order) = &suite.pair_order else { return Ok(None) };
    order
        .slots
        .iter()
        .enumerate()
        .map(|(i, slot)| {
            let item = slot.item as usize;
            if slot.is_missing() || item >= scores.len() {
                return Err(Error::new(
                    ErrorKind::Data,
                    format!("order the scores as {}: its entry {i} names no evaluated pair", order.file.display()),
                ));
            }
            // The official format is `<f4`: a model's scores are f32 already.
            Ok(scores.item(item).get(usize::from(slot.image), usize::from(slot.text)) as f32)
        })
        .collect::<Result<Vec<f32>>>()
        .map(Some)
}

/// Reads a submission vector as the official scorer would index it: a 1-D, C-ordered array
/// of `<f4` (or `<f8`) with exactly one finite score per entry of `order`.
fn read_prediction(path: &Path, order: &PairOrder) -> Result<Vec<f64>> {
    let bad = |what: String| Error::new(ErrorKind::Data, format!("read {}: {what}", path.display()));
    benchctl_suites::paths::require_regular_file(path)
        .map_err(|e| Error::caused_by(ErrorKind::Data, e.to_string(), e))?;
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let npy = npyz::NpyFile::new(&bytes[..]).map_err(|e| bad(format!("not a .npy array: {e}")))?;
    let shape = npy.shape().to_vec();
    if shape.len() != 1 {
        return Err(bad(format!("expected a vector of shape ({},), got {shape:?}", order.slots.len())));
    }
    if npy.order() != npyz::Order::C {
        return Err(bad("expected a C-ordered array (fortran_order False)".into()));
    }
    let descr = npy.dtype().descr().trim_matches('\'').to_string();
    // The header's claim against the file, before anything is read or allocated for it.
    let width: u64 = if descr == "<f8" { 8 } else { 4 };
    let claimed = shape[0].saturating_mul(width);
    if claimed > bytes.len() as u64 {
        return Err(bad(format!(
            "its header claims {} scores ({claimed} bytes), but the file holds {} bytes in all: it is truncated or its header is wrong",
            shape[0],
            bytes.len()
        )));
    }
    let values: Vec<f64> = match descr.as_str() {
        "<f4" => npy.into_vec::<f32>().map_err(|e| bad(e.to_string()))?.into_iter().map(f64::from).collect(),
        "<f8" => npy.into_vec::<f64>().map_err(|e| bad(e.to_string()))?,
        other => return Err(bad(format!("expected float32 (<f4) or float64 (<f8) scores, got dtype {other}"))),
    };
    if values.len() != order.slots.len() {
        return Err(bad(format!(
            "{} scores for the {} entries of {} (one per entry, in its order)",
            values.len(),
            order.slots.len(),
            order.file.display()
        )));
    }
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        return Err(bad(format!("score {i} is {}, not a finite number", values[i])));
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `.npy` v1.0 header for a vector of `len` values of `descr`, and no data.
    fn header_only(descr: &str, len: u64) -> Vec<u8> {
        let mut dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({len},), }}");
        while (10 + dict.len() + 1) % 64 != 0 {
            dict.push(' ');
        }
        dict.push('\n');
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        bytes.extend_from_slice(dict.as_bytes());
        bytes
    }

    #[test]
    fn a_header_claiming_more_scores_than_the_file_holds_is_named() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("prediction.npy");
        let bytes = header_only("<f4", 4_000_000_000_000);
        std::fs::write(&path, &bytes)?;
        let order = PairOrder { file: dir.path().join("eqben.json"), slots: benchctl_base::spill::SpillVec::new() };
        let err = read_prediction(&path, &order).unwrap_err().to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(
            err.contains("claims 4000000000000 scores") && err.contains(&format!("holds {} bytes", bytes.len())),
            "{err}"
        );
        // A device in the file's place is refused before it is read.
        let err = read_prediction(Path::new("/dev/zero"), &order).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        Ok(())
    }
}
