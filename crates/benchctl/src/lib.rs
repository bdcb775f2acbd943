//! The `benchctl` runner: the command line over the suite, model and scoring crates.
//!
//! - [`cli`]: the command line;
//! - `benchctl eval`, in one direction: [`model`] (resolve the model) → [`encode`] (each unique
//!   input once, through the cache) → [`evaluate`] (item suites and retrieval galleries: scores,
//!   metrics, intervals) → [`results`] (the run record) → [`store`];
//! - [`check`]: `benchctl check`, every problem of a suite's data at once;
//! - [`fetch`]: `benchctl fetch`, a suite's data from the hub;
//! - [`cache`]: the embedding cache across runs;
//! - [`results`]: run records and their JSON export (run file and score dump);
//! - [`store`]: the SQLite results store;
//! - [`fault`]: fault injection for the crash tests;
//! - [`score`]: `benchctl score`, metrics from external scores;
//! - [`submission`]: scores in a benchmark's official submission layout;
//! - [`leaderboard`]: writes `LEADERBOARD.md`;
//! - [`config`]: run specs (`eval --config run.toml`);
//! - [`compare`]: `benchctl compare`, the regression gate;
//! - [`merge`]: `benchctl merge`, shard runs into one run;
//! - [`bench`](mod@bench): encoder throughput on random weights.

pub mod bench;
pub mod cache;
pub mod check;
pub mod cli;
pub mod compare;
pub mod config;
pub mod encode;
pub mod error;
pub mod evaluate;
pub mod fault;
pub mod fetch;
pub mod leaderboard;
pub mod markdown;
pub mod merge;
pub mod model;
pub mod report;
pub mod results;
pub mod score;
pub mod store;
pub mod submission;
pub mod summary;

pub use error::{Error, ErrorKind, Result};
