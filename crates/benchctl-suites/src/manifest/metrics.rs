//! `[metrics]`: the metric family, breakdowns, macro and subset averages, group accuracies,
//! the tie rule and the headline, checked against what the family declares it reports.

use benchctl_scoring::metrics::{
    AllOf, ClusterRule, GroupFilter, MetricFamily, SubsetAverage, Summary, Ties, FAMILIES,
};
use toml::Spanned;

use super::raw::{RawAverage, RawMetrics};
use super::Context;
use crate::Result;

/// `[metrics]`, checked: how the suite is summarised, its headline and its official tie rule.
pub(super) struct Metrics {
    pub summary: Summary,
    pub headline: String,
    pub official_ties: Ties,
}

impl Metrics {
    /// `[metrics]` of a suite whose items carry the tags `tag_names`.
    pub fn parse(m: &RawMetrics, tag_names: &[&str], cx: &Context<'_>) -> Result<Self> {
        let family = family(&m.family, cx)?;
        let known_tag = |key: &str, name: &Spanned<String>| -> Result<String> {
            if tag_names.contains(&name.get_ref().as_str()) {
                Ok(name.get_ref().clone())
            } else {
                Err(cx.bad(
                    key,
                    cx.line(name.span()),
                    format!("`{}` is not a tag of `[item.tags]` (it has: {})", name.get_ref(), tag_names.join(", ")),
                ))
            }
        };
        let breakdown_keys = m.breakdown.iter().map(|b| known_tag("metrics.breakdown", b)).collect::<Result<_>>()?;
        let macro_over = m.macro_over.as_ref().map(|k| known_tag("metrics.macro_over", k)).transpose()?;
        let official_ties = ties(m, family, cx)?;
        let clusters = match &m.cluster_by {
            Some(tag) => ClusterRule::Tag(known_tag("metrics.cluster_by", tag)?),
            None => ClusterRule::SharedImages,
        };
        let mut summary = Summary {
            breakdown_keys,
            macro_over,
            macro_groups: GroupFilter { min_items: m.macro_min_items, exclude: m.macro_exclude.clone() },
            clusters: Some(clusters),
            ..Summary::of(family)
        };
        if let Some(a) = &m.average {
            let key = known_tag("metrics.average.over", &a.over)?;
            summary.subset_average = Some(average(a, key, family, cx)?);
        }
        for (name, tag) in &m.all_of {
            let key = known_tag("metrics.all_of", tag)?;
            if summary.reported_names().contains(name) {
                return Err(cx.bad(
                    "metrics.all_of",
                    cx.line(tag.span()),
                    format!("`{name}` is already a metric of this suite"),
                ));
            }
            summary.all_of.push(AllOf { name: name.clone(), key, metric: family.headline_base().to_string() });
        }
        let names = summary.reported_names();
        let headline = match &m.headline {
            Some(h) if names.contains(h.get_ref()) => h.get_ref().clone(),
            Some(h) => {
                return Err(cx.bad(
                    "metrics.headline",
                    cx.line(h.span()),
                    format!("`{}` is not a metric of this suite (it has: {})", h.get_ref(), names.join(", ")),
                ))
            }
            None => summary.default_headline(),
        };
        Ok(Metrics { summary, headline, official_ties })
    }
}

/// `metrics.family`: one of [`FAMILIES`], by id.
fn family(name: &Spanned<String>, cx: &Context<'_>) -> Result<MetricFamily> {
    MetricFamily::find(name.get_ref()).ok_or_else(|| {
        let known: Vec<String> = FAMILIES.iter().map(|f| format!("{}: {}", f.id(), f.description())).collect();
        cx.bad(
            "metrics.family",
            cx.line(name.span()),
            format!("unknown family {:?} ({})", name.get_ref(), known.join("; ")),
        )
    })
}

/// `metrics.ties`: `strict` (the default), or `first` for a family that takes an argmax.
fn ties(m: &RawMetrics, family: MetricFamily, cx: &Context<'_>) -> Result<Ties> {
    let Some(t) = &m.ties else { return Ok(Ties::Strict) };
    let at = cx.line(t.span());
    match Ties::from_name(t.get_ref()) {
        Some(Ties::First) if !family.takes_first_of_ties() => {
            let argmax: Vec<&str> = FAMILIES.iter().filter(|f| f.takes_first_of_ties()).map(|f| f.id()).collect();
            Err(cx.bad(
                "metrics.ties",
                at,
                format!("`first` applies to the {} family only (an argmax)", argmax.join(", ")),
            ))
        }
        Some(rule) => Ok(rule),
        None => Err(cx.bad("metrics.ties", at, format!("unknown tie rule {:?} (strict or first)", t.get_ref()))),
    }
}

/// `[metrics.average]` checked: its groups named, each with values, its metrics the family's.
fn average(raw: &RawAverage, key: String, family: MetricFamily, cx: &Context<'_>) -> Result<SubsetAverage> {
    let groups = raw.groups.get_ref();
    if groups.is_empty() || groups.values().any(Vec::is_empty) {
        return Err(cx.bad(
            "metrics.average.groups",
            cx.line(raw.groups.span()),
            "needs at least one group, each naming at least one value of the tag".into(),
        ));
    }
    let family_metrics = family.reported_names();
    let metrics: Vec<String> = match &raw.metrics {
        None => vec![family.headline_base().to_string()],
        Some(list) => {
            if let Some(m) = list.get_ref().iter().find(|m| !family_metrics.contains(m)) {
                return Err(cx.bad(
                    "metrics.average.metrics",
                    cx.line(list.span()),
                    format!("`{m}` is not a metric of this family (it has: {})", family_metrics.join(", ")),
                ));
            }
            list.get_ref().clone()
        }
    };
    let name = raw.name.get_ref();
    if name.is_empty() || family_metrics.contains(name) {
        return Err(cx.bad(
            "metrics.average.name",
            cx.line(raw.name.span()),
            format!("{name:?} must be a new metric name"),
        ));
    }
    let average = SubsetAverage {
        name: name.clone(),
        key,
        subsets: groups.iter().map(|(group, values)| (group.clone(), values.clone())).collect(),
        metrics,
    };
    // Groups may list other groups (averages of averages), but not in a circle.
    let ordered = average.order();
    if ordered.len() < average.subsets.len() {
        let circle: Vec<&str> = (0..average.subsets.len())
            .filter(|s| !ordered.contains(s))
            .map(|s| average.subsets[s].0.as_str())
            .collect();
        return Err(cx.bad(
            "metrics.average.groups",
            cx.line(raw.groups.span()),
            format!("the groups {} list each other in a circle", circle.join(", ")),
        ));
    }
    Ok(average)
}
