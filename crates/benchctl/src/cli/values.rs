//! The command line's value enums (`--ties`, `--bootstrap`, RoCOCO's options, …) and what
//! each becomes in a plan.

use benchctl_scoring::metrics::Ties;
use clap::ValueEnum;

/// `--bootstrap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BootstrapArg {
    Clusters,
    Items,
}

impl From<BootstrapArg> for benchctl::plan::BootstrapUnit {
    fn from(arg: BootstrapArg) -> Self {
        match arg {
            BootstrapArg::Clusters => benchctl::plan::BootstrapUnit::Clusters,
            BootstrapArg::Items => benchctl::plan::BootstrapUnit::Items,
        }
    }
}

/// `--on-long-caption`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LongCaptionArg {
    Truncate,
    Error,
}

/// `--ties`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TiesArg {
    Strict,
    First,
    Shared,
}

/// `--rococo-altered`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AlteredSourceArg {
    Auto,
    Release,
    Generate,
}

/// `--caption-normalisation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CaptionNormalisationArg {
    Auto,
    None,
    Blip,
}

/// RoCOCO's image alterations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AlterMethod {
    Mix,
    Patch,
}

impl From<TiesArg> for Ties {
    fn from(t: TiesArg) -> Self {
        match t {
            TiesArg::Strict => Ties::Strict,
            TiesArg::First => Ties::First,
            TiesArg::Shared => Ties::Shared,
        }
    }
}

/// `--correction`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CorrectionArg {
    /// Holm's step-down: the chance of any false alarm over the gate is at most --alpha.
    Holm,
    /// Benjamini–Hochberg: the expected share of false alarms among alarms is at most --alpha.
    Bh,
    /// Each row at --alpha on its own.
    None,
}

impl From<CorrectionArg> for benchctl_scoring::metrics::power::Correction {
    fn from(arg: CorrectionArg) -> Self {
        use benchctl_scoring::metrics::power::Correction;
        match arg {
            CorrectionArg::Holm => Correction::Holm,
            CorrectionArg::Bh => Correction::Bh,
            CorrectionArg::None => Correction::None,
        }
    }
}

/// A probability strictly between 0 and 1 (`--alpha`, `--power`).
pub fn probability(text: &str) -> Result<f64, String> {
    let value: f64 = text.parse().map_err(|_| format!("`{text}` is not a number"))?;
    if value > 0.0 && value < 1.0 {
        Ok(value)
    } else {
        Err(format!("{value} is not strictly between 0 and 1"))
    }
}
