//! What an architecture declares about itself, once, beside its code: each module of
//! [`crate::models`] exports an [`Architecture`] (a `const`), and [`crate::registry`] lists them
//! in one table. Detection, the supported list in errors, loading, heads, file layout, default
//! preprocessing and caption limits all read the declaration; nothing else matches on an
//! architecture.

use candle_core::{DType, Device};

use crate::hub::{Layout, ModelFiles};
use crate::preprocess::{PixelBounds, Preprocessor};
use crate::vqascore::reply::ReplyReading;
use crate::vqascore::AnswerRule;
use crate::{Model, Result};

/// One architecture's facts and entry points.
pub struct ArchitectureSpec {
    /// Its name in run records, cache identities and `benchctl models`.
    pub name: &'static str,
    /// The `model_type`s of a `transformers` `config.json` it loads (none for a layout of its
    /// own, such as OpenCLIP's).
    pub model_types: &'static [&'static str],
    /// The files it is loaded from: a hub repo of a zoo entry downloads these; a directory
    /// whose config file is this layout's own (not `config.json`) is this architecture.
    pub layout: Layout,
    /// For a layout several architectures share (OpenCLIP's), the timm image towers it loads,
    /// by name prefix (`model_cfg.vision_cfg.timm_model_name`); none for the plain one.
    pub timm_towers: &'static [&'static str],
    /// Whether its checkpoints are released as PyTorch checkpoints without a `config.json`
    /// (FIBER's `.ckpt` files): such a file is this architecture.
    pub released_as_torch_checkpoint: bool,
    /// The score heads it offers, the default first.
    pub heads: &'static [ScoreHead],
    /// The caption preparations it offers, the authors' first; one where the libraries agree.
    pub text_preps: &'static [TextPrep],
    /// The preprocessing of its checkpoints at an image size, for benchmarks that run without
    /// the checkpoint's files; `None` where it comes only from a checkpoint's config.
    pub default_preprocessor: fn(size: usize) -> Option<Preprocessor>,
    /// How its tokenizer fits captions to its context, from config and tokenizer alone.
    pub caption_limit: fn(&ModelFiles, TextPrep) -> Result<CaptionLimit>,
    /// Loads a model of this architecture scoring with a head of [`ArchitectureSpec::heads`],
    /// preparing captions one of [`ArchitectureSpec::text_preps`]' ways.
    pub load: fn(LoadChoice, &ModelFiles, DType, &Device) -> Result<Model>,
    /// The towers `benchctl bench --part image|text` builds with random weights for a config of
    /// this architecture.
    pub bench_towers: BenchTowers,
    /// Its reference retrieval evaluation cleans captions with BLIP's `pre_caption` (what
    /// RoCOCO's `--caption-normalisation auto` follows).
    pub pre_captions: bool,
    /// Whether its image processor has a patch budget a run may set (`--max-patches`: SigLIP 2
    /// NaFlex's `max_num_patches`).
    pub patch_budget: bool,
    /// Whether its image processor resizes to pixel bounds a run may give (`--min-pixels`,
    /// `--max-pixels`: Qwen2.5-VL's and Qwen3-VL's, after `qwen_vl_utils`' resize).
    pub processor_pixels: bool,
    /// Whether its prompt takes several images shown together (a suite's `item.together`:
    /// VisMin's image task), [`crate::FusionEncoder::encode_shown_together`].
    pub images_together: bool,
    /// Whether it generates replies here (`--answer-rule generate`,
    /// [`crate::vqascore::generate`]): a generative family implementing
    /// [`crate::vqascore::local::LocalVqa`].
    pub generates_replies: bool,
}

/// Which random-weight towers `benchctl bench` builds for an architecture's config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchTowers {
    /// None: the architecture has its own benchmark part, or none.
    None,
    /// CLIP's, from a `transformers` `config.json` (`ClipConfig`): CLIP, MetaCLIP 2.
    Clip,
    /// SigLIP's (`SiglipConfig`): SigLIP, SigLIP 2 at fixed resolution.
    Siglip,
    /// SigLIP 2 NaFlex's (`Siglip2Config`), on square images filling the position grid.
    Siglip2Naflex,
    /// An open_clip checkpoint's with timm's `Eva` image tower (PE-Core, EVA02-CLIP), from its
    /// `open_clip_config.json`.
    TimmEva,
}

/// An architecture benchctl implements: a handle to its [`ArchitectureSpec`].
#[derive(Clone, Copy)]
pub struct Architecture(&'static ArchitectureSpec);

impl Architecture {
    /// The handle of a declaration (each model module's `ARCHITECTURE`). A family that
    /// generates replies must read its generation settings: a declaration whose layout does not
    /// ([`Layout::generation`]) fails to compile.
    pub const fn declare(spec: &'static ArchitectureSpec) -> Self {
        assert!(
            !spec.generates_replies || spec.layout.generation,
            "an architecture that generates replies needs a layout that reads generation_config.json"
        );
        Architecture(spec)
    }

    pub fn spec(self) -> &'static ArchitectureSpec {
        self.0
    }

    pub fn name(self) -> &'static str {
        self.0.name
    }

    /// The files this architecture is loaded from.
    pub fn layout(self) -> Layout {
        self.0.layout
    }

    /// The score heads it offers, the default first.
    pub fn heads(self) -> &'static [ScoreHead] {
        self.0.heads
    }

    /// The head to use: `requested` if the architecture has it, else its default.
    pub fn choose_head(self, requested: Option<&str>) -> Result<ScoreHead> {
        let heads = self.heads();
        match requested {
            None => Ok(heads[0]),
            Some(name) => ScoreHead::parse(name).filter(|h| heads.contains(h)).ok_or_else(|| {
                let names: Vec<&str> = heads.iter().map(ScoreHead::name).collect();
                crate::Error::new(
                    crate::ErrorKind::BadConfig,
                    format!("use --score {name}: a {} model offers {}", self.name(), names.join(", ")),
                )
            }),
        }
    }

    /// The preparation to use: `requested` if the architecture offers it, else the authors'.
    pub fn choose_text_prep(self, requested: Option<TextPrep>) -> Result<TextPrep> {
        let offered = self.0.text_preps;
        match requested {
            None => Ok(offered[0]),
            Some(prep) if offered.contains(&prep) => Ok(prep),
            Some(prep) => Err(crate::Error::new(
                crate::ErrorKind::BadConfig,
                format!(
                    "use --text-prep {}: a {} model prepares captions one way, its authors' (SigLIP 2 offers both)",
                    prep.name(),
                    self.name()
                ),
            )),
        }
    }

    /// `rule` where the architecture can answer by it: replies are generated only by the
    /// generative families that declare [`ArchitectureSpec::generates_replies`].
    pub fn choose_answer_rule(self, rule: AnswerRule) -> Result<AnswerRule> {
        match rule {
            AnswerRule::Generate if !self.0.generates_replies => Err(crate::Error::new(
                crate::ErrorKind::BadConfig,
                format!(
                    "use --answer-rule generate: a {} model generates no replies here (Gemma 3, PaliGemma, Qwen2.5-VL, Qwen3-VL and InternVL do; a server does through --endpoint)",
                    self.name()
                ),
            )),
            rule => Ok(rule),
        }
    }

    /// The patch budget to use: `requested` where the architecture has one (`None`: its
    /// checkpoint's own).
    pub fn choose_max_patches(self, requested: Option<usize>) -> Result<Option<usize>> {
        match requested {
            None => Ok(None),
            Some(0) => {
                Err(crate::Error::new(crate::ErrorKind::BadConfig, "use --max-patches 0: a budget is at least 1 patch"))
            }
            Some(n) if self.0.patch_budget => Ok(Some(n)),
            Some(n) => Err(crate::Error::new(
                crate::ErrorKind::BadConfig,
                format!(
                    "use --max-patches {n}: a {} model's images have a fixed size (SigLIP 2 NaFlex has a patch budget)",
                    self.name()
                ),
            )),
        }
    }

    /// The image processor's pixel bounds to resize to after `qwen_vl_utils`, where the
    /// architecture has them (`None`: no second resize, as `t2v_metrics` prepares images).
    pub fn choose_processor_pixels(self, requested: Option<PixelBounds>) -> Result<Option<PixelBounds>> {
        let refused = |why: String| {
            Err(crate::Error::new(crate::ErrorKind::BadConfig, format!("use --min-pixels and --max-pixels: {why}")))
        };
        match requested {
            None => Ok(None),
            Some(_) if !self.0.processor_pixels => refused(format!(
                "a {} model's image processor has no pixel bounds (Qwen2.5-VL's and Qwen3-VL's have)",
                self.name()
            )),
            Some(PixelBounds { min, max }) if min == 0 || min > max => refused(format!(
                "{min} to {max} pixels is no range (at least 1 pixel, the least no more than the most)"
            )),
            Some(bounds) => Ok(Some(bounds)),
        }
    }

    /// Loads a model of this architecture from its files, as `choice` says.
    pub fn load(self, choice: LoadChoice, files: &ModelFiles, dtype: DType, device: &Device) -> Result<Model> {
        (self.0.load)(choice, files, dtype, device)
    }

    /// The caption limit of a model of this architecture with these files.
    pub fn caption_limit(self, files: &ModelFiles, prep: TextPrep) -> Result<CaptionLimit> {
        (self.0.caption_limit)(files, prep)
    }
}

impl PartialEq for Architecture {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Architecture {}

impl std::fmt::Debug for Architecture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Which of a model's scores a run uses (`--score`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScoreHead {
    /// `exp(logit_scale) · cos`, CLIP's logits.
    Contrastive,
    /// `σ(exp(logit_scale) · cos + logit_bias)`, SigLIP's match probability.
    Sigmoid,
    /// Image-text matching: a fusion pass per pair, the match logit (BLIP, FIBER).
    Itm,
    /// Image-text contrastive: cosine of projected features (BLIP, FIBER).
    Itc,
    /// VQAScore: a generative model's `log P("Yes")` to "Does this figure show …?" (Gemma 3,
    /// or a model behind a server).
    Vqa,
}

impl ScoreHead {
    pub const ALL: [ScoreHead; 5] =
        [ScoreHead::Contrastive, ScoreHead::Sigmoid, ScoreHead::Itm, ScoreHead::Itc, ScoreHead::Vqa];

    pub fn name(&self) -> &'static str {
        match self {
            ScoreHead::Contrastive => "contrastive",
            ScoreHead::Sigmoid => "sigmoid",
            ScoreHead::Itm => "itm",
            ScoreHead::Itc => "itc",
            ScoreHead::Vqa => "vqascore",
        }
    }

    /// Whether the head scores each pair jointly (a [`crate::FusionEncoder`]) rather than
    /// from two embeddings (a [`crate::DualEncoder`]).
    pub fn is_fusion(&self) -> bool {
        matches!(self, ScoreHead::Itm | ScoreHead::Vqa)
    }

    /// `itm`, `itc`, or the default head's own name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|h| h.name() == name)
    }
}

/// How captions reach the tokenizer (`--text-prep`): as the model's authors prepared them in
/// training and evaluation, or as `transformers`' processor does when called as the model card
/// says. They differ for SigLIP 2 (docs/models.md, "Captions").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextPrep {
    /// The authors' (big_vision for SigLIP 2, as open_clip reproduces it).
    Authors,
    /// `transformers`' tokenizer and processor as the checkpoint's files configure them.
    Transformers,
}

impl TextPrep {
    pub const ALL: [TextPrep; 2] = [TextPrep::Authors, TextPrep::Transformers];
    /// Only the authors' preparation (the libraries agree, or only one publishes the family).
    pub const AUTHORS_ONLY: &'static [TextPrep] = &[TextPrep::Authors];

    pub fn name(self) -> &'static str {
        match self {
            TextPrep::Authors => "authors",
            TextPrep::Transformers => "transformers",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// What a run chooses of a model: its score head, caption preparation, patch budget and, for a
/// generative model, how its answer gives the score.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadChoice {
    pub head: ScoreHead,
    pub text_prep: TextPrep,
    /// The image processor's patch budget instead of the checkpoint's (`--max-patches`), where
    /// the architecture has one ([`ArchitectureSpec::patch_budget`]).
    pub max_patches: Option<usize>,
    /// The answer's log-probability, or a reply generated
    /// ([`ArchitectureSpec::generates_replies`]) and read as `reply_reading` says.
    pub answer_rule: AnswerRule,
    pub reply_reading: ReplyReading,
    /// The image processor's pixel bounds after `qwen_vl_utils`' resize (`--min-pixels`,
    /// `--max-pixels`), where the architecture has them ([`ArchitectureSpec::processor_pixels`]).
    pub processor_pixels: Option<PixelBounds>,
}

impl LoadChoice {
    /// `head` with the authors' captions.
    pub fn head(head: ScoreHead) -> Self {
        LoadChoice {
            head,
            text_prep: TextPrep::Authors,
            max_patches: None,
            answer_rule: AnswerRule::Logprobs,
            reply_reading: ReplyReading::FirstFound,
            processor_pixels: None,
        }
    }
}

/// How a model's tokenizer fits captions to its context: read from its config and tokenizer
/// files alone (no weights), so a run that finds every embedding cached still counts the
/// captions its model truncates.
pub struct CaptionLimit {
    /// Tokens the context holds, special tokens included (CLIP 77, SigLIP 64, BLIP 35); 0
    /// when unknown.
    pub context: usize,
    cut: TokensCut,
}

/// A tokenizer's count of the tokens it drops from a caption.
type TokensCut = Box<dyn Fn(&str) -> Result<usize> + Send + Sync>;

impl CaptionLimit {
    /// A context of `context` tokens and the tokenizer's count of what it drops.
    pub fn new(context: usize, cut: impl Fn(&str) -> Result<usize> + Send + Sync + 'static) -> Self {
        CaptionLimit { context, cut: Box::new(cut) }
    }

    /// A context no caption outgrows (a generative model's prompt of a few hundred tokens in a
    /// context of thousands).
    pub fn never_cut(context: usize) -> Self {
        CaptionLimit::new(context, |_| Ok(0))
    }

    /// No limit known (a model behind a server, whose tokenizer benchctl does not have).
    pub fn unlimited() -> Self {
        CaptionLimit::never_cut(0)
    }

    /// The number of the caption's tokens the model's tokenizer drops (0 when it fits).
    pub fn tokens_cut(&self, caption: &str) -> Result<usize> {
        (self.cut)(caption)
    }
}

impl std::fmt::Debug for CaptionLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptionLimit").field("context", &self.context).finish()
    }
}
