//! A run's intervals as run files hold them: `{metric: [low, high]}` in report order, and how
//! the bootstrap drew them ([`BootstrapRecord`], with each metric's design effect).

use benchctl_scoring::metrics::stats::Interval;
use benchctl_scoring::Report;
use serde::{Deserialize, Serialize};

use crate::plan::BootstrapUnit;
use crate::{Error, Result};

/// How a run's bootstrap drew its resamples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BootstrapRecord {
    /// What was resampled: `clusters`, or `items` (asked for, or the suite's items share
    /// nothing).
    pub unit: BootstrapUnit,
    /// The suite's cluster rule (`shared images`, `tag video`); absent when items were asked
    /// for (`--bootstrap items`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// How many clusters, and their mean size in items (with clusters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_cluster_size: Option<f64>,
    /// Each per-item metric's design effect (with clusters).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub design_effects: serde_json::Map<String, serde_json::Value>,
}

impl BootstrapRecord {
    /// Resampled items.
    pub fn items() -> Self {
        BootstrapRecord {
            unit: BootstrapUnit::Items,
            rule: None,
            clusters: None,
            mean_cluster_size: None,
            design_effects: serde_json::Map::new(),
        }
    }
}

/// `{metric: [low, high]}` in report order.
pub(super) fn intervals_json(intervals: &[Interval]) -> serde_json::Value {
    let map: serde_json::Map<String, serde_json::Value> =
        intervals.iter().map(|i| (i.metric.clone(), serde_json::json!([i.low, i.high]))).collect();
    serde_json::Value::Object(map)
}

pub(super) fn intervals_from_json(
    v: Option<&serde_json::Value>,
    report: &Report,
    bootstrap: Option<&BootstrapRecord>,
) -> Result<Vec<Interval>> {
    let Some(map) = v.and_then(|v| v.as_object()) else { return Ok(Vec::new()) };
    map.iter()
        .map(|(metric, bounds)| {
            let pair = bounds.as_array().filter(|a| a.len() == 2).and_then(|a| Some((a[0].as_f64()?, a[1].as_f64()?)));
            let (low, high) =
                pair.ok_or_else(|| Error::bad_results(format!("key `intervals.{metric}` is not [low, high]")))?;
            let value = report
                .metric(metric)
                .ok_or_else(|| Error::bad_results(format!("key `intervals.{metric}` names no reported metric")))?;
            let design_effect =
                bootstrap.and_then(|b| b.design_effects.get(metric)).and_then(serde_json::Value::as_f64);
            Ok(Interval { metric: metric.clone(), value, low, high, design_effect })
        })
        .collect()
}
