//! One module per architecture.

pub mod clip;
pub mod clip_openai;
mod weights;
