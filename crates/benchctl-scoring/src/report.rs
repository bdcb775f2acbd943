//! A metric report: headline metrics plus breakdowns, with a stable JSON form.

use serde_json::{Map, Value};

/// Metrics of one run on one suite. Values are percentages (×100).
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub items: usize,
    pub metrics: Vec<(String, f64)>,
    pub breakdowns: Vec<Breakdown>,
}

/// One tag key's groups, e.g. `collapsed_tag` → Object / Relation / Both.
#[derive(Debug, Clone, PartialEq)]
pub struct Breakdown {
    pub key: String,
    pub groups: Vec<Group>,
}

/// The items sharing one tag value and their metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub value: String,
    pub items: usize,
    pub metrics: Vec<(String, f64)>,
}

impl Report {
    /// The value of a headline metric.
    pub fn metric(&self, name: &str) -> Option<f64> {
        self.metrics.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }

    /// The group of a breakdown, e.g. `("collapsed_tag", "Object")`.
    pub fn group(&self, key: &str, value: &str) -> Option<&Group> {
        self.breakdowns.iter().find(|b| b.key == key).and_then(|b| b.groups.iter().find(|g| g.value == value))
    }

    /// `{"items": N, "metrics": {..}, "breakdowns": {key: {value: {"items": n, metric: v}}}}`,
    /// keys in report order.
    pub fn to_json(&self) -> Value {
        let mut breakdowns = Map::new();
        for breakdown in &self.breakdowns {
            let mut groups = Map::new();
            for group in &breakdown.groups {
                let mut entry = Map::new();
                entry.insert("items".into(), group.items.into());
                entry.extend(metrics_json(&group.metrics));
                groups.insert(group.value.clone(), Value::Object(entry));
            }
            breakdowns.insert(breakdown.key.clone(), Value::Object(groups));
        }
        let mut out = Map::new();
        out.insert("items".into(), self.items.into());
        out.insert("metrics".into(), Value::Object(metrics_json(&self.metrics)));
        out.insert("breakdowns".into(), Value::Object(breakdowns));
        Value::Object(out)
    }

    /// Reads the form written by [`Report::to_json`].
    pub fn from_json(value: &Value) -> Option<Self> {
        let items = value.get("items")?.as_u64()? as usize;
        let metrics = metrics_from_json(value.get("metrics")?.as_object()?)?;
        let mut breakdowns = Vec::new();
        for (key, groups) in value.get("breakdowns")?.as_object()? {
            let mut out = Vec::new();
            for (group, entry) in groups.as_object()? {
                let entry = entry.as_object()?;
                let items = entry.get("items")?.as_u64()? as usize;
                let metrics = entry
                    .iter()
                    .filter(|(k, _)| *k != "items")
                    .map(|(k, v)| Some((k.clone(), v.as_f64()?)))
                    .collect::<Option<Vec<_>>>()?;
                out.push(Group { value: group.clone(), items, metrics });
            }
            breakdowns.push(Breakdown { key: key.clone(), groups: out });
        }
        Some(Report { items, metrics, breakdowns })
    }
}

fn metrics_json(metrics: &[(String, f64)]) -> Map<String, Value> {
    metrics.iter().map(|(name, value)| (name.clone(), Value::from(*value))).collect()
}

fn metrics_from_json(map: &Map<String, Value>) -> Option<Vec<(String, f64)>> {
    map.iter().map(|(k, v)| Some((k.clone(), v.as_f64()?))).collect()
}
