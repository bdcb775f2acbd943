//! The published metrics, one module per metric family.
//!
//! A suite names its [`MetricFamily`]; [`evaluate`] turns the scores of its items into a
//! [`Report`] with the headline metrics and one breakdown per tag key.

pub mod group;

use crate::report::{Breakdown, Group, Report};
use crate::{Error, Result, ScoreTensor, Tags, Truth};

/// Which published metrics a suite reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricFamily {
    /// Winoground's text / image / group score (strict `>`, a tie is a miss).
    Group,
}

/// What the metrics need of one item: its truth and its tags.
#[derive(Debug, Clone, Copy)]
pub struct ItemView<'a> {
    pub truth: &'a Truth,
    pub tags: &'a Tags,
}

/// Per-item results of a metric family: one 0/1 (or real) value per metric, in a fixed order.
pub(crate) trait PerItem {
    /// Metric names, in report order.
    fn names(&self) -> &'static [&'static str];
    /// One value per metric for each item; summaries are means ×100.
    fn values(&self, scores: &ScoreTensor, items: &[ItemView<'_>]) -> Result<Vec<Vec<f64>>>;
}

/// Scores every item and summarises the metrics overall and per tag value.
///
/// `breakdown_keys` lists the tag keys to break down by, in report order.
pub fn evaluate(
    family: MetricFamily,
    scores: &ScoreTensor,
    items: &[ItemView<'_>],
    breakdown_keys: &[&str],
) -> Result<Report> {
    if items.is_empty() {
        return Err(Error::new("there are no items to score"));
    }
    let truths: Vec<&Truth> = items.iter().map(|item| item.truth).collect();
    scores.check_against(&truths)?;
    let per_item: &dyn PerItem = match family {
        MetricFamily::Group => &group::GroupScore,
    };
    let names = per_item.names();
    let values = per_item.values(scores, items)?;
    let all: Vec<usize> = (0..items.len()).collect();
    let metrics = summarise(names, &values, &all);
    let breakdowns = breakdown_keys
        .iter()
        .map(|key| Breakdown {
            key: key.to_string(),
            groups: groups_of(key, items)
                .into_iter()
                .map(|(value, members)| Group {
                    value,
                    items: members.len(),
                    metrics: summarise(names, &values, &members),
                })
                .collect(),
        })
        .collect();
    Ok(Report { items: items.len(), metrics, breakdowns })
}

/// Mean ×100 of each metric over the given items.
fn summarise(names: &[&str], values: &[Vec<f64>], members: &[usize]) -> Vec<(String, f64)> {
    names
        .iter()
        .enumerate()
        .map(|(m, name)| {
            let sum: f64 = members.iter().map(|&i| values[i][m]).sum();
            (name.to_string(), 100.0 * sum / members.len() as f64)
        })
        .collect()
}

/// Items grouped by their values for `key`, groups sorted by value. Items without the key
/// are in no group; an item with several values is in each of their groups.
fn groups_of(key: &str, items: &[ItemView<'_>]) -> Vec<(String, Vec<usize>)> {
    let mut groups: std::collections::BTreeMap<String, Vec<usize>> = Default::default();
    for (i, item) in items.iter().enumerate() {
        for (k, values) in item.tags {
            if k == key {
                for value in values {
                    groups.entry(value.clone()).or_default().push(i);
                }
            }
        }
    }
    groups.into_iter().collect()
}
