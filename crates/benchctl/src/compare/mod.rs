//! `benchctl compare`: a regression gate. Each run is matched to the baseline run of the same
//! identity (model, score head, dtype, suite, tie rule; complete runs only, never a single
//! shard), or, given one baseline run file and one run file, to that run whatever its model
//! (head to head: same suite and tie rule). Every headline metric and, unless
//! `--headline-only`, every breakdown group's metric is a row of the gate (a group holding
//! every item repeats the headline and is left out).
//!
//! Two runs are compared only on the same data: the same annotations (data fingerprint) and
//! the same image bytes (image fingerprint). Otherwise the pair is **not comparable** and fails
//! the gate (`--allow-different-data` compares the numbers anyway, without paired statistics).
//! A baseline run without a current run is a row of its own, **no current run**, failing too.
//!
//! Where both runs' item scores and the suite's annotations are at hand, each row is tested
//! (`gate.rs`): a one-sided test of a drop (McNemar's exact test for a 0/1 metric over items,
//! a normal test over the paired standard error otherwise, by clusters where the current run
//! drew its intervals by clusters), the p-values adjusted over every tested row of the gate
//! (Holm by default), and the minimum detectable difference at the level one true drop must
//! reach. A drop is a **regression** when it exceeds the tolerance (0.5 points by default) and
//! its adjusted p-value is below α (0.05); an untested row's drop beyond the tolerance is one
//! too. A row that is not a regression but whose detectable difference exceeds the tolerance is
//! **underpowered**: the gate could not have seen a drop of the tolerance's size there. Any
//! regression, not comparable pair or missing run makes `compare` exit with code 6; an
//! underpowered row does with `--fail-underpowered`.

mod gate;
mod output;

use std::path::{Path, PathBuf};

use benchctl_scoring::metrics::power::Correction;
use benchctl_scoring::metrics::{higher_is_better, stats};

use crate::results::{Run, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED};
use crate::store::Store;
use crate::{Error, ErrorKind, Result};
use gate::{Evidence, Row};
pub use output::{junit, markdown, table};

/// The default largest drop, in points, that is not a regression.
pub const DEFAULT_TOLERANCE: f64 = 0.5;
/// The default family-wise level of the gate.
pub const DEFAULT_ALPHA: f64 = 0.05;
/// The power at which the detectable difference is given.
pub const DEFAULT_POWER: f64 = 0.8;

/// A run with its item scores, when they can be found.
pub struct ComparedRun {
    pub run: Run,
    pub lines: Option<crate::dump::DumpScores>,
    pub source: String,
}

/// What one row of the gate concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    /// Not a regression, but a drop of the tolerance's size would likely have gone unseen.
    Underpowered,
    Regression,
    /// The two runs scored different data (annotations or images).
    NotComparable,
    /// The baseline has a run that nothing compared with.
    NoCurrentRun,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Underpowered => "underpowered",
            Verdict::Regression => "REGRESSION",
            Verdict::NotComparable => "NOT COMPARABLE",
            Verdict::NoCurrentRun => "NO CURRENT RUN",
        }
    }

    /// Whether this verdict fails the gate.
    pub fn fails(self, rule: &GateRule) -> bool {
        match self {
            Verdict::Ok => false,
            Verdict::Underpowered => rule.fail_underpowered,
            Verdict::Regression | Verdict::NotComparable | Verdict::NoCurrentRun => true,
        }
    }
}

/// One row of the gate: a metric's change, overall or in one breakdown group.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub model: String,
    pub suite: String,
    pub metric: String,
    /// `(tag key, group)` for a breakdown group's row.
    pub group: Option<(String, String)>,
    pub baseline: f64,
    pub current: f64,
    /// The paired 95 % interval of `current − baseline`.
    pub interval: Option<(f64, f64)>,
    /// The one-sided p-value of a drop, and the same adjusted over the gate's tested rows.
    pub p_value: Option<f64>,
    pub adjusted_p: Option<f64>,
    /// The smallest drop (metric points) the gate finds here with the rule's power.
    pub detectable: Option<f64>,
    pub verdict: Verdict,
    /// The largest absolute change of any item score between the two runs, when both have
    /// item scores for the same items (a silent change shows here even when no metric moves).
    pub max_score_change: Option<f64>,
    /// Why a row is not comparable or has no current run.
    pub note: Option<String>,
}

impl Change {
    /// The metric with its group, as the table names it: `text_score [tag=Relation]`.
    pub fn metric_label(&self) -> String {
        match &self.group {
            Some((key, value)) => format!("{} [{key}={value}]", self.metric),
            None => self.metric.clone(),
        }
    }

    fn unpaired(model: String, suite: String, metric: String, baseline: f64, current: f64) -> Self {
        Change {
            model,
            suite,
            metric,
            group: None,
            baseline,
            current,
            interval: None,
            p_value: None,
            adjusted_p: None,
            detectable: None,
            verdict: Verdict::Ok,
            max_score_change: None,
            note: None,
        }
    }
}

/// How the gate decides.
#[derive(Debug, Clone, PartialEq)]
pub struct GateRule {
    /// The largest drop (metric points) that is not a regression.
    pub tolerance: f64,
    /// The gate's level, after the correction.
    pub alpha: f64,
    pub correction: Correction,
    /// The power at which detectable differences are given.
    pub power: f64,
    pub fail_underpowered: bool,
}

impl Default for GateRule {
    fn default() -> Self {
        GateRule {
            tolerance: DEFAULT_TOLERANCE,
            alpha: DEFAULT_ALPHA,
            correction: Correction::Holm,
            power: DEFAULT_POWER,
            fail_underpowered: false,
        }
    }
}

/// What `benchctl compare` compares.
#[derive(Debug, Clone)]
pub struct ComparePlan {
    /// A run file or a directory of run files.
    pub baseline: PathBuf,
    /// Run files or directories; empty: the latest stored run of each baseline's model and suite.
    pub runs: Vec<PathBuf>,
    pub rule: GateRule,
    /// Only the headline metrics, not every breakdown group's.
    pub headline_only: bool,
    /// Compare runs over different data anyway (without paired statistics).
    pub allow_different_data: bool,
    /// The results store (for the default runs).
    pub results_dir: PathBuf,
}

/// The gate's rows and the rule that decided them.
pub struct Gate {
    pub changes: Vec<Change>,
    pub rule: GateRule,
}

impl Gate {
    /// The rows with paired statistics.
    pub fn tested(&self) -> usize {
        self.changes.iter().filter(|c| c.p_value.is_some()).count()
    }

    /// The rows that fail the gate.
    pub fn failures(&self) -> impl Iterator<Item = &Change> {
        self.changes.iter().filter(|c| c.verdict.fails(&self.rule))
    }

    /// A sentence on how rows were decided.
    pub fn rule_text(&self) -> String {
        gate::describe(&self.rule, self.tested())
    }
}

/// Run files named directly or found (`*.json`) in directories, sorted.
fn run_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for path in paths {
        if path.is_dir() {
            let entries =
                std::fs::read_dir(path).map_err(|e| Error::bad_results(format!("read {}: {e}", path.display())))?;
            let mut found: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect();
            found.sort();
            out.extend(found);
        } else {
            out.push(path.clone());
        }
    }
    Ok(out)
}

fn read_run_file(path: &Path) -> Result<ComparedRun> {
    let crate::results::RunFile { run, dump } = crate::results::read_run_file(path)?;
    // Without a readable dump the comparison still runs, without paired statistics.
    let lines = dump.and_then(|dump| crate::dump::DumpScores::read_file(&dump).ok());
    Ok(ComparedRun { run, lines, source: path.display().to_string() })
}

/// The current runs: the files given, or each baseline's latest stored run (`None` where the
/// store has none).
fn current_runs(plan: &ComparePlan, baselines: &[ComparedRun]) -> Result<Vec<Option<ComparedRun>>> {
    if !plan.runs.is_empty() {
        return run_files(&plan.runs)?.iter().map(|p| read_run_file(p).map(Some)).collect();
    }
    let store = Store::open_existing(&plan.results_dir)?;
    baselines
        .iter()
        .filter(|b| b.run.is_complete())
        .map(|b| {
            let Some(latest) = store.latest_of(&b.run.identity(), &b.run.model.id, &b.run.suite.id)? else {
                return Ok(None);
            };
            let lines = store.item_scores(latest.id)?;
            Ok(Some(ComparedRun { run: latest.run, lines: Some(lines), source: format!("stored run {}", latest.id) }))
        })
        .collect()
}

/// Every row of the gate, decided.
pub fn run(plan: &ComparePlan) -> Result<Gate> {
    let baselines = run_files(std::slice::from_ref(&plan.baseline))?
        .iter()
        .map(|p| read_run_file(p))
        .collect::<Result<Vec<_>>>()?;
    if baselines.is_empty() {
        return Err(Error::bad_results(format!("compare: {} holds no run files", plan.baseline.display())));
    }
    let currents: Vec<ComparedRun> = current_runs(plan, &baselines)?.into_iter().flatten().collect();
    // One baseline run file against one run file is a head-to-head comparison: any two
    // models on the same suite and tie rule (an external model against a zoo one, say).
    let head_to_head = baselines.len() == 1 && currents.len() == 1 && !plan.baseline.is_dir();
    let mut rows = Vec::new();
    let mut matched = vec![false; baselines.len()];
    for current in currents.iter().filter(|c| c.run.is_complete()) {
        let identity = current.run.identity();
        let found = baselines.iter().position(|b| b.run.is_complete() && b.run.identity() == identity);
        let at = match found {
            Some(at) => at,
            None if head_to_head => {
                let (a, b) = (&baselines[0].run.suite, &current.run.suite);
                if !baselines[0].run.is_complete() || a.id != b.id || a.ties != b.ties {
                    return Err(Error::bad_results(format!(
                        "compare {} with {}: a head-to-head comparison needs two complete runs on the same suite and tie rule",
                        current.source, baselines[0].source
                    )));
                }
                0
            }
            None => {
                return Err(Error::bad_results(format!(
                    "compare {}: the baseline has no complete run of {identity}",
                    current.source
                )))
            }
        };
        matched[at] = true;
        rows.extend(rows_of_pair(&baselines[at], current, plan)?);
    }
    if rows.is_empty() && currents.iter().any(|c| !c.run.is_complete()) {
        return Err(Error::bad_results(
            "compare: only shard runs were given; merge them first (`benchctl merge`)".to_string(),
        ));
    }
    let where_from = if plan.runs.is_empty() {
        format!("the results store in {}", plan.results_dir.display())
    } else {
        "the runs given".to_string()
    };
    for (baseline, _) in baselines.iter().zip(&matched).filter(|(b, m)| !**m && b.run.is_complete()) {
        let mut change = Change::unpaired(
            baseline.run.label(),
            baseline.run.suite.id.clone(),
            baseline.run.report.metrics.first().map(|(m, _)| m.clone()).unwrap_or_default(),
            baseline.run.report.metrics.first().map_or(f64::NAN, |(_, v)| *v),
            f64::NAN,
        );
        change.verdict = Verdict::NoCurrentRun;
        change.note = Some(format!(
            "no current run for baseline {} ({}) in {where_from}",
            baseline.source,
            baseline.run.identity()
        ));
        rows.push(Row { change, evidence: None, sign: 1.0 });
    }
    Ok(Gate { changes: gate::decide(rows, &plan.rule), rule: plan.rule.clone() })
}

/// Whether two runs scored the same data: `None` if so, else why not. An external model's
/// images are unknown (its scores came from a file): it is judged on the annotations alone.
fn different_data(baseline: &ComparedRun, current: &ComparedRun) -> Option<String> {
    let (a, b) = (&baseline.run, &current.run);
    if a.data_fingerprint.is_empty() || a.data_fingerprint != b.data_fingerprint {
        return Some(format!(
            "different annotations: the baseline {} has data fingerprint {} ({} items in {}), the current {} has {} ({} items in {})",
            baseline.source,
            short(&a.data_fingerprint),
            a.report.items,
            a.suite.data_dir,
            current.source,
            short(&b.data_fingerprint),
            b.report.items,
            b.suite.data_dir
        ));
    }
    let external = |r: &Run| r.model.external.is_some() && r.image_fingerprint.is_empty();
    if a.image_fingerprint != b.image_fingerprint && !external(a) && !external(b) {
        return Some(format!(
            "different images: the baseline {} has image fingerprint {}, the current {} has {}",
            baseline.source,
            short(&a.image_fingerprint),
            current.source,
            short(&b.image_fingerprint)
        ));
    }
    None
}

fn short(fingerprint: &str) -> &str {
    if fingerprint.is_empty() {
        "(none recorded)"
    } else {
        &fingerprint[..fingerprint.len().min(12)]
    }
}

/// The paired statistics of two runs on the same data, when both have item scores and the
/// suite's annotations load from the current run's data directory: the bootstrap of every
/// headline metric, the linearised test of every per-item metric overall and per group, and
/// whether both are by clusters.
fn evidence(
    baseline: &ComparedRun,
    current: &ComparedRun,
) -> Option<(Vec<stats::Paired>, Vec<stats::PairedTest>, bool)> {
    let (a, b) = (baseline.lines.as_ref()?, current.lines.as_ref()?);
    if different_data(baseline, current).is_some() {
        return None;
    }
    let suite = current.run.suite.info().ok()?.load(Path::new(&current.run.suite.data_dir)).ok()?;
    // Each run's scores as what they are (a head-to-head pair may mix similarities and logits).
    let sa = crate::dump::from_lines(&suite, a, &baseline.source, baseline.run.model.score_kind()).ok()?;
    let sb = crate::dump::from_lines(&suite, b, &current.source, current.run.model.score_kind()).ok()?;
    let views = suite.item_views();
    // Clusters as the current run drew its intervals (items where it asked for items).
    let clustered = current.run.bootstrap.as_ref().is_some_and(|b| b.unit == crate::plan::BootstrapUnit::Clusters);
    let clusters = if clustered { suite.clusters() } else { None };
    let unit = clusters.as_ref().map_or(stats::Unit::Items, stats::Unit::Clusters);
    let bootstrap =
        stats::paired_by(&suite.summary, &sa, &sb, &views, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, unit).ok()?;
    let tests = stats::paired_tests(&suite.summary, &sa, &sb, &views, unit).ok()?;
    Some((bootstrap, tests, clusters.is_some()))
}

/// The largest absolute difference between two runs' item scores, if they score the same
/// items with the same shapes.
fn max_score_change(baseline: &ComparedRun, current: &ComparedRun) -> Option<f64> {
    let (a, b) = (baseline.lines.as_ref()?, current.lines.as_ref()?);
    if a.len() != b.len() {
        return None;
    }
    let mut max = 0.0f64;
    for i in 0..a.len() {
        let (x, y) = (a.flat(i), b.flat(i));
        if a.id(i) != b.id(i) || x.len() != y.len() {
            return None;
        }
        max = x.iter().zip(y).map(|(p, q)| (p - q).abs()).fold(max, f64::max);
    }
    Some(max)
}

/// The rows of one matched pair: one per headline metric, then one per breakdown group's
/// metric; a single "not comparable" row where the data differ (unless allowed).
fn rows_of_pair(baseline: &ComparedRun, current: &ComparedRun, plan: &ComparePlan) -> Result<Vec<Row>> {
    // Item scores of two different models are on different scales: no comparison of those.
    let same_model = baseline.run.label() == current.run.label();
    // Head to head, the row names both models.
    let model =
        if same_model { current.run.label() } else { format!("{} vs {}", current.run.label(), baseline.run.label()) };
    let suite = current.run.suite.id.clone();
    if let Some(why) = different_data(baseline, current).filter(|_| !plan.allow_different_data) {
        let (metric, base) = baseline.run.report.metrics.first().cloned().unwrap_or_default();
        let now = current.run.report.metric(&metric).unwrap_or(f64::NAN);
        let mut change = Change::unpaired(model, suite, metric, base, now);
        change.verdict = Verdict::NotComparable;
        change.note = Some(why);
        return Ok(vec![Row { change, evidence: None, sign: 1.0 }]);
    }
    let paired = evidence(baseline, current);
    let max_score_change = if same_model { max_score_change(baseline, current) } else { None };
    let test_of = |metric: &str, group: Option<(&str, &str)>| {
        let (_, tests, clustered) = paired.as_ref()?;
        let test = tests
            .iter()
            .find(|t| t.metric == metric && t.group.as_ref().map(|(k, v)| (k.as_str(), v.as_str())) == group)?;
        Some(Evidence::from_test(test, *clustered))
    };
    let row = |metric: &str, group: Option<(&str, &str)>, base: f64, now: f64, evidence: Option<Evidence>| {
        let mut change = Change::unpaired(model.clone(), suite.clone(), metric.to_string(), base, now);
        change.group = group.map(|(k, v)| (k.to_string(), v.to_string()));
        change.max_score_change = max_score_change;
        Row { change, evidence, sign: if higher_is_better(metric) { 1.0 } else { -1.0 } }
    };
    let mut rows = Vec::new();
    for (metric, base) in &baseline.run.report.metrics {
        let now = current.run.report.metric(metric).unwrap_or(f64::NAN);
        // The bootstrap's percentile interval where there is one (as `eval` reports intervals),
        // the per-item test where the metric has one.
        let bootstrap = paired.as_ref().and_then(|(bootstrap, _, clustered)| {
            let p = bootstrap.iter().find(|p| &p.metric == metric)?;
            Some(Evidence::from_bootstrap(p, current.run.report.items, *clustered))
        });
        let evidence = match (test_of(metric, None), bootstrap) {
            (Some(test), Some(bootstrap)) => Some(Evidence { interval: bootstrap.interval, ..test }),
            (test, bootstrap) => test.or(bootstrap),
        };
        rows.push(row(metric, None, *base, now, evidence));
    }
    if plan.headline_only {
        return Ok(rows);
    }
    for breakdown in &baseline.run.report.breakdowns {
        // A group holding every item repeats the headline rows (and would count twice).
        for group in breakdown.groups.iter().filter(|g| g.items < baseline.run.report.items) {
            let now_group = current.run.report.group(&breakdown.key, &group.value);
            for (metric, base) in &group.metrics {
                let now =
                    now_group.and_then(|g| g.metrics.iter().find(|(n, _)| n == metric)).map_or(f64::NAN, |(_, v)| *v);
                let key = Some((breakdown.key.as_str(), group.value.as_str()));
                rows.push(row(metric, key, *base, now, test_of(metric, key)));
            }
        }
    }
    Ok(rows)
}

/// The gate over paired tests alone, as `compare` decides them: one row per test, from a
/// baseline of 0 to `delta` (what `bench --part gate` simulates).
pub fn decide_tests(tests: &[stats::PairedTest], rule: &GateRule) -> Gate {
    let rows = tests
        .iter()
        .map(|test| {
            let mut change = Change::unpaired(String::new(), String::new(), test.metric.clone(), 0.0, test.delta);
            change.group = test.group.clone();
            let sign = if higher_is_better(&test.metric) { 1.0 } else { -1.0 };
            Row { change, evidence: Some(Evidence::from_test(test, false)), sign }
        })
        .collect();
    Gate { changes: gate::decide(rows, rule), rule: rule.clone() }
}

/// An error (exit code 6) naming the rows that fail the gate, if any.
pub fn verdict(gate: &Gate) -> Result<()> {
    let failures: Vec<String> = gate
        .failures()
        .map(|c| match c.verdict {
            Verdict::Regression => format!("{} on {} {} dropped", c.model, c.suite, c.metric_label()),
            Verdict::Underpowered => format!("{} on {} {} is underpowered", c.model, c.suite, c.metric_label()),
            _ => c.note.clone().unwrap_or_else(|| format!("{} on {}: {}", c.model, c.suite, c.verdict.label())),
        })
        .collect();
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::Regression,
            format!("pass the regression gate: {} row(s) failed: {}", failures.len(), failures.join("; ")),
        ))
    }
}
