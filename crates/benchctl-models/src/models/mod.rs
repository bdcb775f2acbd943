//! One module per architecture.

pub mod clip;
pub mod clip_openai;
pub mod transformer;
mod weights;
