//! What a cache folder's entries depend on besides their inputs, as one typed value: every
//! part of a model's (or a scoring server's) namespace named once, here. The folder is named
//! by the SHA-256 of the identity's canonical JSON ([`CacheIdentity::canonical`]), every
//! segment and record is checked against that hash, and the identity is written beside them
//! as `identity.json`, so a user can see what a folder holds.
//!
//! Changing what a key holds is a change to these structs (a new field changes every hash:
//! old folders are then simply not found, never served). A change that alters outputs without
//! a field to show it bumps `benchctl_models::OUTPUT_VERSION`.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The namespace of a cache folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CacheIdentity {
    /// Model files run here: embeddings, pair scores and the score head (boxed: it is the
    /// larger by far).
    Model(Box<ModelIdentity>),
    /// A scoring server: its answers.
    Endpoint(EndpointIdentity),
}

/// Everything a local model's embeddings and pair scores depend on besides their input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelIdentity {
    /// The code's output version (`benchctl_models::OUTPUT_VERSION`): bumped by any change
    /// to decoding, preprocessing, model code or kernels that alters an output.
    pub output_version: u32,
    /// The crate version of the benchctl that wrote the entries.
    pub benchctl_version: String,
    /// The zoo id, or the directory's name.
    pub model: String,
    /// A hub model's repository and resolved commit.
    pub repo: Option<String>,
    pub commit: Option<String>,
    /// The weights file: where it is, its size and modification time, so that a replaced
    /// file gets a new namespace.
    pub weights: FileStamp,
    pub dtype: String,
    pub device: String,
    pub architecture: String,
    /// The score head (`contrastive`, `itm`, …).
    pub head: String,
    /// The first 8 bytes (hex) of the SHA-256 of the config, tokenizer and image processor
    /// files: the preprocessing and the tokenizer follow from them.
    pub config: Option<String>,
    pub tokenizer: Option<String>,
    pub preprocessor: Option<String>,
    /// The JPEG decoder (`zune-jpeg`, or libjpeg-turbo's): their pixels differ by a level.
    pub jpeg_decoder: String,
    /// The caption preparation where it is not the authors' (`transformers`); the digest of
    /// the `tokenizer_config.json` that it, or the decoding of generated replies, reads;
    /// absent otherwise, so that the namespaces of earlier runs stay as they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_prep: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer_settings: Option<String>,
    /// The patch budget a run set (`--max-patches`); absent for the checkpoint's own, so that
    /// the namespaces of earlier runs stay as they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_patches: Option<usize>,
    /// The image processor's pixel bounds a run set (`--min-pixels`, `--max-pixels`), `[min,
    /// max]`; absent without a second resize, so that the namespaces of earlier runs stay as
    /// they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processor_pixels: Option<[usize; 2]>,
    /// For replies generated here (`--answer-rule generate`): the rule, how replies are read,
    /// and the digest of the checkpoint's `generation_config.json` (its stop tokens and
    /// repetition penalty); absent for log-probability runs, so that the namespaces of earlier
    /// runs stay as they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_rule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_reading: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<String>,
}

/// Where a file is, its size and its modification time in nanoseconds since the epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStamp {
    pub path: Option<String>,
    pub size: Option<u64>,
    pub modified_ns: Option<u64>,
}

impl FileStamp {
    /// The stamp of `path` now (fields it cannot read are absent).
    pub fn of(path: &Path) -> Self {
        let meta = std::fs::metadata(path).ok();
        FileStamp {
            path: path.canonicalize().ok().map(|p| p.display().to_string()),
            size: meta.as_ref().map(|m| m.len()),
            modified_ns: meta
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .and_then(|d| u64::try_from(d.as_nanos()).ok()),
        }
    }
}

/// Everything a scoring server's answers depend on besides the pair: the API key is not part
/// of it (the same server answers the same with any key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointIdentity {
    /// The chat-completions URL.
    pub url: String,
    pub served_model: String,
    pub question_template: String,
    pub answer_template: String,
    pub top_logprobs: u32,
    /// Where the image goes in each request.
    pub image_position: String,
    /// How an answer is read, where not by its log-probability (absent then, so that the
    /// identities, and the caches, of log-probability runs stay as they were).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_rule: Option<String>,
    /// How a generated reply is read, where not as NaturalBench's `extract_answer` (absent
    /// then, for the same reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_reading: Option<String>,
}

impl CacheIdentity {
    /// The canonical form the folder's name and every record's check are hashed from: JSON
    /// with the fields in their declared order.
    pub fn canonical(&self) -> String {
        // Serialising these plain structs cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// `identity.json`: the canonical form, pretty-printed for people.
    pub fn pretty(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// The first 8 bytes (hex) of the SHA-256 of a file's bytes; `None` when it cannot be read.
pub fn content_digest(path: &Path) -> Option<String> {
    std::fs::read(path).ok().map(|bytes| super::hex(&super::keys::KeyTag::Content.key(&[&bytes])[..8]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> ModelIdentity {
        ModelIdentity {
            output_version: 4,
            benchctl_version: "0.1.0".into(),
            model: "clip-vit-b32".into(),
            repo: Some("openai/clip-vit-base-patch32".into()),
            commit: Some("3d74acf9".into()),
            weights: FileStamp { path: Some("/w".into()), size: Some(1), modified_ns: Some(2) },
            dtype: "f32".into(),
            device: "cpu".into(),
            architecture: "clip".into(),
            head: "contrastive".into(),
            config: Some("aa".into()),
            tokenizer: Some("bb".into()),
            preprocessor: None,
            jpeg_decoder: "zune-jpeg".into(),
            text_prep: None,
            tokenizer_settings: None,
            max_patches: None,
            processor_pixels: None,
            answer_rule: None,
            reply_reading: None,
            generation: None,
        }
    }

    #[test]
    fn every_part_changes_the_canonical_form_and_it_reads_back() {
        let base = CacheIdentity::Model(Box::new(model()));
        let back: CacheIdentity = serde_json::from_str(&base.pretty()).unwrap();
        assert_eq!(back, base);
        let changed = [
            ModelIdentity { output_version: 5, ..model() },
            ModelIdentity { dtype: "bf16".into(), ..model() },
            ModelIdentity { head: "itc".into(), ..model() },
            ModelIdentity { preprocessor: Some("cc".into()), ..model() },
            ModelIdentity { weights: FileStamp { modified_ns: Some(3), ..model().weights }, ..model() },
            ModelIdentity { jpeg_decoder: "libjpeg-turbo".into(), ..model() },
            ModelIdentity { text_prep: Some("transformers".into()), ..model() },
            ModelIdentity { max_patches: Some(576), ..model() },
            ModelIdentity { processor_pixels: Some([200_704, 1_003_520]), ..model() },
            ModelIdentity { answer_rule: Some("generate".into()), ..model() },
            ModelIdentity { reply_reading: Some("label-in-reply".into()), ..model() },
            ModelIdentity { generation: Some("cc".into()), ..model() },
            ModelIdentity { tokenizer_settings: Some("dd".into()), ..model() },
        ];
        for other in changed {
            assert_ne!(CacheIdentity::Model(Box::new(other)).canonical(), base.canonical());
        }
        assert!(base.canonical().starts_with(r#"{"kind":"model","output_version":4,"#), "{}", base.canonical());
    }
}
