//! One evaluation's working state, opened once from its plan: the resolved model (weights not
//! yet read), the embedding cache, the memo of image files' keys, and the record being made
//! ([`RunBuilder`]: counts and timings). Item suites and galleries take their inputs' keys,
//! the caption check and the model through it, so each of those steps has one home.

use std::sync::atomic::Ordering;
use std::time::Instant;

use benchctl_base::spill::SpillVec;

use crate::cache::{self, EmbeddingCache, FileKeys, SourceList};
use crate::model::{resolve_model, Head, LoadedModel, Needed, ResolvedModel};
use crate::plan::EvalPlan;
use crate::record::RunBuilder;
use crate::Result;

/// A run in progress.
pub struct Session<'p> {
    pub plan: &'p EvalPlan,
    pub model: ResolvedModel,
    pub cache: EmbeddingCache,
    file_keys: FileKeys,
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

    /// The cache keys of `images` (files read on all cores unless the memo knows them).
    pub fn image_keys(&self, images: &(impl SourceList + ?Sized)) -> Result<SpillVec<cache::Key>> {
        cache::image_keys(images, &self.file_keys)
    }

    /// Saves what the memo learnt about image files and counts the files it hashed; after
    /// the last [`Session::image_keys`].
    pub fn keys_done(&mut self) {
        self.run.counts.images_hashed = self.file_keys.hashed.load(Ordering::Relaxed);
        cache::remember(&self.file_keys);
    }

    /// Counts the unique captions the model's tokenizer cuts (and its context); refuses them
    /// when the plan says so.
    pub fn check_captions(&mut self, texts: &[&str]) -> Result<()> {
        let policy = self.plan.options.long_captions;
        (self.run.counts.captions_truncated, self.run.counts.text_context) =
            crate::inputs::long_captions(&self.model, texts, policy)?;
        Ok(())
    }

    /// The weights, unless the cache holds every one of `needed` (then `None`), and the
    /// score head; the time spent loading goes to the record.
    pub fn load_unless_cached(&mut self, needed: &[Needed]) -> Result<(Option<LoadedModel>, Head)> {
        let started = Instant::now();
        let (loaded, head) = self.model.load_unless_cached(&mut self.cache, needed)?;
        // Deciding from the cache is not loading: a run that read no weights records 0.
        if loaded.is_some() {
            self.run.timings.load_model_s = started.elapsed().as_secs_f64();
        }
        Ok((loaded, head))
    }

    /// The weights, whatever the cache holds.
    pub fn load(&mut self) -> Result<LoadedModel> {
        let started = Instant::now();
        let loaded = self.model.load(&mut self.cache)?;
        self.run.timings.load_model_s = started.elapsed().as_secs_f64();
        Ok(loaded)
    }
}
