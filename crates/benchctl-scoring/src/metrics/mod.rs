//! The published metrics, one module per metric family.
//!
//! A suite names its [`MetricFamily`]; [`evaluate`] turns the scores of its items into a
//! [`Report`] with the headline metrics and one breakdown per tag key.

pub mod answered_group;
pub mod answers;
pub mod bidirectional;
pub mod choice;
mod clusters;
pub mod equivariance;
mod family;
pub mod group;
pub mod group_match;
mod grouping;
pub mod pairwise;
pub mod positives;
pub mod power;
pub mod retrieval;
pub mod stats;
mod summary;

pub use clusters::{ClusterRule, Clusters};
pub(crate) use family::Family;
pub use family::{Aggregate, FamilyFacts, MetricFamily, Ties};
pub use summary::{AllOf, GroupFilter, SubsetAverage, Summary};

/// Every metric family an item suite can name, each declared in its own module: a new family
/// is its file and one line here.
pub const FAMILIES: &[MetricFamily] = &[
    group::FAMILY,
    pairwise::FAMILY,
    choice::FAMILY,
    equivariance::FAMILY,
    positives::FAMILY,
    bidirectional::FAMILY,
    answers::FAMILY,
    answered_group::FAMILY,
];

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
    let mut metrics = headline(&item_values, || 0..items.len(), usize::MAX, summary, items.len());
    for all_of in &summary.all_of {
        let grouping = grouping::Grouping::of(&all_of.key, items);
        let mut groups = item_values.sum_groups(&grouping);
        // A group's mean of a 0/1 metric is exactly 100 when every member scores 1.
        let means: Vec<f64> = groups
            .present()
            .into_iter()
            .filter_map(|g| {
                groups.finish_named(g, &item_values.reported).into_iter().find(|(n, _)| *n == all_of.metric)
            })
            .map(|(_, v)| v)
            .collect();
        if !means.is_empty() {
            let whole = means.iter().filter(|&&m| m >= 100.0).count();
            metrics.push((all_of.name.clone(), 100.0 * whole as f64 / means.len() as f64));
        }
    }
    let breakdowns = summary
        .breakdown_keys
        .iter()
        .map(|key| {
            let grouping = grouping::Grouping::of(key, items);
            let mut groups = item_values.sum_groups(&grouping);
            let groups = groups
                .present()
                .into_iter()
                .map(|g| Group {
                    value: grouping.values[g].clone(),
                    items: groups.members[g],
                    metrics: groups.finish_named(g, &item_values.reported),
                })
                .collect();
            Breakdown { key: key.to_string(), groups }
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
    /// The family's reported names, in summary order.
    reported: Vec<String>,
    /// The groups of the macro average's tag key and of the subset average's, found once.
    macro_groups: Option<grouping::Grouping>,
    subset_groups: Option<grouping::Grouping>,
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
        if summary.ties == Ties::Shared && !summary.family.facts().asks_questions {
            return Err(Error::new(format!(
                "count ties as `shared` for {:?} metrics: only questions with answer options share a tie",
                summary.family
            )));
        }
        let grouping = |key: Option<&str>| key.map(|key| grouping::Grouping::of(key, items));
        Ok(Self {
            per_item,
            values: per_item.values(scores, items, summary.ties)?,
            reported: summary.family.reported_names(),
            macro_groups: grouping(summary.macro_over.as_deref()),
            subset_groups: grouping(summary.subset_average.as_ref().map(|a| a.key.as_str())),
        })
    }

    /// The headline metrics over `members` (indices, repeats allowed; each call of `members`
    /// gives the same sequence, so that a resample is replayed, not held).
    pub fn headline<I: Iterator<Item = usize>>(
        &self,
        members: impl Fn() -> I,
        summary: &Summary,
        items: &[ItemView<'_>],
    ) -> Vec<(String, f64)> {
        headline(self, members, self.window(summary), summary, items.len())
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

    /// Every item summed into the groups of `grouping` (a breakdown's or a group accuracy's).
    fn sum_groups<'g>(&self, grouping: &'g grouping::Grouping) -> grouping::GroupSums<'g> {
        let mut groups = grouping::GroupSums::new(grouping, self.per_item);
        (0..self.values.len()).for_each(|i| groups.add(&self.values, i));
        groups
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
    item_values: &ItemValues,
    members: impl Fn() -> I,
    window: usize,
    summary: &Summary,
    items: usize,
) -> Vec<(String, f64)> {
    let (per_item, values) = (item_values.per_item, &item_values.values);
    let mut overall = Sums::new(per_item);
    let mut by_macro = item_values.macro_groups.as_ref().map(|g| grouping::GroupSums::new(g, per_item));
    let mut by_subset = item_values.subset_groups.as_ref().map(|g| grouping::GroupSums::new(g, per_item));
    let window = window.max(1);
    for start in (0..items).step_by(window) {
        let end = start.saturating_add(window).min(items);
        for i in members().filter(|i| (start..end).contains(i)) {
            overall.add(values, i);
            for groups in by_macro.iter_mut().chain(by_subset.iter_mut()) {
                groups.add(values, i);
            }
        }
    }
    let mut metrics = overall.finish();
    if let (Some(groups), Some(grouping)) = (&mut by_macro, &item_values.macro_groups) {
        metrics.extend(macro_average(groups, grouping, summary, &item_values.reported, &metrics));
    }
    if let (Some(average), Some(groups), Some(grouping)) =
        (&summary.subset_average, &mut by_subset, &item_values.subset_groups)
    {
        // Only the groups the average names are summarised.
        let named: BTreeMap<&str, Vec<(String, f64)>> = groups
            .present()
            .into_iter()
            .filter(|&g| average.subsets.iter().any(|(_, vs)| vs.contains(&grouping.values[g])))
            .map(|g| (grouping.values[g].as_str(), groups.finish_named(g, &item_values.reported)))
            .collect();
        metrics.extend(subset_average(average, &named));
    }
    metrics
}

/// `<metric>_macro` for each of `overall`'s metrics: its mean over the groups among the
/// members that the summary's group filter keeps (each group's value as a summary of its
/// members alone gives it), where any has it.
fn macro_average(
    groups: &mut grouping::GroupSums<'_>,
    grouping: &grouping::Grouping,
    summary: &Summary,
    reported: &[String],
    overall: &[(String, f64)],
) -> Vec<(String, f64)> {
    let (mut sums, mut counts) = (vec![-0.0f64; reported.len()], vec![0usize; reported.len()]);
    for (g, value) in grouping.values.iter().enumerate() {
        let members = groups.members[g];
        if members == 0 || !summary.macro_groups.keeps(value, members) {
            continue;
        }
        for (r, v) in groups.finish(g).into_iter().enumerate() {
            if let Some(v) = v {
                sums[r] += v;
                counts[r] += 1;
            }
        }
    }
    overall
        .iter()
        .filter_map(|(name, _)| {
            let r = reported.iter().position(|n| n == name)?;
            (counts[r] > 0).then(|| (format!("{name}_macro"), sums[r] / counts[r] as f64))
        })
        .collect()
}

/// The subsets' combined metrics and the paper's average over them (see [`SubsetAverage`]),
/// from the metrics of each group of its tag. Each subset is the mean of its members (tag
/// values, or other subsets' means), computed after the subsets it names; the average is the
/// mean over the top subsets (those no other subset names). A top subset with none of its
/// members among the groups leaves the average out: it would be a different number from the
/// paper's.
fn subset_average(average: &SubsetAverage, groups: &BTreeMap<&str, Vec<(String, f64)>>) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    // Each subset's mean per metric (in `average.metrics` order), once computed.
    let mut means: Vec<Option<Vec<Option<f64>>>> = vec![None; average.subsets.len()];
    for s in average.order() {
        let (subset, members) = &average.subsets[s];
        let mut of_subset = Vec::with_capacity(average.metrics.len());
        for (m, metric) in average.metrics.iter().enumerate() {
            // A tag value without items is left out of its subset's mean (as a file that gives
            // none is, `suite.incomplete` naming it); a listed subset without a mean leaves
            // this one without one too, rather than a mean over fewer subsets.
            let mut inner_missing = false;
            let present: Vec<f64> = members
                .iter()
                .filter_map(|member| match average.subset_named(member, subset) {
                    Some(inner) => {
                        let mean = means[inner].as_ref().and_then(|inner| inner[m]);
                        inner_missing |= mean.is_none();
                        mean
                    }
                    None => groups.get(member.as_str())?.iter().find(|(n, _)| n == metric).map(|(_, x)| *x),
                })
                .collect();
            let mean =
                (!present.is_empty() && !inner_missing).then(|| present.iter().sum::<f64>() / present.len() as f64);
            if let (Some(mean), true) = (mean, members.len() > 1) {
                out.push((format!("{metric}_{subset}"), mean));
            }
            of_subset.push(mean);
        }
        means[s] = Some(of_subset);
    }
    let terms: Option<Vec<f64>> = average
        .tops()
        .flat_map(|s| (0..average.metrics.len()).map(move |m| (s, m)))
        .map(|(s, m)| means[s].as_ref().and_then(|of| of[m]))
        .collect();
    if let Some(terms) = terms.filter(|t| !t.is_empty()) {
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

    fn finish(self) -> Vec<(String, f64)> {
        let names = reported_names(self.per_item);
        let kept = self.kept.into_iter().map(Option::unwrap_or_default).collect();
        let values = finish_values(self.per_item, &self.sum, &self.count, Some(kept));
        names.into_iter().zip(values).filter_map(|(n, v)| v.map(|v| (n, v))).collect()
    }
}

/// A family's reported names from its declaration: each per-item metric (a distribution as
/// its mean and quartiles), then the derived ones.
pub(crate) fn reported_names(per_item: &dyn Family) -> Vec<String> {
    let mut names = Vec::new();
    for (m, name) in per_item.names().iter().enumerate() {
        match per_item.aggregate(m) {
            Aggregate::Percent => names.push(name.to_string()),
            Aggregate::Distribution => {
                names.extend(family::DISTRIBUTION_SUFFIXES.iter().map(|s| format!("{name}_{s}")))
            }
        }
    }
    names.extend(per_item.facts().derived.iter().map(|d| d.to_string()));
    names
}

/// Summarised values from per-metric sums, counts and (for distribution metrics) the kept
/// values, aligned with the family's reported names: a percentage of items, or a
/// distribution's mean and quartiles, `None` where no item has the metric; then the derived
/// metrics. What [`Sums`] and a group of [`grouping::GroupSums`] both finish with.
fn finish_values(
    per_item: &dyn Family,
    sum: &[f64],
    count: &[usize],
    kept: Option<Vec<SpillVec<f64>>>,
) -> Vec<Option<f64>> {
    let mut kept = kept.unwrap_or_default();
    let mut out = Vec::new();
    for m in 0..per_item.names().len() {
        let mean = (count[m] > 0).then(|| sum[m] / count[m] as f64);
        match per_item.aggregate(m) {
            Aggregate::Percent => out.push(mean.map(|mean| 100.0 * mean)),
            Aggregate::Distribution => {
                let mut sorted = kept.get_mut(m).map(std::mem::take).unwrap_or_default();
                // `f64::total_cmp`'s order, as a key: a million values sort in runs.
                spill::sort_by_key(&mut sorted, |v| {
                    let bits = v.to_bits() as i64;
                    bits ^ ((((bits >> 63) as u64) >> 1) as i64)
                });
                out.push(mean);
                for q in [0.25, 0.5, 0.75] {
                    out.push(mean.map(|_| quantile(&sorted, q)));
                }
            }
        }
    }
    out.resize(out.len() + per_item.facts().derived.len(), None);
    per_item.derive(&mut out);
    out
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
            let one_pass = headline(&values, members, usize::MAX, summary, items.len());
            assert!(one_pass.iter().any(|(name, _)| name == "avg") && one_pass.len() > 8, "{one_pass:?}");
            for window in [1, 7, 333, n - 1] {
                let windowed = headline(&values, members, window, summary, items.len());
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

    /// The macro average and the breakdowns from dense groups (what the bootstrap repeats per
    /// resample, in time linear in the items) equal the definition: each group evaluated on
    /// its own items alone, the macro the mean of the kept groups' values; for 0/1 and real
    /// metrics, derived ones, excluded and small groups, items in two groups or in none.
    #[test]
    fn grouped_summaries_equal_each_group_evaluated_alone() -> Result<()> {
        use crate::ScoreKind;
        let mut rng = SplitMix64::new(5);
        let n = 600;
        let mut scores = ScoreTensor::of_kind(ScoreKind::Logit);
        for _ in 0..n {
            let v: Vec<f32> = (0..4).map(|_| (rng.below(2000) as f32) / 1000.0 - 1.0).collect();
            scores.push(2, 2, &v)?;
        }
        let truth = Truth::diagonal(2);
        let tags: Vec<Tags> = (0..n)
            .map(|i| {
                let g = format!("g{:02}", rng.below(40));
                match i % 13 {
                    0 => Tags::new(),
                    1 => vec![("g".to_string(), vec![g, "g99".to_string()])].into(),
                    _ => vec![("g".to_string(), vec![g])].into(),
                }
            })
            .collect();
        let items: Vec<ItemView<'_>> = tags.iter().map(|tags| ItemView { truth: &truth, tags }).collect();
        for family in [group::FAMILY, equivariance::FAMILY, pairwise::FAMILY] {
            let summary = Summary {
                macro_groups: GroupFilter { min_items: 12, exclude: vec!["g03".into()] },
                ..Summary::of(family).breakdown(&["g"]).macro_over("g")
            };
            let report = evaluate(&summary, &scores, &items)?;
            let mut alone: BTreeMap<String, (usize, Vec<(String, f64)>)> = BTreeMap::new();
            let values: Vec<String> = report.breakdowns[0].groups.iter().map(|g| g.value.clone()).collect();
            for value in &values {
                let members: Vec<usize> =
                    (0..n).filter(|&i| tags[i].iter().any(|(_, vs)| vs.contains(value))).collect();
                let mut sub = ScoreTensor::of_kind(ScoreKind::Logit);
                for &i in &members {
                    let m = scores.item(i);
                    sub.push(2, 2, &[m.get(0, 0) as f32, m.get(0, 1) as f32, m.get(1, 0) as f32, m.get(1, 1) as f32])?;
                }
                let sub_items: Vec<ItemView<'_>> = members.iter().map(|&i| items[i]).collect();
                alone.insert(value.clone(), (members.len(), evaluate(&Summary::of(family), &sub, &sub_items)?.metrics));
            }
            for group in &report.breakdowns[0].groups {
                let (count, metrics) = &alone[&group.value];
                assert_eq!(group.items, *count, "{family:?} {}", group.value);
                assert_eq!(&group.metrics, metrics, "{family:?} {}", group.value);
            }
            let overall = evaluate(&Summary::of(family), &scores, &items)?.metrics;
            for (name, _) in &overall {
                let kept: Vec<f64> = alone
                    .iter()
                    .filter(|(value, (count, _))| *count >= 12 && value.as_str() != "g03")
                    .filter_map(|(_, (_, m))| m.iter().find(|(n, _)| n == name).map(|(_, v)| *v))
                    .collect();
                let expected = kept.iter().sum::<f64>() / kept.len() as f64;
                let got = report.metric(&format!("{name}_macro")).unwrap_or(f64::NAN);
                assert!(
                    (got - expected).abs() <= 1e-9 * expected.abs().max(1.0),
                    "{family:?} {name}: {got} vs {expected}"
                );
            }
        }
        Ok(())
    }
}
