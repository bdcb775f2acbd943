//! The `benchctl` runner: the command line over the suite, model and scoring crates.
//!
//! - [`cli`]: the command line;
//! - [`eval`]: `benchctl eval`, encode once and score;
//! - [`check`]: `benchctl check`, every problem of a suite's data at once;
//! - [`fetch`]: `benchctl fetch`, a suite's data from the hub;
//! - [`cache`]: the embedding cache across runs;
//! - [`results`]: stored runs and score dumps;
//! - [`retrieval`]: `benchctl eval` of retrieval suites (RoCOCO) against whole galleries;
//! - [`score`]: `benchctl score`, metrics from external scores;
//! - [`submission`]: scores in a benchmark's official submission layout;
//! - [`leaderboard`]: writes `LEADERBOARD.md`;
//! - [`bench`]: encoder throughput on random weights.

pub mod bench;
pub mod cache;
pub mod check;
pub mod cli;
pub mod error;
pub mod eval;
pub mod fetch;
pub mod leaderboard;
pub mod results;
pub mod retrieval;
pub mod score;
pub mod submission;
pub mod summary;

pub use error::{Error, ErrorKind, Result};
