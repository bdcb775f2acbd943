//! How a suite's items are summarised: its [`MetricFamily`], the tags it breaks down by, its
//! macro and subset averages, its group accuracies and its tie rule. A [`Summary`] owns its
//! names, so a suite read from a manifest at run time holds one as a built-in suite does.

use super::{ClusterRule, MetricFamily, Ties};

/// How a suite's items are summarised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub family: MetricFamily,
    /// Tag keys to break down by, in report order.
    pub breakdown_keys: Vec<String>,
    /// A tag key whose groups are averaged with equal weight (macro average), reported as
    /// `<metric>_macro` beside the item-weighted (micro) value.
    pub macro_over: Option<String>,
    /// Which groups of `macro_over` the macro average counts (every group by default).
    pub macro_groups: GroupFilter,
    /// A paper's own average over named subsets of a tag's groups (EqBen's Table 3 "Avg").
    pub subset_average: Option<SubsetAverage>,
    /// How a tie between the best candidate and another is counted.
    pub ties: Ties,
    /// Accuracies over groups of items, each group counting when all its items are right
    /// (What'sUp's pair and set accuracy).
    pub all_of: Vec<AllOf>,
    /// How the items cluster, for the bootstrap (items sharing an image by default); `None`
    /// resamples items one by one (`--bootstrap items`, as published intervals are made).
    pub clusters: Option<ClusterRule>,
}

impl Summary {
    /// A family's summary with no breakdowns, no averages and strict ties.
    pub fn of(family: MetricFamily) -> Self {
        Summary {
            family,
            breakdown_keys: Vec::new(),
            macro_over: None,
            macro_groups: GroupFilter::default(),
            subset_average: None,
            ties: Ties::Strict,
            all_of: Vec::new(),
            clusters: Some(ClusterRule::default()),
        }
    }

    /// Broken down by these tag keys, in this order.
    pub fn breakdown(mut self, keys: &[&str]) -> Self {
        self.breakdown_keys = keys.iter().map(|k| k.to_string()).collect();
        self
    }

    /// With a macro average over the groups of tag `key`.
    pub fn macro_over(mut self, key: &str) -> Self {
        self.macro_over = Some(key.to_string());
        self
    }

    /// Every name this summary can report: the family's, their macro averages, the subset
    /// average's and the group accuracies (breakdowns repeat the same names per group).
    pub fn reported_names(&self) -> Vec<String> {
        let mut names = self.family.reported_names();
        if self.macro_over.is_some() {
            names.extend(names.clone().iter().map(|n| format!("{n}_macro")));
        }
        if let Some(average) = &self.subset_average {
            names.extend(average.reported());
        }
        names.extend(self.all_of.iter().map(|a| a.name.clone()));
        names
    }

    /// The headline a suite of this summary defaults to: the family's base metric, its macro
    /// average where there is one.
    pub fn default_headline(&self) -> String {
        let base = self.family.headline_base();
        if self.macro_over.is_some() {
            format!("{base}_macro")
        } else {
            base.to_string()
        }
    }
}

/// A paper's accuracy over groups of items: the share of one tag's groups in which every
/// item scores 1 on a 0/1 metric, in percent. What'sUp's pair accuracy is its left/right and
/// on/under pairs of images of one object pair, each pair right on both images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllOf {
    /// The reported name.
    pub name: String,
    /// The tag key whose values are the groups.
    pub key: String,
    /// The 0/1 per-item metric every member must score 1 on.
    pub metric: String,
}

/// Groups a macro average leaves out, as a paper's own average does: ARO's VG-Attribution
/// averages only attribute pairs with at least 25 items, its VG-Relation leaves out the
/// relations its authors list as symmetric.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupFilter {
    /// Groups with fewer items are left out.
    pub min_items: usize,
    /// Group values left out.
    pub exclude: Vec<String>,
}

impl GroupFilter {
    pub(crate) fn keeps(&self, value: &str, items: usize) -> bool {
        items >= self.min_items && !self.exclude.iter().any(|e| e == value)
    }
}

/// A paper's average over subsets of one tag's groups: each subset is the mean of the groups
/// it lists, and the average is the mean of `metrics` over every subset. EqBen's Table 3
/// "Avg" is the 15 numbers text/image/group over AG, YouCook2, GEBC, Kubric (the mean of its
/// three splits) and SD. A subset may list other subsets (a member naming another subset is
/// that subset's mean): averages of averages, as VL-CheckList's tables (Attribute over color,
/// material, … each over its sources); the average is then over the top subsets, those no
/// other subset lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubsetAverage {
    /// The reported name of the average.
    pub name: String,
    /// The tag key whose groups are combined.
    pub key: String,
    /// Each subset's name and the tag values it averages. A subset of several values is also
    /// reported, as `<metric>_<subset>`.
    pub subsets: Vec<(String, Vec<String>)>,
    pub metrics: Vec<String>,
}

impl SubsetAverage {
    /// An average from borrowed names (a built-in suite's constants).
    pub fn new(name: &str, key: &str, subsets: &[(&str, &[&str])], metrics: &[&str]) -> Self {
        SubsetAverage {
            name: name.to_string(),
            key: key.to_string(),
            subsets: subsets
                .iter()
                .map(|(subset, values)| (subset.to_string(), values.iter().map(|v| v.to_string()).collect()))
                .collect(),
            metrics: metrics.iter().map(|m| m.to_string()).collect(),
        }
    }

    /// The subset that `member` of subset `of` names: another subset of that name (a member
    /// naming its own subset is the tag value).
    pub fn subset_named(&self, member: &str, of: &str) -> Option<usize> {
        (member != of).then(|| self.subsets.iter().position(|(name, _)| name == member)).flatten()
    }

    /// The subsets in an order where each comes after the subsets it lists; subsets in a cycle
    /// (which a manifest refuses) are left out.
    pub fn order(&self) -> Vec<usize> {
        let mut done = vec![false; self.subsets.len()];
        let mut order = Vec::with_capacity(self.subsets.len());
        loop {
            let ready: Vec<usize> = (0..self.subsets.len())
                .filter(|&s| !done[s])
                .filter(|&s| {
                    let (name, members) = &self.subsets[s];
                    members.iter().all(|m| self.subset_named(m, name).is_none_or(|inner| done[inner]))
                })
                .collect();
            if ready.is_empty() {
                return order;
            }
            for s in ready {
                done[s] = true;
                order.push(s);
            }
        }
    }

    /// The subsets no other subset lists: the average is their mean.
    pub fn tops(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.subsets.len()).filter(|&s| {
            let name = &self.subsets[s].0;
            !self.subsets.iter().any(|(other, members)| other != name && members.iter().any(|m| m == name))
        })
    }

    /// The names of the metrics it reports, when every subset is present: each subset of
    /// several values per metric (`<metric>_<subset>`), then the average.
    pub fn reported(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .subsets
            .iter()
            .filter(|(_, values)| values.len() > 1)
            .flat_map(|(subset, _)| self.metrics.iter().map(move |m| format!("{m}_{subset}")))
            .collect();
        names.push(self.name.clone());
        names
    }
}
