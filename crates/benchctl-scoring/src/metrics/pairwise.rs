//! VALSE's pairwise accuracy (Parcalabescu et al., "VALSE: A Task-Independent Benchmark
//! for Vision and Language Models Centered on Linguistic Phenomena", ACL 2022,
//! <https://arxiv.org/abs/2112.07566>).
//!
//! `acc_r`: the share of items whose image scores its caption strictly above its foil,
//! `s(image, caption) > s(image, foil)`; a tie is a miss. An item is one image with two
//! texts, the caption matching. For several foils, every foil must be beaten.
//!
//! The paper's probability metrics (`p_c`, `p_f`, `acc`, `min`) need a model that outputs a
//! match probability; they arrive with the image-text-matching models.

use super::{group, ItemView, PerItem};
use crate::{Result, ScoreTensor};

/// Names of the pairwise metrics, in report order.
pub const NAMES: [&str; 1] = ["acc_r"];

pub(crate) struct PairwiseAccuracy;

impl PerItem for PairwiseAccuracy {
    fn names(&self) -> &'static [&'static str] {
        &NAMES
    }

    fn values(&self, scores: &ScoreTensor, items: &[ItemView<'_>]) -> Result<Vec<Vec<Option<f64>>>> {
        // The caption beating every foil for the item's image is Winoground's text criterion.
        Ok(items
            .iter()
            .enumerate()
            .map(|(i, item)| vec![Some(f64::from(u8::from(group::outcome(&scores.item(i), item.truth).text)))])
            .collect())
    }
}
