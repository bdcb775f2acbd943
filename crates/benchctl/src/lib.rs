//! The `benchctl` runner: the library behind the `benchctl` binary, over the suite, model and
//! scoring crates. The binary parses the command line into a typed plan and calls one
//! command here; no module of this library sees a flag.
//!
//! # One evaluation, stage by stage
//!
//! `benchctl eval` flows one way, each stage in one file:
//!
//! | stage | module | in | out |
//! |---|---|---|---|
//! | plan | [`plan`] (and [`config`] for run specs) | flags, a TOML spec | [`plan::EvalPlan`] |
//! | dispatch | [`evaluate`] (the tie rule) | the plan | item suite or galleries |
//! | suite | [`evaluate::items`] (`load_suite`) / [`evaluate::galleries`] | the plan | a `Suite` (or RoCOCO's galleries) |
//! | session | [`session`] | the plan | [`session::Session`]: resolved model ([`model`]), caches, the [`record::RunBuilder`] |
//! | inputs | [`inputs`] (keys by [`cache::keys`]) | the suite's items | [`inputs::SuiteInputs`]: unique images and texts, slots, a shard, keys, fingerprints |
//! | scores | [`encode::scores`] ([`encode::stream`], [`encode::pairs`]) / [`evaluate::galleries`] (`rank_every_gallery`) | inputs, the cache, the model | an `N × K × L` score tensor, or gallery ranks |
//! | metrics + record | [`record::RunBuilder::finish_items`] (`benchctl_scoring`) | the scores | a [`results::Run`] in an [`record::Evaluation`] |
//! | store | [`record::Evaluation::store`] → [`results`] (run file, dump), [`store`] (SQLite) | the evaluation | the run's id and file |
//!
//! [`evaluate::items::run`] calls the stages in this order, one call each.
//!
//! The other commands: [`catalog`] (`benchctl suites`), [`check`], [`fetch`], [`score`] (metrics from external scores, read
//! by [`dump`]), [`report`] (the failure browser), [`compare`] (the regression gate),
//! [`merge`] (shard runs into one), [`leaderboard`], [`bench`](mod@bench); [`submission`]
//! writes official submission files, [`summary`] the tables the binary prints.

pub mod bench;
pub mod cache;
pub mod catalog;
pub mod check;
pub mod compare;
pub mod config;
pub mod dump;
pub mod encode;
pub mod error;
pub mod evaluate;
pub mod fault;
pub mod fetch;
pub mod inputs;
pub mod leaderboard;
pub mod markdown;
pub mod merge;
pub mod model;
pub mod plan;
pub mod power;
pub mod record;
pub mod replies;
pub mod report;
pub mod results;
pub mod score;
pub mod session;
pub mod store;
pub mod submission;
pub mod summary;
pub mod table;

pub use error::{Error, ErrorKind, Result};
