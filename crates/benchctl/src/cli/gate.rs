//! The regression gate's options: `compare` (which runs, and how the gate decides) and
//! `power` (what a suite's items can detect).

use std::path::PathBuf;

use benchctl::{compare, power};
use clap::Args;

use super::values::{self, CorrectionArg};

#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    /// The baseline: a run file, or a directory of run files (a committed baseline set).
    #[arg(long, value_name = "FILE_OR_DIR")]
    pub baseline: PathBuf,
    /// The runs to check: run files, or directories of run files; by default the latest run
    /// in the results store of each baseline's model and suite. One run file against a
    /// baseline run file compares them head to head, whatever their models.
    #[arg(value_name = "RUN")]
    pub runs: Vec<PathBuf>,
    /// The largest drop (in metric points) that is not a regression: a drop beyond it is one
    /// when its one-sided p-value, adjusted over the gate's rows, is below --alpha.
    #[arg(long, value_name = "POINTS", default_value_t = compare::DEFAULT_TOLERANCE, help_heading = "Gate")]
    pub tolerance: f64,
    /// The gate's level: the chance of any false alarm (holm) or the expected share of false
    /// alarms (bh) over all its rows.
    #[arg(long, value_name = "P", default_value_t = compare::DEFAULT_ALPHA, value_parser = values::probability, help_heading = "Gate")]
    pub alpha: f64,
    /// How p-values are adjusted for the number of rows compared at once.
    #[arg(long, value_enum, default_value_t = CorrectionArg::Holm, help_heading = "Gate")]
    pub correction: CorrectionArg,
    /// The power at which each row's detectable difference is given.
    #[arg(long, value_name = "P", default_value_t = compare::DEFAULT_POWER, value_parser = values::probability, help_heading = "Gate")]
    pub power: f64,
    /// Fail the gate on an underpowered row too (its detectable difference beyond the tolerance).
    #[arg(long, help_heading = "Gate")]
    pub fail_underpowered: bool,
    /// Only the headline metrics, not each breakdown group's.
    #[arg(long, help_heading = "Gate")]
    pub headline_only: bool,
    /// Compare runs over different data anyway (different annotations or images), without
    /// paired statistics; by default such a pair is not comparable and fails the gate.
    #[arg(long, help_heading = "Gate")]
    pub allow_different_data: bool,
    /// Where the results store is (for the default runs).
    #[arg(long, default_value = "results", value_name = "DIR")]
    pub results_dir: PathBuf,
    /// Also write the verdict as JUnit XML (one test case per model × suite × metric, a
    /// regression a failure) for CI systems.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Also write the verdict as a markdown summary (e.g. `$GITHUB_STEP_SUMMARY`).
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
}

impl From<&CompareArgs> for compare::ComparePlan {
    fn from(a: &CompareArgs) -> Self {
        compare::ComparePlan {
            baseline: a.baseline.clone(),
            runs: a.runs.clone(),
            rule: compare::GateRule {
                tolerance: a.tolerance,
                alpha: a.alpha,
                correction: a.correction.into(),
                power: a.power,
                fail_underpowered: a.fail_underpowered,
            },
            headline_only: a.headline_only,
            allow_different_data: a.allow_different_data,
            results_dir: a.results_dir.clone(),
        }
    }
}

/// `benchctl power`.
#[derive(Debug, Clone, Args)]
#[command(after_help = "Examples:
  benchctl power --suite winoground --difference 2
  benchctl power --suite winoground --difference 1 --discordance 0.15 --tests 40
  benchctl power --suite valse --difference 0.5 --seed-sd 0.8 --items 6800")]
pub struct PowerArgs {
    /// The suite id (see `benchctl suites`).
    #[arg(long)]
    pub suite: String,
    /// The drop to find, in metric points.
    #[arg(long, value_name = "POINTS")]
    pub difference: f64,
    /// The suite's data, to count its items [default: datasets/SUITE].
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// The items, instead of counting them.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub items: Option<u64>,
    /// The share of items on which the two models' outcomes differ (repeatable; `compare`
    /// shows each pair's); by default a ladder from the difference itself to 0.5.
    #[arg(long, value_name = "SHARE", value_parser = values::probability)]
    pub discordance: Vec<f64>,
    /// The gate's level.
    #[arg(long, value_name = "P", default_value_t = compare::DEFAULT_ALPHA, value_parser = values::probability)]
    pub alpha: f64,
    /// The rows the gate compares at once: one drop must then beat alpha / tests (Holm's and
    /// Benjamini–Hochberg's first step).
    #[arg(long, value_name = "M", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub tests: u64,
    /// The chance of finding the drop.
    #[arg(long, value_name = "P", default_value_t = compare::DEFAULT_POWER, value_parser = values::probability)]
    pub power: f64,
    /// How many times clusters inflate the variance (`eval` reports each metric's).
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    pub design_effect: f64,
    /// A run's seed-to-seed standard deviation in points, to say how many seeds of each model
    /// a comparison of their mean scores needs.
    #[arg(long, value_name = "POINTS")]
    pub seed_sd: Option<f64>,
}

impl From<&PowerArgs> for power::PowerPlan {
    fn from(a: &PowerArgs) -> Self {
        power::PowerPlan {
            suite: a.suite.clone(),
            data_dir: a.data_dir.clone(),
            items: a.items,
            difference: a.difference,
            discordances: a.discordance.clone(),
            alpha: a.alpha,
            tests: a.tests,
            power: a.power,
            design_effect: a.design_effect,
            seed_spread: a.seed_sd,
        }
    }
}
