//! What a metric family declares about itself, once, in its own file: its id, its per-item
//! metrics and how each is summarised, the names it derives from them, the metric a suite's
//! headline defaults to, which metrics are better low, and whether it can count the first of
//! tied candidates. [`super::FAMILIES`] lists every family; manifests, `compare` and
//! `leaderboard` ask these declarations, never a metric's name.

use super::{ItemView, ValueRows};
use crate::{Result, ScoreTensor};

/// A family's facts, declared once beside its code (each family's `Family::facts`).
#[derive(Debug)]
pub struct FamilyFacts {
    /// The id a manifest's `metrics.family` names it by.
    pub id: &'static str,
    /// What it reports, in a few words (listed when a manifest names an unknown family).
    pub description: &'static str,
    /// The metric a suite of this family ranks by unless it names another.
    pub headline_base: &'static str,
    /// Names of the metrics `Family::derive` adds to a summary.
    pub derived: &'static [&'static str],
    /// Per-item metrics whose lower values are better (every reported name made from them).
    pub lower_is_better: &'static [&'static str],
    /// Whether the family can count the first of tied candidates as the winner ([`Ties::First`]).
    pub takes_first_of_ties: bool,
    /// Whether the family also reads each item's text–text similarities
    /// ([`ScoreTensor::text_scores`]).
    pub compares_texts: bool,
    /// Whether its items' texts are questions with an answer option each, scored by a
    /// generative model's log-probability of the option ([`super::answers`]): other models
    /// cannot score them.
    pub asks_questions: bool,
}

impl FamilyFacts {
    /// A family with no derived or lower-is-better metrics, strict ties, no text–text reads.
    pub const fn new(id: &'static str, description: &'static str, headline_base: &'static str) -> Self {
        FamilyFacts {
            id,
            description,
            headline_base,
            derived: &[],
            lower_is_better: &[],
            takes_first_of_ties: false,
            compares_texts: false,
            asks_questions: false,
        }
    }
}

/// Per-item results of a metric family: one 0/1 (or real) value per metric, in a fixed
/// order; `None` where a metric does not apply to an item; and its [`FamilyFacts`].
pub(crate) trait Family: Sync {
    fn facts(&self) -> &'static FamilyFacts;
    /// Per-item metric names, in report order.
    fn names(&self) -> &'static [&'static str];
    /// How each metric is summarised; percentages unless a family says otherwise.
    fn aggregate(&self, _metric: usize) -> Aggregate {
        Aggregate::Percent
    }
    /// Metrics derived from a summary (e.g. VALSE's `acc` from `p_c` and `p_f`): `values`
    /// are aligned with [`MetricFamily::reported_names`], the slots of
    /// [`FamilyFacts::derived`] (its last ones) still `None`, for this to fill.
    fn derive(&self, _values: &mut [Option<f64>]) {}
    /// One value per metric for each item; summaries are means ×100 over the items where
    /// the metric applies.
    fn values(&self, scores: &ScoreTensor, items: &[ItemView<'_>], ties: Ties) -> Result<ValueRows>;
}

/// How per-item values of a metric are summarised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregate {
    /// Mean ×100 of 0/1 outcomes, reported as `<name>`.
    Percent,
    /// A real-valued diagnostic, reported as `<name>_mean`, `_q1`, `_median`, `_q3` (in
    /// score units; quartiles interpolate linearly between order statistics, numpy's default).
    Distribution,
}

/// The suffixes a [`Aggregate::Distribution`] metric is reported with.
pub(crate) const DISTRIBUTION_SUFFIXES: [&str; 4] = ["mean", "q1", "median", "q3"];

/// How a candidate tied with the best-scoring one is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ties {
    /// A tie is a miss: the right candidate must score strictly above every other (the
    /// default everywhere, and Winoground's, EqBen's and VALSE's official rule).
    #[default]
    Strict,
    /// The first of tied candidates wins, as `numpy.argmax` (SPEC's official scorer) and a
    /// stable descending sort (RoCOCO's `argsort` ranking) credit it. Only for families whose
    /// official code takes an argmax or a ranking: choice accuracy and retrieval.
    First,
    /// Every option tied at the top counts as chosen, unless the top is a probability of zero
    /// ([`crate::LOG_ZERO`]): VisMin's official `is_match_with_label` credits a generated reply
    /// that names both options. Only for families of questions with answer options.
    Shared,
}

impl Ties {
    pub fn name(self) -> &'static str {
        match self {
            Ties::Strict => "strict",
            Ties::First => "first",
            Ties::Shared => "shared",
        }
    }

    /// From [`Ties::name`], as run records store it.
    pub fn from_name(name: &str) -> Option<Self> {
        [Ties::Strict, Ties::First, Ties::Shared].into_iter().find(|t| t.name() == name)
    }
}

/// Which published metrics a suite reports: a handle to a family's declaration.
#[derive(Clone, Copy)]
pub struct MetricFamily(&'static dyn Family);

impl MetricFamily {
    /// The handle of a family's declaration (each family module's `FAMILY`).
    pub(crate) const fn declare(family: &'static dyn Family) -> Self {
        MetricFamily(family)
    }

    pub(crate) fn declared(self) -> &'static dyn Family {
        self.0
    }

    /// What the family declares about itself.
    pub fn facts(self) -> &'static FamilyFacts {
        self.0.facts()
    }

    pub fn id(self) -> &'static str {
        self.facts().id
    }

    pub fn description(self) -> &'static str {
        self.facts().description
    }

    /// Every name a summary of this family reports before breakdowns and averages: each
    /// per-item metric (a distribution as its mean and quartiles), then the derived ones.
    pub fn reported_names(self) -> Vec<String> {
        super::reported_names(self.0)
    }
    /// The metric a suite of this family ranks by unless it names another.
    pub fn headline_base(self) -> &'static str {
        self.facts().headline_base
    }

    /// Whether the family can count the first of tied candidates as the winner.
    pub fn takes_first_of_ties(self) -> bool {
        self.facts().takes_first_of_ties
    }

    /// Whether the family also reads each item's text–text similarities (SugarCrepe++'s
    /// text-only task).
    pub fn compares_texts(self) -> bool {
        self.facts().compares_texts
    }

    /// Whether a larger value of `metric`, one this family reports (also as a macro average,
    /// a subset's mean or a breakdown group's), is better.
    pub fn higher_is_better(self, metric: &str) -> bool {
        !self.facts().lower_is_better.iter().any(|low| named_after(metric, low))
    }
}

impl PartialEq for MetricFamily {
    fn eq(&self, other: &Self) -> bool {
        self.id() == other.id()
    }
}

impl Eq for MetricFamily {}

impl std::fmt::Debug for MetricFamily {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}

/// Whether `metric` is `base` or a name made from it (`base_…`).
pub(crate) fn named_after(metric: &str, base: &str) -> bool {
    metric.strip_prefix(base).is_some_and(|rest| rest.is_empty() || rest.starts_with('_'))
}
