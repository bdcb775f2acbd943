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
        }
    }
}
