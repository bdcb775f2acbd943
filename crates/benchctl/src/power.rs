//! `benchctl power`: how many items a suite needs for the regression gate to find a drop of
//! a given size, and what it finds at the items it has (see "The regression gate" in
//! docs/results.md). Two models' outcomes on a 0/1 metric differ on a share of the items (their
//! discordance), which the difference alone does not fix, so the answer is a row per
//! discordance (or the ones `--discordance` names; `compare` shows each pair's observed one).

use std::path::{Path, PathBuf};

use benchctl_scoring::metrics::power;

use crate::{Error, Result};

/// What `benchctl power` is asked.
#[derive(Debug, Clone)]
pub struct PowerPlan {
    pub suite: String,
    /// The suite's data (default `datasets/<suite>`), to count its items.
    pub data_dir: Option<PathBuf>,
    /// The items, instead of counting them.
    pub items: Option<u64>,
    /// The drop to find, in points.
    pub difference: f64,
    /// Discordant shares to answer for (fractions); empty: a standard ladder.
    pub discordances: Vec<f64>,
    /// The gate's level, and the rows compared at once (a single drop must beat `alpha/tests`).
    pub alpha: f64,
    pub tests: u64,
    pub power: f64,
    /// How many times the variance exceeds that of independent items (clusters).
    pub design_effect: f64,
    /// A run's seed-to-seed standard deviation (points), for the seeds a comparison of means needs.
    pub seed_spread: Option<f64>,
}

/// One discordance's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct PowerRow {
    pub discordance: f64,
    /// Items needed (clusters counted through the design effect); `None` where no pair of
    /// models can differ so (discordance below the difference).
    pub items_needed: Option<u64>,
    /// The smallest drop (points) found at the suite's items.
    pub detectable: Option<f64>,
}

/// The answer.
#[derive(Debug, Clone, PartialEq)]
pub struct PowerAnswer {
    pub suite: String,
    pub items: u64,
    /// Where the item count came from.
    pub items_from: String,
    /// The level one comparison must reach.
    pub level: f64,
    pub rows: Vec<PowerRow>,
    pub seeds_per_model: Option<u64>,
}

/// The default discordances: from the smallest a difference allows to half the items.
const LADDER: [f64; 6] = [0.02, 0.05, 0.1, 0.2, 0.3, 0.5];

fn count_items(plan: &PowerPlan) -> Result<(u64, String)> {
    if let Some(items) = plan.items {
        return Ok((items, "--items".to_string()));
    }
    let info = benchctl_suites::find(&plan.suite)?;
    let data_dir =
        plan.data_dir.clone().unwrap_or_else(|| crate::fetch::default_data_dir(&info, Path::new("datasets")));
    if data_dir.exists() {
        let (suite, _) = info.load_all(&data_dir)?;
        return Ok((suite.items.len() as u64, format!("the annotations in {}", data_dir.display())));
    }
    match info.expected_items {
        Some(items) => Ok((items as u64, "the official release's count".to_string())),
        None => Err(Error::new(
            crate::ErrorKind::Usage,
            format!(
                "count the items of {}: {} does not exist and the suite declares no official count; give --items or --data-dir",
                plan.suite,
                data_dir.display()
            ),
        )),
    }
}

pub fn run(plan: &PowerPlan) -> Result<PowerAnswer> {
    let (items, items_from) = count_items(plan)?;
    let delta = plan.difference / 100.0;
    if !(delta > 0.0 && delta <= 1.0) {
        return Err(Error::new(
            crate::ErrorKind::Usage,
            format!("use a --difference in (0, 100] points, not {}", plan.difference),
        ));
    }
    let level = plan.alpha / plan.tests.max(1) as f64;
    let mut discordances: Vec<f64> = if plan.discordances.is_empty() {
        std::iter::once(delta).chain(LADDER.iter().copied().filter(|&p| p > delta)).collect()
    } else {
        plan.discordances.clone()
    };
    discordances.dedup();
    let effective = items as f64 / plan.design_effect;
    let rows = discordances
        .into_iter()
        .map(|discordance| PowerRow {
            discordance,
            items_needed: power::mcnemar_items_needed(delta, discordance, level, plan.power)
                .map(|n| (n as f64 * plan.design_effect).ceil() as u64),
            detectable: power::mcnemar_detectable(effective, discordance, level, plan.power).map(|d| 100.0 * d),
        })
        .collect();
    let seeds_per_model = plan.seed_spread.and_then(|s| power::seeds_needed(plan.difference, s, level, plan.power));
    Ok(PowerAnswer { suite: plan.suite.clone(), items, items_from, level, rows, seeds_per_model })
}

/// The answer as a table with a heading and, with a seed spread, the seeds line.
pub fn table(plan: &PowerPlan, answer: &PowerAnswer) -> String {
    let mut out = format!(
        "{}: {} items (from {}); a drop of {:.2} points at one-sided level {:.3e} ({} over {} comparison(s)), power {:.0} %, design effect {}\n",
        answer.suite,
        answer.items,
        answer.items_from,
        plan.difference,
        answer.level,
        plan.alpha,
        plan.tests,
        100.0 * plan.power,
        plan.design_effect
    );
    let mut table = crate::table::new([
        "discordant items",
        "items needed",
        "verdict",
        &format!("detectable drop at {} items", answer.items),
    ]);
    for row in &answer.rows {
        let right = crate::table::right;
        let one_way = if (row.discordance - plan.difference / 100.0).abs() < 1e-12 { " (all one way)" } else { "" };
        let verdict = match row.items_needed {
            Some(n) if n <= answer.items => "enough".to_string(),
            Some(n) => format!("{} short", n - answer.items),
            None => "impossible: discordance below the drop".to_string(),
        };
        table.add_row(vec![
            right(format!("{:.1} %{one_way}", 100.0 * row.discordance)),
            right(row.items_needed.map_or("–".into(), |n| n.to_string())),
            comfy_table::Cell::new(verdict),
            right(row.detectable.map_or("more than every item".into(), |d| format!("{d:.2} points"))),
        ]);
    }
    out.push_str(&table.to_string());
    if let (Some(seeds), Some(spread)) = (answer.seeds_per_model, plan.seed_spread) {
        out.push_str(&format!(
            "\nseeds: {seeds} run(s) of each model, their mean scores compared, find a difference of {:.2} points when one run's score varies by {spread:.2} points (standard deviation) from seed to seed",
            plan.difference
        ));
    }
    out
}
