//! The RoCOCO report from every gallery's query outcomes: R@1/5/10, their mean and the median
//! rank per gallery and direction, RSMS and the drop rate against the clean gallery, altered
//! image galleries averaged over their seeds, `rsum`, and the means of R@1 over the altered
//! galleries of each direction (the headline, `i2t_r1_altered_mean`).

use benchctl_base::spill::SpillVec;

use super::{drop_rate, summarise, QueryOutcome, RetrievalScores};
use crate::{Error, Report, Result};

/// One gallery's outcomes, named for the report and dump.
#[derive(Debug, Clone)]
pub struct GalleryOutcomes {
    /// `clean`, a caption set, or an altered image gallery `<method><λ/10>_seed<seed>`.
    pub name: String,
    /// `i2t` or `t2i`.
    pub direction: &'static str,
    /// How many candidates each query was ranked against (a rank is always below it).
    pub candidates: usize,
    /// By query (spilled: a dump given to `score` can hold any number).
    pub outcomes: SpillVec<QueryOutcome>,
}

/// One gallery's metrics, `<prefix>_r1` … `<prefix>_medr`, and against the clean gallery's
/// R@1 its RSMS and drop rate.
fn push(metrics: &mut Vec<(String, f64)>, prefix: &str, s: &RetrievalScores, clean_r1: Option<f64>) {
    metrics.push((format!("{prefix}_r1"), s.r1));
    metrics.push((format!("{prefix}_r5"), s.r5));
    metrics.push((format!("{prefix}_r10"), s.r10));
    metrics.push((format!("{prefix}_r_mean"), s.r_mean));
    metrics.push((format!("{prefix}_medr"), s.medr));
    if let Some(clean) = clean_r1 {
        metrics.push((format!("{prefix}_rsms"), s.rsms));
        if let Some(drop) = drop_rate(clean, s.r1) {
            metrics.push((format!("{prefix}_drop"), drop));
        }
    }
}

/// The RoCOCO report of `results`; `caption_sets` are the altered caption galleries in report
/// order. The clean gallery must be there in both directions.
pub fn rococo_report(results: &[GalleryOutcomes], caption_sets: &[&str]) -> Result<Report> {
    let find = |name: &str, direction: &str| results.iter().find(|r| r.name == name && r.direction == direction);
    let summary = |r: &GalleryOutcomes| summarise(&r.outcomes);
    let mut metrics: Vec<(String, f64)> = Vec::new();
    let clean = |direction: &str| {
        find("clean", direction)
            .ok_or_else(|| Error::new(format!("the clean {direction} gallery was not scored")))
            .and_then(summary)
    };
    let (clean_i2t, clean_t2i) = (clean("i2t")?, clean("t2i")?);
    push(&mut metrics, "clean_i2t", &clean_i2t, None);
    push(&mut metrics, "clean_t2i", &clean_t2i, None);
    let rsum = clean_i2t.r1 + clean_i2t.r5 + clean_i2t.r10 + clean_t2i.r1 + clean_t2i.r5 + clean_t2i.r10;
    metrics.push(("clean_rsum".into(), rsum));
    let mut i2t_r1 = Vec::new();
    for set in caption_sets {
        if let Some(r) = find(set, "i2t") {
            let s = summary(r)?;
            i2t_r1.push(s.r1);
            push(&mut metrics, &format!("{set}_i2t"), &s, Some(clean_i2t.r1));
        }
    }
    // Altered image galleries `<method><λ/10>_seed<s>`, averaged over seeds, in the order
    // they were scored (methods, then λ, then seeds, as the flags list them).
    let mut t2i_r1 = Vec::new();
    let mut groups: Vec<(String, Vec<&GalleryOutcomes>)> = Vec::new();
    for r in results.iter().filter(|r| r.direction == "t2i" && r.name != "clean") {
        let group = r
            .name
            .rsplit_once("_seed")
            .map(|(g, _)| g)
            .ok_or_else(|| Error::new(format!("gallery `{}` is not <method><λ>_seed<seed>", r.name)))?;
        match groups.iter_mut().find(|(g, _)| g == group) {
            Some((_, members)) => members.push(r),
            None => groups.push((group.to_string(), vec![r])),
        }
    }
    for (group, members) in &groups {
        let per_seed = members.iter().map(|r| summary(r)).collect::<Result<Vec<_>>>()?;
        let k = per_seed.len() as f64;
        let mean = |f: fn(&RetrievalScores) -> f64| per_seed.iter().map(f).sum::<f64>() / k;
        let s = RetrievalScores {
            r1: mean(|s| s.r1),
            r5: mean(|s| s.r5),
            r10: mean(|s| s.r10),
            r_mean: mean(|s| s.r_mean),
            medr: mean(|s| s.medr),
            rsms: mean(|s| s.rsms),
        };
        t2i_r1.push(s.r1);
        push(&mut metrics, &format!("{group}_t2i"), &s, Some(clean_t2i.r1));
    }
    for (name, values) in [("i2t_r1_altered_mean", &i2t_r1), ("t2i_r1_altered_mean", &t2i_r1)] {
        if !values.is_empty() {
            metrics.push((name.to_string(), values.iter().sum::<f64>() / values.len() as f64));
        }
    }
    let items = find("clean", "i2t").map(|r| r.outcomes.len()).unwrap_or(0);
    Ok(Report { items, metrics, breakdowns: Vec::new() })
}
