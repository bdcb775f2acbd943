//! The session stage: one evaluation's working state, opened once from its plan: the resolved
//! model (weights not yet read), the embedding cache, the memo of image files' keys, and the
//! record being made ([`RunBuilder`]: counts and timings). Later stages take what they need
//! from it and fill its record.

use crate::cache::{EmbeddingCache, FileKeys};
use crate::model::{resolve_model, ResolvedModel};
use crate::plan::EvalPlan;
use crate::record::RunBuilder;
use crate::Result;

/// A run in progress.
pub struct Session<'p> {
    pub plan: &'p EvalPlan,
    pub model: ResolvedModel,
    pub cache: EmbeddingCache,
    /// What this machine knows of image files' keys (path, size, modification time).
    pub file_keys: FileKeys,
    pub run: RunBuilder,
}

impl<'p> Session<'p> {
    /// Resolves the plan's model (files and head, no weights) and opens the caches.
    pub fn open(plan: &'p EvalPlan) -> Result<Self> {
        let model = resolve_model(&plan.model)?;
        let cache = model.cache(!plan.options.use_cache)?;
        let mut file_keys = model.file_keys(!plan.options.use_cache);
        if !plan.options.allow_outside_links {
            file_keys.inside = Some(benchctl_suites::paths::DataRoot::new(&plan.data_dir));
        }
        let run = RunBuilder::start(model.record.clone(), plan.options.batch_size, plan.options.shard);
        Ok(Session { plan, model, cache, file_keys, run })
    }

    /// Images or texts per forward pass.
    pub fn batch(&self) -> usize {
        self.plan.options.batch_size
    }
}
