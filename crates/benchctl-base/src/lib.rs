//! The foundation of every benchctl crate, with no knowledge of suites, models or metrics:
//!
//! - [`spill`]: the memory budget every per-item vector shares (`SpillVec`, `Strings`,
//!   `Index`, `Map`), spilled to mapped files past `BENCHCTL_SPILL_AT`, so that a suite of a
//!   million items runs in bounded memory;
//! - [`kinded_error`]: the error shape each crate declares (a kind, a lowercase message, the
//!   cause kept), written once by [`kinded_error_impl!`];
//! - [`stderr`]: lines on standard error that never panic ([`stderr_line!`]);
//! - [`time`]: UTC timestamps as stored runs write them;
//! - [`hub_names`]: the Hugging Face hub's repo ids, commits and repo paths, checked.

pub mod hub_names;
pub mod kinded_error;
pub mod spill;
pub mod stderr;
pub mod time;
