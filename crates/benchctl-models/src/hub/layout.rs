//! The files a model of each layout holds, and the stand-ins a layout's own library takes
//! where a repo lacks one: `transformers`' (one safetensors file or a shard index), OpenCLIP's
//! (safetensors or its PyTorch file; the repo's tokenizer or OpenAI's BPE).

use std::path::Path;

use crate::{Error, ErrorKind, Result};

/// The three files of a model: its config, weights and tokenizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub config: &'static str,
    pub weights: &'static str,
    /// Where a repo or directory has no `weights`, the file that holds them instead, as the
    /// layout's own library falls back to it (one file or a shard index; OpenCLIP's PyTorch
    /// file).
    pub weights_instead: Option<&'static str>,
    pub tokenizer: &'static str,
    /// Where a hub repo has no `tokenizer`, the file that stands in for it, as the layout's own
    /// library falls back to a tokenizer it ships (OpenCLIP's OpenAI BPE).
    pub tokenizer_instead: Option<FileElsewhere>,
    /// Whether the layout may carry image processor settings ([`IMAGE_SETTINGS_FILES`]).
    pub image_settings: bool,
    /// Whether the layout's models may generate replies: their [`GENERATION_FILE`] is then
    /// read, and their tokenizer's [`TOKENIZER_SETTINGS_FILE`] (how a reply is decoded).
    pub generation: bool,
    /// A file of another repo the model needs where its own weights lack part of it.
    pub companion: Option<Companion>,
}

/// A file of another hub repo a checkpoint needs when its weights lack `unless_tensor`:
/// CLIP-FlanT5's CLIP tower, which `t2v_metrics` builds from the repo its config's
/// `mm_vision_tower` names before loading the checkpoint over it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Companion {
    pub file: FileElsewhere,
    pub unless_tensor: &'static str,
}

/// A file of another hub repo, at a pinned commit, standing in for one a repo lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileElsewhere {
    pub repo: &'static str,
    pub commit: &'static str,
    pub file: &'static str,
}

/// open_clip's default tokenizer (OpenAI's BPE, its `SimpleTokenizer`), which it uses for every
/// config without `hf_tokenizer_name`: the same vocabulary and merges as the `tokenizer.json`
/// of OpenAI's ViT-B/32 repo, taken at the commit the zoo's `clip-vit-b32` pins.
pub const OPENAI_CLIP_BPE: FileElsewhere = FileElsewhere {
    repo: "openai/clip-vit-base-patch32",
    commit: "3d74acf9a28c67741b2f4f2ea7635f0aaf6f0268",
    file: "tokenizer.json",
};

impl Layout {
    /// The files a local directory of this layout must hold.
    pub fn files(&self) -> [&'static str; 3] {
        [self.config, self.weights, self.tokenizer]
    }

    /// The files a hub repo of this layout must hold: the tokenizer only where no stand-in
    /// is to be taken instead.
    pub fn repo_files(&self) -> Vec<&'static str> {
        let mut files = vec![self.config, self.weights];
        if self.tokenizer_instead.is_none() {
            files.push(self.tokenizer);
        }
        files
    }

    /// This layout with the weights file that `has` finds: `weights`, else `weights_instead`
    /// where that is there (else `weights`, for the error that names it).
    pub fn with_weights_found(mut self, has: impl Fn(&str) -> bool) -> Self {
        if let Some(instead) = self.weights_instead.filter(|instead| !has(self.weights) && has(instead)) {
            self.weights = instead;
        }
        self
    }
}

/// `transformers`' layout.
pub const HF_LAYOUT: Layout = Layout {
    config: "config.json",
    weights: "model.safetensors",
    weights_instead: Some(SHARD_INDEX_FILE),
    tokenizer: "tokenizer.json",
    tokenizer_instead: None,
    image_settings: true,
    generation: true,
    companion: None,
};

/// `transformers`' layout with its weights in shards, as large checkpoints are published:
/// `model.safetensors.index.json` maps every tensor to one of the shard files beside it.
pub const HF_SHARDED_LAYOUT: Layout =
    Layout { weights: SHARD_INDEX_FILE, weights_instead: Some(HF_LAYOUT.weights), ..HF_LAYOUT };

/// The index of a sharded checkpoint.
pub const SHARD_INDEX_FILE: &str = "model.safetensors.index.json";

/// `transformers`' image processor configuration.
pub const PREPROCESSOR_FILE: &str = "preprocessor_config.json";

/// A `transformers` processor's configuration; since transformers 5, `save_pretrained` writes
/// the image processor's settings here only, as its `image_processor` section.
pub const PROCESSOR_FILE: &str = "processor_config.json";

/// `transformers`' tokenizer settings (class, padding side, special tokens).
pub const TOKENIZER_SETTINGS_FILE: &str = "tokenizer_config.json";

/// How `transformers`' `generate` decodes a checkpoint by default (its stop tokens, its
/// repetition penalty): read by replies generated here (`--answer-rule generate`).
pub const GENERATION_FILE: &str = "generation_config.json";

/// Where an HF-layout checkpoint's image settings are looked for, first found first.
pub const IMAGE_SETTINGS_FILES: [&str; 2] = [PREPROCESSOR_FILE, PROCESSOR_FILE];

/// OpenCLIP's hub layout (`open_clip.push_to_hf_hub`): weights as safetensors, else the
/// PyTorch file open_clip falls back to (older uploads); the `tokenizer.json` most of these
/// repos carry, else OpenAI's BPE, which open_clip ships and uses (Apple's DFN repos).
pub const OPEN_CLIP_LAYOUT: Layout = Layout {
    config: "open_clip_config.json",
    weights: "open_clip_model.safetensors",
    weights_instead: Some("open_clip_pytorch_model.bin"),
    tokenizer: "tokenizer.json",
    tokenizer_instead: Some(OPENAI_CLIP_BPE),
    image_settings: false,
    generation: false,
    companion: None,
};

/// The files every `transformers`-layout model directory must hold.
pub const REQUIRED_FILES: [&str; 3] = ["config.json", "model.safetensors", "tokenizer.json"];

/// Whether the weights at `path` (a shard index, a PyTorch checkpoint or a safetensors file)
/// hold a tensor named `tensor`, read from the index or the file's header alone.
pub fn weights_hold(path: &Path, tensor: &str) -> Result<bool> {
    let bad = |what: String| Error::new(ErrorKind::BadWeights, format!("read weights {}: {what}", path.display()));
    if is_shard_index(&path.to_string_lossy()) {
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(format!("it is not JSON: {e}")))?;
        return Ok(value.get("weight_map").and_then(|m| m.get(tensor)).is_some());
    }
    if super::is_torch_checkpoint(path) {
        let tensors = candle_core::pickle::PthTensors::new(path, None).map_err(|e| bad(e.to_string()))?;
        return Ok(tensors.tensor_infos().contains_key(tensor));
    }
    let mut file = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
    let mut length = [0u8; 8];
    std::io::Read::read_exact(&mut file, &mut length).map_err(|e| bad(e.to_string()))?;
    let length = u64::from_le_bytes(length);
    if length > 100_000_000 {
        return Err(bad(format!("its header length {length} is not a safetensors header's")));
    }
    let mut header = vec![0u8; length as usize];
    std::io::Read::read_exact(&mut file, &mut header).map_err(|e| bad(e.to_string()))?;
    let header: serde_json::Value =
        serde_json::from_slice(&header).map_err(|e| bad(format!("its header is not JSON: {e}")))?;
    Ok(header.get(tensor).is_some())
}

/// The index of a checkpoint in PyTorch shards, as `save_pretrained(safe_serialization=False)`
/// writes it (checkpoints that safetensors refuses, e.g. CLIP-FlanT5's aliased embedding).
pub const PTH_SHARD_INDEX_FILE: &str = "pytorch_model.bin.index.json";

/// Where a `transformers` model directory without safetensors keeps its weights, in the order
/// `from_pretrained` looks for them.
pub const HF_TORCH_WEIGHTS: [&str; 2] = [PTH_SHARD_INDEX_FILE, "pytorch_model.bin"];

/// Whether a weights file is a shard index (of safetensors or of PyTorch shards).
pub fn is_shard_index(file: &str) -> bool {
    file.ends_with(".index.json")
}

/// The shard files a `model.safetensors.index.json` (or `pytorch_model.bin.index.json`) names
/// (its `weight_map`'s values), each once, in first-seen order; each must be a plain file name
/// of the index's kind (`.safetensors`, or `.bin`), since it becomes a path beside the index.
pub fn shard_names(index: &Path) -> Result<Vec<String>> {
    let extension = if index.to_string_lossy().ends_with(".bin.index.json") { ".bin" } else { ".safetensors" };
    let bad = |what: String| Error::new(ErrorKind::BadWeights, format!("read shard index {}: {what}", index.display()));
    let text = std::fs::read_to_string(index).map_err(|e| bad(e.to_string()))?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(format!("it is not JSON: {e}")))?;
    let map =
        value.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| bad("it has no `weight_map`".into()))?;
    let mut names: Vec<String> = Vec::new();
    for (tensor, file) in map {
        let file = file.as_str().ok_or_else(|| bad(format!("`weight_map` gives `{tensor}` no file name")))?;
        let plain = !file.is_empty()
            && !file.starts_with('.')
            && file.ends_with(extension)
            && file.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !plain {
            return Err(bad(format!(
                "`weight_map` names the file {file:?} for `{tensor}`: not a plain {extension} file name"
            )));
        }
        if !names.iter().any(|n| n == file) {
            names.push(file.to_string());
        }
    }
    if names.is_empty() {
        return Err(bad("its `weight_map` names no tensor".into()));
    }
    Ok(names)
}
