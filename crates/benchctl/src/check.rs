//! `benchctl check`: validate a suite's data and report every problem at once: malformed
//! records (with file and position), missing or undecodable images, and item counts that
//! differ from the official release.

use std::path::{Path, PathBuf};

use benchctl_base::spill::Strings;
use benchctl_suites::{rococo, ImageSource, SuiteKind};
use indicatif::ProgressBar;
use rayon::prelude::*;

use crate::{Error, ErrorKind, Result};

/// Images decoded in parallel per step: their problems are kept in image order, step by step,
/// rather than all collected first.
const IMAGE_STEP: usize = 4096;

/// What `check` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    pub suite: String,
    pub data_dir: PathBuf,
    pub items: usize,
    pub images: usize,
    /// One line each: the annotations' problems in the order found, then the images' in image
    /// order (spilled with the rest of the per-item state: a broken million-item file has a
    /// million).
    pub problems: Strings,
}

impl CheckReport {
    /// Writes human-readable lines: a summary, then one line per problem.
    pub fn write_to(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        write!(
            out,
            "{} in {}: {} items, {} images, {} problem(s)",
            self.suite,
            self.data_dir.display(),
            self.items,
            self.images,
            self.problems.len()
        )?;
        for p in self.problems.iter() {
            write!(out, "\n- {p}")?;
        }
        writeln!(out)
    }

    /// An error (exit code 3) when any problem was found.
    pub fn into_result(self) -> Result<()> {
        if self.problems.is_empty() {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::Data,
                format!(
                    "validate {} data in {}: {} problem(s), listed above",
                    self.suite,
                    self.data_dir.display(),
                    self.problems.len()
                ),
            ))
        }
    }
}

/// What `benchctl check` checks.
#[derive(Debug, Clone)]
pub struct CheckPlan {
    pub suite: String,
    /// The suite's data [default: datasets/SUITE].
    pub data_dir: Option<PathBuf>,
    /// Check images a symbolic link in the data directory leads out of it to.
    pub allow_outside_links: bool,
}

/// Runs every check on the suite's data.
pub fn run(args: &CheckPlan) -> Result<CheckReport> {
    let info = benchctl_suites::find(&args.suite)?;
    let data_dir =
        args.data_dir.clone().unwrap_or_else(|| crate::fetch::default_data_dir(&info, Path::new("datasets")));
    let mut missing = std::collections::HashSet::new();
    let (items, images, mut problems): (usize, CheckedImages, Strings) = match info.kind {
        SuiteKind::Items { .. } | SuiteKind::Manifest(_) => {
            let (suite, problems) = info.load_all(&data_dir)?;
            let mut problems = problems.into_messages();
            problems.extend(suite.incomplete.iter().map(|s| format!("not the complete official release: {s}")));
            // Missing files by folder (a release whose images are elsewhere is one line); they
            // are not read again below.
            let groups = suite.missing_images_by_folder();
            problems.extend(groups.iter().map(|g| g.describe()));
            missing.extend(suite.missing_images());
            (suite.items.len(), CheckedImages::OfSuite(Box::new(suite)), problems)
        }
        // A retrieval suite's queries are its test images.
        SuiteKind::Galleries => match rococo::load(&data_dir) {
            Ok(data) => (data.images.len(), CheckedImages::Files(data.images), Strings::new()),
            Err(e) => (0, CheckedImages::Files(Vec::new()), Strings::from_iter([e.to_string()])),
        },
    };
    if let Some(expected) = info.expected_items {
        if items != expected {
            problems.push(&format!("the official release has {expected} items, these annotations give {items}"));
        }
    }
    // Decoded as `eval` decodes them; then the resize bound of the models that resize the
    // shorter side (CLIP and OpenCLIP at 224 px, the smallest), which a degenerate aspect
    // ratio breaks. Models that resize to a square (SigLIP, BLIP, FIBER) take such images.
    let shorter_side = benchctl_models::preprocess::Preprocessor::openai_clip(224);
    let root = (!args.allow_outside_links).then(|| benchctl_suites::paths::DataRoot::new(&data_dir));
    let bar = ProgressBar::new(images.len() as u64).with_message("checking images");
    for step in (0..images.len()).step_by(IMAGE_STEP) {
        let found: Vec<Option<String>> = (step..images.len().min(step + IMAGE_STEP))
            .into_par_iter()
            .map(|i| {
                let source = images.get(i);
                // Images shown together are candidates of their own too, checked as such.
                if matches!(source, benchctl_suites::ImageSource::Together(_)) {
                    bar.inc(1);
                    return None;
                }
                if source.files().iter().any(|f| missing.contains(*f)) {
                    bar.inc(1);
                    return None;
                }
                let outside = root
                    .as_ref()
                    .and_then(|root| source.files().into_iter().find_map(|f| root.refuse_outside(f).err()));
                if let Some(why) = outside {
                    bar.inc(1);
                    return Some(format!("read image {}: {why}", source.display_name()));
                }
                let result = source.load_rgb();
                bar.inc(1);
                match result {
                    Err(e) => Some(e.to_string()),
                    Ok(image) => shorter_side
                        .check_input(image.width() as usize, image.height() as usize)
                        .err()
                        .map(|why| format!("preprocess image {} for CLIP and OpenCLIP: {why}", source.display_name())),
                }
            })
            .collect();
        problems.extend(found.into_iter().flatten());
    }
    bar.finish_and_clear();
    // Candidates that show images together are not images of their own.
    let shown_together = match &images {
        CheckedImages::OfSuite(suite) => suite.items.distinct_sources().shown_together(),
        CheckedImages::Files(_) => 0,
    };
    Ok(CheckReport { suite: info.id.to_string(), data_dir, items, images: images.len() - shown_together, problems })
}

/// The distinct images `check` decodes: a suite's (read from its spilled sources as each is
/// checked, not collected) or a retrieval suite's files.
enum CheckedImages {
    OfSuite(Box<benchctl_suites::Suite>),
    Files(Vec<std::path::PathBuf>),
}

impl CheckedImages {
    fn len(&self) -> usize {
        match self {
            CheckedImages::OfSuite(suite) => suite.items.distinct_sources().len(),
            CheckedImages::Files(files) => files.len(),
        }
    }

    fn get(&self, i: usize) -> ImageSource {
        match self {
            CheckedImages::OfSuite(suite) => suite.items.distinct_sources().get(i),
            CheckedImages::Files(files) => ImageSource::File(files[i].clone()),
        }
    }
}
