//! The published metrics, one module per metric family.
//!
//! A suite names its [`MetricFamily`]; [`evaluate`] turns the scores of its items into a
//! [`Report`] with the headline metrics and one breakdown per tag key.

pub mod choice;
pub mod equivariance;
mod family;
pub mod group;
pub mod pairwise;
pub mod positives;
pub mod retrieval;
pub mod stats;
mod summary;

pub(crate) use family::Family;
pub use family::{Aggregate, FamilyFacts, MetricFamily, Ties};
pub use summary::{AllOf, GroupFilter, SubsetAverage, Summary};

/// Every metric family an item suite can name, each declared in its own module: a new family
/// is its file and one line here.
pub const FAMILIES: &[MetricFamily] =
    &[group::FAMILY, pairwise::FAMILY, choice::FAMILY, equivariance::FAMILY, positives::FAMILY];

impl MetricFamily {
    /// The family a manifest names by `id`.
    pub fn find(id: &str) -> Option<Self> {
        FAMILIES.iter().copied().find(|f| f.id() == id)
    }
}

/// Whether a larger value of `metric` is better, as the family that reports it declares
/// (every item family's lower-is-better metrics, and retrieval's statistics): false for the
/// EqSim deviation, and for retrieval's median rank, drop rate and RSMS. A name no family
/// declares lower-is-better is higher-is-better (every percentage of items).
pub fn higher_is_better(metric: &str) -> bool {
    FAMILIES.iter().all(|f| f.higher_is_better(metric)) && retrieval::higher_is_better(metric)
}

use std::collections::BTreeMap;

use crate::report::{Breakdown, Group, Report};
use crate::{Error, Result, ScoreTensor, Tags, Truth};
use benchctl_base::spill::{self, SpillVec};

/// What the metrics need of one item: its truth and its tags.
#[derive(Debug, Clone, Copy)]
pub struct ItemView<'a> {
    pub truth: &'a Truth,
    pub tags: &'a Tags,
}

/// Scores every item and summarises the metrics overall and per tag value.
///
/// `breakdown_keys` lists the tag keys to break down by, in report order.
pub fn evaluate(summary: &Summary, scores: &ScoreTensor, items: &[ItemView<'_>]) -> Result<Report> {
    let item_values = ItemValues::new(summary, scores, items)?;
    let (per_item, values) = (item_values.per_item, &item_values.values);
    let all = || 0..items.len();
    let mut metrics = headline(per_item, values, all, usize::MAX, summary, items);
    for all_of in &summary.all_of {
        let groups = group_sums(&all_of.key, all(), items, values, per_item);
        // A group's mean of a 0/1 metric is exactly 100 when every member scores 1.
        let means: Vec<f64> = groups
            .into_values()
            .filter_map(|(_, sums)| sums.finish().into_iter().find(|(n, _)| *n == all_of.metric).map(|(_, v)| v))
            .collect();
        if !means.is_empty() {
            let whole = means.iter().filter(|&&m| m >= 100.0).count();
            metrics.push((all_of.name.clone(), 100.0 * whole as f64 / means.len() as f64));
        }
    }
    let breakdowns = summary
        .breakdown_keys
        .iter()
        .map(|key| Breakdown {
            key: key.to_string(),
            groups: group_sums(key, all(), items, values, per_item)
                .into_iter()
                .map(|(value, (members, sums))| Group {
                    value: value.to_string(),
                    items: members,
                    metrics: sums.finish(),
                })
                .collect(),
        })
        .collect();
    Ok(Report { items: items.len(), metrics, breakdowns })
}

/// One per-item metric of a family, with every item's own value of it.
pub struct PerItemMetric {
    pub name: &'static str,
    /// Whether each value is a 0/1 outcome (the metric is a percentage of items).
    pub binary: bool,
    /// By item; `None` where the metric does not apply to the item.
    pub values: Vec<Option<f64>>,
}

/// Every item's own value of each of its family's per-item metrics, as the published metrics
/// aggregate them: what a failure browser shows per item (`benchctl report`).
pub fn per_item_values(summary: &Summary, scores: &ScoreTensor, items: &[ItemView<'_>]) -> Result<Vec<PerItemMetric>> {
    let values = ItemValues::new(summary, scores, items)?;
    let names = values.per_item.names();
    Ok(names
        .iter()
        .enumerate()
        .map(|(m, &name)| PerItemMetric {
            name,
            binary: values.per_item.aggregate(m) == Aggregate::Percent,
            values: (0..values.values.len()).map(|i| values.values.get(i, m)).collect(),
        })
        .collect())
}

/// The family's per-item values of every item (see [`Family`]), with the metric names and
/// how each is aggregated: what resampling statistics work from.
pub(crate) struct ItemValues {
    per_item: &'static dyn Family,
    pub values: ValueRows,
}

impl ItemValues {
    pub fn new(summary: &Summary, scores: &ScoreTensor, items: &[ItemView<'_>]) -> Result<Self> {
        if items.is_empty() {
            return Err(Error::new("there are no items to score"));
        }
        scores.check_against(items.iter().map(|item| item.truth))?;
        let per_item = summary.family.declared();
        if summary.ties == Ties::First && !summary.family.takes_first_of_ties() {
            return Err(Error::new(format!(
                "count ties as `first` for {:?} metrics: their official code compares strictly, so a tie is a miss",
                summary.family
            )));
        }
        Ok(Self { per_item, values: per_item.values(scores, items, summary.ties)? })
    }

    /// The headline metrics over `members` (indices, repeats allowed; each call of `members`
    /// gives the same sequence, so that a resample is replayed, not held).
    pub fn headline<I: Iterator<Item = usize>>(
        &self,
        members: impl Fn() -> I,
        summary: &Summary,
        items: &[ItemView<'_>],
    ) -> Vec<(String, f64)> {
        headline(self.per_item, &self.values, members, self.window(summary), summary, items)
    }

    /// How many items' values one pass of [`ItemValues::headline`] reads at random: all of
    /// them while the values are in memory (under the [`spill`] budget); once spilled, as many
    /// as [`spill::TRIM_BYTES`] hold (a million Winoground items' outcomes are 3 MB, one
    /// window), so that what a resample keeps resident does not grow with the suite. The
    /// windows change no count; a real-valued mean (EqSim's deviation) summed over several
    /// may differ from the one-pass sum in its last bits.
    fn window(&self, summary: &Summary) -> usize {
        if !self.values.is_spilled() {
            return usize::MAX;
        }
        let grouped = summary.macro_over.is_some() || summary.subset_average.is_some();
        let per_item = self.values.row_bytes() + if grouped { size_of::<ItemView>() } else { 0 };
        spill::TRIM_BYTES / per_item.max(1)
    }

    /// Names of the metrics whose per-item values are 0/1 outcomes, with their index.
    pub fn binary_metrics(&self) -> Vec<(usize, &'static str)> {
        self.per_item
            .names()
            .iter()
            .enumerate()
            .filter(|&(m, _)| self.per_item.aggregate(m) == Aggregate::Percent)
            .map(|(m, &n)| (m, n))
            .collect()
    }
}

/// The headline metrics over `members`: each metric, then (with `macro_over`) the mean of
/// each metric over the groups of that tag among the members, then the subset average.
///
/// One pass per `window` of item indices (all of them when `window` is at least the suite):
/// each pass reads `members` again and adds only those in its window, so that random reads
/// (a bootstrap resample) touch one window's values at a time. Counts, and so every 0/1
/// metric, its macro average and every quartile, do not depend on the windows; a real-valued
/// mean is summed window by window (see [`ItemValues::window`]).
fn headline<I: Iterator<Item = usize>>(
    per_item: &'static dyn Family,
    values: &ValueRows,
    members: impl Fn() -> I,
    window: usize,
    summary: &Summary,
    items: &[ItemView<'_>],
) -> Vec<(String, f64)> {
    let mut overall = Sums::new(per_item);
    let mut by_macro = summary.macro_over.as_deref().map(|key| (key, BTreeMap::new()));
    let mut by_subset = summary.subset_average.as_ref().map(|average| (average.key.as_str(), BTreeMap::new()));
    let window = window.max(1);
    for start in (0..items.len()).step_by(window) {
        let end = start.saturating_add(window).min(items.len());
        for i in members().filter(|i| (start..end).contains(i)) {
            overall.add(values, i);
            for (key, groups) in by_macro.iter_mut().chain(by_subset.iter_mut()) {
                add_to_groups(groups, key, i, items, values, per_item);
            }
        }
    }
    let mut metrics = overall.finish();
    if let Some((_, groups)) = by_macro {
        let groups: Vec<Vec<(String, f64)>> = groups
            .into_iter()
            .filter(|(value, (count, _))| summary.macro_groups.keeps(value, *count))
            .map(|(_, (_, sums))| sums.finish())
            .collect();
        let names: Vec<String> = metrics.iter().map(|(n, _)| n.clone()).collect();
        for name in names {
            let means: Vec<f64> =
                groups.iter().filter_map(|g| g.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)).collect();
            if !means.is_empty() {
                metrics.push((format!("{name}_macro"), means.iter().sum::<f64>() / means.len() as f64));
            }
        }
    }
    if let (Some(average), Some((_, groups))) = (&summary.subset_average, by_subset) {
        let groups = groups.into_iter().map(|(value, (_, sums))| (value, sums.finish())).collect();
        metrics.extend(subset_average(average, &groups));
    }
    metrics
}

/// The subsets' combined metrics and the paper's average over them (see [`SubsetAverage`]),
/// from the metrics of each group of its tag. A subset with none of its groups among the
/// members leaves the average out: it would be a different number from the paper's.
fn subset_average(average: &SubsetAverage, groups: &BTreeMap<&str, Vec<(String, f64)>>) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    let mut terms = Vec::new();
    let mut complete = true;
    for (subset, values_of_subset) in &average.subsets {
        for metric in &average.metrics {
            let present: Vec<f64> = values_of_subset
                .iter()
                .filter_map(|v| groups.get(v.as_str())?.iter().find(|(n, _)| n == metric).map(|(_, x)| *x))
                .collect();
            if present.is_empty() {
                complete = false;
                continue;
            }
            let mean = present.iter().sum::<f64>() / present.len() as f64;
            if values_of_subset.len() > 1 {
                out.push((format!("{metric}_{subset}"), mean));
            }
            terms.push(mean);
        }
    }
    if complete && !terms.is_empty() {
        out.push((average.name.clone(), terms.iter().sum::<f64>() / terms.len() as f64));
    }
    out
}

/// The running sums of each metric over some items, in the order they were added (the same
/// sums, in the same order, as adding up a list of them): a summary that holds no list of
/// members. A [`Aggregate::Distribution`] metric keeps its values (spilled) for its quartiles.
struct Sums {
    per_item: &'static dyn Family,
    sum: Vec<f64>,
    count: Vec<usize>,
    kept: Vec<Option<SpillVec<f64>>>,
}

impl Sums {
    fn new(per_item: &'static dyn Family) -> Self {
        let metrics = per_item.names().len();
        Sums {
            per_item,
            // -0.0 is the neutral element of a float sum, as `Iterator::sum` starts from it.
            sum: vec![-0.0; metrics],
            count: vec![0; metrics],
            kept: (0..metrics)
                .map(|m| (per_item.aggregate(m) == Aggregate::Distribution).then(SpillVec::new))
                .collect(),
        }
    }

    fn add(&mut self, values: &ValueRows, item: usize) {
        for m in 0..self.sum.len() {
            if let Some(v) = values.get(item, m) {
                self.sum[m] += v;
                self.count[m] += 1;
                if let Some(kept) = &mut self.kept[m] {
                    kept.push(v);
                }
            }
        }
    }

    fn finish(mut self) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        for (m, name) in self.per_item.names().iter().enumerate() {
            if self.count[m] == 0 {
                continue;
            }
            let mean = self.sum[m] / self.count[m] as f64;
            match self.per_item.aggregate(m) {
                Aggregate::Percent => out.push((name.to_string(), 100.0 * mean)),
                Aggregate::Distribution => {
                    let mut sorted = self.kept[m].take().unwrap_or_default();
                    // `f64::total_cmp`'s order, as a key: a million values sort in runs.
                    spill::sort_by_key(&mut sorted, |v| {
                        let bits = v.to_bits() as i64;
                        bits ^ ((((bits >> 63) as u64) >> 1) as i64)
                    });
                    let [mean_suffix, quartiles @ ..] = family::DISTRIBUTION_SUFFIXES;
                    out.push((format!("{name}_{mean_suffix}"), mean));
                    for (suffix, q) in quartiles.into_iter().zip([0.25, 0.5, 0.75]) {
                        out.push((format!("{name}_{suffix}"), quantile(&sorted, q)));
                    }
                }
            }
        }
        self.per_item.derive(&mut out);
        out
    }
}

/// Every item's value of each per-item metric, column by column and spilled with the suite
/// ([`spill`]): a column of 0/1 outcomes holds a byte per item (0 where the metric does not
/// apply, 1 a miss, 2 a hit), and becomes a column of `Option<f64>` the first time a value
/// is neither 0 nor 1. The bootstrap reads items at random, thousands of times over: a byte
/// is what stays resident for it.
pub(crate) struct ValueRows {
    columns: Vec<Column>,
    len: usize,
}

enum Column {
    Outcomes(SpillVec<u8>),
    Reals(SpillVec<Option<f64>>),
}

impl ValueRows {
    /// Rows of `width` values.
    pub fn new(width: usize) -> Self {
        ValueRows { columns: (0..width).map(|_| Column::Outcomes(SpillVec::new())).collect(), len: 0 }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Appends one item's values, one per column.
    ///
    /// # Panics
    /// When `row` is not as wide as the table (a family's bug, not data).
    pub fn push(&mut self, row: &[Option<f64>]) {
        assert_eq!(row.len(), self.columns.len(), "a row of {} values in a table of {}", row.len(), self.columns.len());
        for (column, &value) in self.columns.iter_mut().zip(row) {
            if let (Column::Outcomes(bytes), Some(v)) = (&*column, value) {
                if v != 0.0 && v != 1.0 {
                    *column = Column::Reals(bytes.iter().map(|&b| b.checked_sub(1).map(f64::from)).collect());
                }
            }
            match column {
                Column::Outcomes(bytes) => bytes.push(value.map_or(0, |v| if v == 1.0 { 2 } else { 1 })),
                Column::Reals(reals) => reals.push(value),
            }
        }
        self.len += 1;
    }

    /// The bytes one item's values take.
    fn row_bytes(&self) -> usize {
        self.columns
            .iter()
            .map(|c| match c {
                Column::Outcomes(_) => size_of::<u8>(),
                Column::Reals(_) => size_of::<Option<f64>>(),
            })
            .sum()
    }

    /// Whether any column lives in a spill file.
    fn is_spilled(&self) -> bool {
        self.columns.iter().any(|c| match c {
            Column::Outcomes(bytes) => bytes.is_spilled(),
            Column::Reals(reals) => reals.is_spilled(),
        })
    }

    /// Item `item`'s value of metric `m`.
    pub fn get(&self, item: usize, m: usize) -> Option<f64> {
        match &self.columns[m] {
            Column::Outcomes(bytes) => bytes[item].checked_sub(1).map(f64::from),
            Column::Reals(reals) => reals[item],
        }
    }
}

impl FromIterator<Vec<Option<f64>>> for ValueRows {
    fn from_iter<I: IntoIterator<Item = Vec<Option<f64>>>>(rows: I) -> Self {
        let mut table: Option<ValueRows> = None;
        for row in rows {
            table.get_or_insert_with(|| ValueRows::new(row.len())).push(&row);
        }
        table.unwrap_or_else(|| ValueRows::new(0))
    }
}

/// The q-quantile of sorted values, interpolating linearly between order statistics.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// The sums of `members` grouped by their values for `key` (groups sorted by value), with
/// how many members each group has. Members without the key are in no group; one with
/// several values is in each of their groups.
fn group_sums<'i>(
    key: &str,
    members: impl Iterator<Item = usize>,
    items: &[ItemView<'i>],
    values: &ValueRows,
    per_item: &'static dyn Family,
) -> BTreeMap<&'i str, (usize, Sums)> {
    let mut groups = BTreeMap::new();
    members.for_each(|i| add_to_groups(&mut groups, key, i, items, values, per_item));
    groups
}

/// Adds item `i` to the sums of each of its groups for `key`.
fn add_to_groups<'i>(
    groups: &mut BTreeMap<&'i str, (usize, Sums)>,
    key: &str,
    i: usize,
    items: &[ItemView<'i>],
    values: &ValueRows,
    per_item: &'static dyn Family,
) {
    for (k, tag_values) in items[i].tags {
        if k == key {
            for value in tag_values {
                let (count, sums) = groups.entry(value.as_str()).or_insert_with(|| (0, Sums::new(per_item)));
                *count += 1;
                sums.add(values, i);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::stats::SplitMix64;
    use super::*;

    fn splits() -> SubsetAverage {
        SubsetAverage::new("avg", "split", &[("a", &["a"]), ("bc", &["b", "c"])], &["text_score", "group_score"])
    }

    /// Reading a resample window by window (as a spilled suite's bootstrap does) gives the
    /// one-pass headline: every count-based metric, macro and subset average and quartile
    /// bit for bit, a real-valued mean to its last bits.
    #[test]
    fn a_headline_read_in_windows_equals_the_one_pass_headline() -> Result<()> {
        let mut rng = SplitMix64::new(11);
        let n = 1_000;
        let mut scores = ScoreTensor::new();
        for _ in 0..n {
            let v: Vec<f32> = (0..4).map(|_| (rng.below(1000) as f32) / 1000.0).collect();
            scores.push(2, 2, &v)?;
        }
        let truths: Vec<Truth> = (0..n).map(|_| Truth::diagonal(2)).collect();
        let tags: Vec<Tags> = (0..n)
            .map(|i| {
                let split = ["a", "b", "c", "d"][rng.below(4)];
                // Some items in no group, some in two.
                match i % 10 {
                    0 => Tags::new(),
                    1 => vec![("split".to_string(), vec![split.to_string(), "a".to_string()])].into(),
                    _ => vec![("split".to_string(), vec![split.to_string()])].into(),
                }
            })
            .collect();
        let items: Vec<ItemView<'_>> = truths.iter().zip(&tags).map(|(truth, tags)| ItemView { truth, tags }).collect();
        for family in [group::FAMILY, equivariance::FAMILY] {
            let summary = Summary { subset_average: Some(splits()), ..Summary::of(family).macro_over("split") };
            let summary = &summary;
            let values = ItemValues::new(summary, &scores, &items)?;
            let draws: Vec<usize> = (0..n).map(|_| rng.below(n)).collect();
            let members = || draws.iter().copied();
            let one_pass = headline(values.per_item, &values.values, members, usize::MAX, summary, &items);
            assert!(one_pass.iter().any(|(name, _)| name == "avg") && one_pass.len() > 8, "{one_pass:?}");
            for window in [1, 7, 333, n - 1] {
                let windowed = headline(values.per_item, &values.values, members, window, summary, &items);
                assert_eq!(windowed.len(), one_pass.len());
                for ((name, a), (other, b)) in one_pass.iter().zip(&windowed) {
                    assert_eq!(name, other);
                    if name == "eqsim_deviation_mean" {
                        assert!((a - b).abs() <= 1e-12 * a.abs(), "{name}, window {window}: {a} vs {b}");
                    } else {
                        assert_eq!(a.to_bits(), b.to_bits(), "{name}, window {window}: {a} vs {b}");
                    }
                }
            }
        }
        Ok(())
    }
}
