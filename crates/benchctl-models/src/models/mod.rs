//! One module per architecture.

pub mod clip;
mod weights;
