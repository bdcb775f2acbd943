//! Summaries per group of one tag key, fast enough to repeat for every bootstrap resample:
//! each item's groups are found once as dense numbers ([`Grouping`]), and a resample's sums
//! per group are flat arrays ([`GroupSums`]) rather than a map of group names rebuilt each
//! time. The cost is linear in items × resamples, whatever the number of groups (a manifest of
//! 100,000 one-record files broken down and macro-averaged by file).

use std::collections::HashMap;

use benchctl_base::spill::SpillVec;

use super::{finish_values, Family, ItemView, ValueRows};

/// The groups of one tag key: its distinct values in sorted order, and each item's groups.
pub(crate) struct Grouping {
    /// Group `g` is the tag value `values[g]`.
    pub values: Vec<String>,
    /// Item `i`'s groups are `ids[starts[i]..starts[i + 1]]` (an item without the key is in
    /// none; one with several values is in each).
    starts: SpillVec<u32>,
    ids: SpillVec<u32>,
}

impl Grouping {
    pub fn of(key: &str, items: &[ItemView<'_>]) -> Self {
        let mut values: Vec<&str> = items
            .iter()
            .flat_map(|item| item.tags.iter().filter(|(k, _)| k == key).flat_map(|(_, v)| v.iter().map(String::as_str)))
            .collect();
        values.sort_unstable();
        values.dedup();
        let id: HashMap<&str, u32> = values.iter().enumerate().map(|(g, v)| (*v, g as u32)).collect();
        let mut starts = SpillVec::with_capacity(items.len() + 1);
        let mut ids = SpillVec::new();
        starts.push(0u32);
        for item in items {
            for (k, tag_values) in item.tags {
                if k == key {
                    ids.extend(tag_values.iter().map(|v| id[v.as_str()]));
                }
            }
            starts.push(ids.len() as u32);
        }
        Grouping { values: values.into_iter().map(String::from).collect(), starts, ids }
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn groups_of(&self, item: usize) -> &[u32] {
        &self.ids[self.starts[item] as usize..self.starts[item + 1] as usize]
    }
}

/// Each group's running sums over some items, as [`super::Sums`] keeps them for all items:
/// per group and metric a sum and a count, the values of a distribution metric kept for its
/// quartiles, and how many items each group has.
pub(crate) struct GroupSums<'g> {
    grouping: &'g Grouping,
    per_item: &'static dyn Family,
    metrics: usize,
    pub members: Vec<usize>,
    sum: Vec<f64>,
    count: Vec<usize>,
    /// Per group, the kept values of each distribution metric (none for a family without one).
    kept: Vec<Vec<Vec<f64>>>,
}

impl<'g> GroupSums<'g> {
    pub fn new(grouping: &'g Grouping, per_item: &'static dyn Family) -> Self {
        let (groups, metrics) = (grouping.len(), per_item.names().len());
        let distributions = (0..metrics).any(|m| per_item.aggregate(m) == super::Aggregate::Distribution);
        GroupSums {
            grouping,
            per_item,
            metrics,
            members: vec![0; groups],
            // -0.0 is the neutral element of a float sum, as `Iterator::sum` starts from it.
            sum: vec![-0.0; groups * metrics],
            count: vec![0; groups * metrics],
            kept: if distributions { vec![vec![Vec::new(); metrics]; groups] } else { Vec::new() },
        }
    }

    /// Adds item `i` to each of its groups.
    pub fn add(&mut self, values: &ValueRows, i: usize) {
        for &g in self.grouping.groups_of(i) {
            let g = g as usize;
            self.members[g] += 1;
            for m in 0..self.metrics {
                if let Some(v) = values.get(i, m) {
                    self.sum[g * self.metrics + m] += v;
                    self.count[g * self.metrics + m] += 1;
                    if let Some(kept) = self.kept.get_mut(g) {
                        if self.per_item.aggregate(m) == super::Aggregate::Distribution {
                            kept[m].push(v);
                        }
                    }
                }
            }
        }
    }

    /// Group `g`'s metrics, aligned with the family's reported names (`None` where none of
    /// its members has the metric).
    pub fn finish(&mut self, g: usize) -> Vec<Option<f64>> {
        let at = g * self.metrics..(g + 1) * self.metrics;
        let kept = self.kept.get_mut(g).map(|k| std::mem::take(k).into_iter().map(SpillVec::from).collect());
        finish_values(self.per_item, &self.sum[at.clone()], &self.count[at], kept)
    }

    /// The groups with members, in the grouping's order.
    pub fn present(&self) -> Vec<usize> {
        (0..self.members.len()).filter(|&g| self.members[g] > 0).collect()
    }

    /// Group `g`'s metrics by name, as a summary of its members alone reports them.
    pub fn finish_named(&mut self, g: usize, names: &[String]) -> Vec<(String, f64)> {
        names.iter().zip(self.finish(g)).filter_map(|(n, v)| v.map(|v| (n.clone(), v))).collect()
    }
}
