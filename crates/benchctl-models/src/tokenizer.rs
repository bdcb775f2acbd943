//! Tokenisation through `tokenizer.json` files, with each model family's conventions:
//! [`ClipTokenizer`] (CLIP, OpenCLIP), [`SiglipTokenizer`], [`Siglip2Tokenizer`], [`BertTokenizer`] (BLIP) and
//! [`RobertaTokenizer`] (FIBER).
//!
//! CLIP tokenisation through a `tokenizer.json` (Hugging Face `tokenizers` format):
//! byte-level BPE over OpenAI's 49,408-token vocabulary, `<|startoftext|>` … `<|endoftext|>`,
//! truncated to the context length keeping the end token, as `CLIPTokenizer(...,
//! truncation=True, max_length=77)` does.
//!
//! A caption is cleaned before `tokenizer.json` sees it, as the family's reference cleans it
//! ([`CaptionCleaning`]): OpenCLIP checkpoints as open_clip does (`ftfy.fix_text`, HTML
//! references unescaped twice, whitespace collapsed: [`crate::text_clean`]);
//! `transformers`-layout CLIP checkpoints with HTML references unescaped twice, as Python's
//! `html.unescape` reads them (OpenAI's tokenizer does that; `transformers`' fast tokenizer
//! applies neither).

use std::path::Path;

use crate::architecture::TextPrep;
use crate::text_clean;
use crate::{Error, ErrorKind, Result};

/// A CLIP tokenizer with its context length and its caption cleaning.
#[derive(Clone)]
pub struct ClipTokenizer {
    inner: tokenizers::Tokenizer,
    max_len: usize,
    /// The start token; none for a vocabulary without one (mT5's).
    bos: Option<u32>,
    eos: u32,
    cleaning: CaptionCleaning,
    cleaner: text_clean::TextCleaner,
}

/// How a CLIP family's reference cleans a caption before tokenising it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptionCleaning {
    /// HTML references unescaped twice (Python's `html.unescape`).
    HtmlReferences,
    /// open_clip's `whitespace_clean(basic_clean(text)).lower()`: ftfy's `fix_text`, HTML
    /// references unescaped twice, whitespace collapsed
    /// ([`crate::text_clean::TextCleaner::open_clip_clean`]),
    /// lower-cased as Python does (a final sigma as `ς`, which `tokenizer.json`'s per-character
    /// lower-casing does not know).
    OpenClip,
    /// The caption as written (`transformers`' tokenizers clean nothing).
    AsWritten,
}

impl CaptionCleaning {
    /// `text` as the reference hands it to its BPE (`tokenizer.json`'s normaliser then
    /// lower-cases it, again for OpenCLIP).
    pub fn apply<'a>(self, cleaner: &text_clean::TextCleaner, text: &'a str) -> std::borrow::Cow<'a, str> {
        match self {
            CaptionCleaning::HtmlReferences if !text.contains('&') => std::borrow::Cow::Borrowed(text),
            CaptionCleaning::HtmlReferences => {
                std::borrow::Cow::Owned(cleaner.html_unescape(&cleaner.html_unescape(text)))
            }
            CaptionCleaning::OpenClip => std::borrow::Cow::Owned(cleaner.open_clip_clean(text).to_lowercase()),
            CaptionCleaning::AsWritten => std::borrow::Cow::Borrowed(text),
        }
    }
}

/// The token a [`ClipTokenizer`] opens every text with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartToken<'a> {
    /// This token, which the vocabulary must have.
    Required(&'a str),
    /// This token where the vocabulary has it, else none (MetaCLIP 2: XLM-V's `<s>`; mT5 has none).
    IfInVocabulary(&'a str),
}

impl std::fmt::Debug for ClipTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClipTokenizer").field("max_len", &self.max_len).finish()
    }
}

pub const START_OF_TEXT: &str = "<|startoftext|>";
pub const END_OF_TEXT: &str = "<|endoftext|>";

/// `tokenizer.json` read once, for a family whose tokenizer depends on what it holds (SigLIP's
/// two vocabularies).
pub fn open(path: &Path) -> Result<tokenizers::Tokenizer> {
    tokenizers::Tokenizer::from_file(path)
        .map_err(|e| Error::new(ErrorKind::Tokenizer, format!("load tokenizer {}: {e}", path.display())))
}

fn special(inner: &tokenizers::Tokenizer, path: &Path, name: &str) -> Result<u32> {
    inner.token_to_id(name).ok_or_else(|| {
        Error::new(ErrorKind::Tokenizer, format!("load tokenizer {}: it has no `{name}` token", path.display()))
    })
}

fn check_len(max_len: usize) -> Result<()> {
    if max_len < 2 {
        return Err(Error::new(
            ErrorKind::Tokenizer,
            format!("use a context length of {max_len}: at least 2 is needed"),
        ));
    }
    Ok(())
}

fn body_ids(inner: &tokenizers::Tokenizer, text: &str) -> Result<Vec<u32>> {
    inner
        .encode(text, false)
        .map(|e| e.get_ids().to_vec())
        .map_err(|e| Error::new(ErrorKind::Tokenizer, format!("tokenise {text:?}: {e}")))
}

impl ClipTokenizer {
    /// Loads `tokenizer.json`; `max_len` is the text model's `max_position_embeddings`.
    pub fn from_file(path: &Path, max_len: usize, cleaning: CaptionCleaning) -> Result<Self> {
        Self::with_specials(path, max_len, cleaning, StartToken::Required(START_OF_TEXT), END_OF_TEXT)
    }

    /// The same with other start and end tokens (`<s>`, `</s>` for MetaCLIP 2's XLM-V
    /// vocabulary; no start token and `</s>` for its mT5 one).
    pub fn with_specials(
        path: &Path,
        max_len: usize,
        cleaning: CaptionCleaning,
        start: StartToken<'_>,
        end: &str,
    ) -> Result<Self> {
        let inner = open(path)?;
        let bos = match start {
            StartToken::Required(start) => Some(special(&inner, path, start)?),
            StartToken::IfInVocabulary(start) => inner.token_to_id(start),
        };
        let eos = special(&inner, path, end)?;
        check_len(max_len)?;
        Ok(Self { inner, max_len, bos, eos, cleaning, cleaner: text_clean::TextCleaner::new()? })
    }

    pub fn eos(&self) -> u32 {
        self.eos
    }

    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// The text's tokens the context holds besides the special ones.
    fn room(&self) -> usize {
        self.max_len - 1 - usize::from(self.bos.is_some())
    }

    /// How many of the text's tokens [`ClipTokenizer::encode`] drops to fit the context.
    pub fn tokens_cut(&self, text: &str) -> Result<usize> {
        let body = body_ids(&self.inner, &self.cleaning.apply(&self.cleaner, text))?;
        Ok(body.len().saturating_sub(self.room()))
    }

    /// `[bos, tokens…, eos]` (no `bos` where the vocabulary has none), at most `max_len` ids;
    /// a longer text keeps its first tokens and the end token.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let body = body_ids(&self.inner, &self.cleaning.apply(&self.cleaner, text))?;
        let keep = body.len().min(self.room());
        let mut ids = Vec::with_capacity(keep + 2);
        ids.extend(self.bos);
        ids.extend_from_slice(&body[..keep]);
        ids.push(self.eos);
        Ok(ids)
    }
}

/// SigLIP's tokenizer (`SiglipTokenizer`): the text is canonicalised as big_vision does
/// (lower-cased, ASCII punctuation removed, whitespace runs collapsed and trimmed), cut to
/// `max_len − 1` pieces, given `</s>`, and padded with `</s>` to exactly `max_len`: SigLIP
/// was trained on fixed-length texts and pools the last position, so the padding matters.
/// open_clip's SigLIP checkpoints canonicalise as open_clip does ([`open_clip_canonical`]:
/// ftfy and HTML references first, `_` a space) and tokenise the same way after.
#[derive(Clone)]
pub struct SiglipTokenizer {
    inner: tokenizers::Tokenizer,
    max_len: usize,
    eos: u32,
    pad: u32,
    /// open_clip's cleaner, or none for big_vision's canonicalisation as `transformers` has it.
    open_clip: Option<text_clean::TextCleaner>,
}

impl std::fmt::Debug for SiglipTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SiglipTokenizer").field("max_len", &self.max_len).finish()
    }
}

impl SiglipTokenizer {
    /// Loads `tokenizer.json` (a sentencepiece vocabulary converted by `transformers`); the
    /// padding token is `</s>` as in `SiglipTokenizer`, unless `pad_id` says otherwise.
    pub fn from_file(path: &Path, max_len: usize, pad_id: Option<u32>) -> Result<Self> {
        Self::from_tokenizer(open(path)?, path, max_len, pad_id)
    }

    /// The same from `path`'s tokenizer, already read.
    pub fn from_tokenizer(
        inner: tokenizers::Tokenizer,
        path: &Path,
        max_len: usize,
        pad_id: Option<u32>,
    ) -> Result<Self> {
        let eos = special(&inner, path, "</s>")?;
        check_len(max_len)?;
        Ok(Self { inner, max_len, eos, pad: pad_id.unwrap_or(eos), open_clip: None })
    }

    /// The same canonicalising captions as open_clip does (`HFTokenizer(clean="canonicalize")`).
    pub fn with_open_clip_cleaning(self) -> Result<Self> {
        Ok(Self { open_clip: Some(text_clean::TextCleaner::new()?), ..self })
    }

    /// The text as it is tokenised.
    fn canonical(&self, text: &str) -> String {
        match &self.open_clip {
            Some(cleaner) => open_clip_canonical(cleaner, text),
            None => siglip_canonical(text),
        }
    }

    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// How many of the text's pieces [`SiglipTokenizer::encode`] drops to fit the context.
    pub fn tokens_cut(&self, text: &str) -> Result<usize> {
        Ok(body_ids(&self.inner, &self.canonical(text))?.len().saturating_sub(self.max_len - 1))
    }

    /// `canonical(text)` pieces, `</s>`, then padding: always `max_len` ids.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let mut ids = body_ids(&self.inner, &self.canonical(text))?;
        ids.truncate(self.max_len - 1);
        ids.push(self.eos);
        ids.resize(self.max_len, self.pad);
        Ok(ids)
    }
}

/// big_vision's `canonicalize_text`: lower case, no ASCII punctuation, single spaces.
pub fn siglip_canonical(text: &str) -> String {
    let kept: String = text.to_lowercase().chars().filter(|c| !c.is_ascii_punctuation()).collect();
    kept.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// big_vision's `canonicalize_text` as open_clip writes it (`_` becomes a space first, so
/// `snake_case` keeps two words), applied after open_clip's `basic_clean`: ftfy's `fix_text`,
/// HTML references unescaped twice, whitespace collapsed ([`text_clean::TextCleaner::open_clip_clean`]).
pub fn open_clip_canonical(cleaner: &text_clean::TextCleaner, text: &str) -> String {
    let cleaned = cleaner.open_clip_clean(text).replace('_', " ");
    let kept: String = cleaned.chars().filter(|c| !c.is_ascii_punctuation()).collect();
    text_clean::whitespace_clean(&kept.to_lowercase())
}

/// SigLIP 2's Gemma tokenizer (pad 0, eos 1), fitting captions to the fixed context one of two
/// ways ([`TextPrep`]):
/// - **authors'** (big_vision; open_clip's `HFTokenizer(clean="canonicalize")` on the
///   `timm/*-SigLIP2` tokenizers): [`open_clip_canonical`], the pieces cut to `max_len − 1`,
///   `<eos>`, padded on the right with `<pad>`;
/// - **transformers'** (the processor called as the model card says: `padding="max_length",
///   max_length=64, truncation=True`): the text as given, `tokenizer.json`'s own post-processor
///   (special tokens), truncation keeping them, padded on the side and with the token
///   `tokenizer_config.json` names (`GemmaTokenizer`'s own default is the left), lower-cased
///   first when it names `Siglip2Tokenizer` (as that class's normaliser does).
#[derive(Clone)]
pub struct Siglip2Tokenizer {
    inner: tokenizers::Tokenizer,
    max_len: usize,
    eos: u32,
    pad: u32,
    prep: TextPrep,
    cleaner: text_clean::TextCleaner,
}

impl std::fmt::Debug for Siglip2Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Siglip2Tokenizer").field("max_len", &self.max_len).field("prep", &self.prep).finish()
    }
}

/// The text of a token as `tokenizer_config.json` names one: the text itself, or an added
/// token's object (`{"content": …}`).
pub(crate) fn added_token_text(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(text) => Some(text.clone()),
        other => other.get("content").and_then(|c| c.as_str()).map(str::to_string),
    }
}

/// What transformers reads from `tokenizer_config.json` for the processor's call.
#[derive(Debug, Default, serde::Deserialize)]
struct TokenizerSettings {
    tokenizer_class: Option<String>,
    padding_side: Option<String>,
    pad_token: Option<serde_json::Value>,
}

/// The tokenizer classes whose own `padding_side` is the left (transformers 5).
const LEFT_PADDING_CLASSES: [&str; 4] =
    ["GemmaTokenizer", "GemmaTokenizerFast", "Siglip2Tokenizer", "Siglip2TokenizerFast"];

impl Siglip2Tokenizer {
    /// Whether `tokenizer.json` holds Gemma's vocabulary (`<eos>`, not T5's `</s>`): a SigLIP 2
    /// checkpoint in SigLIP's layout.
    pub fn is_gemma_vocabulary(inner: &tokenizers::Tokenizer) -> bool {
        inner.token_to_id("<eos>").is_some() && inner.token_to_id("</s>").is_none()
    }

    /// Loads `tokenizer.json`; the transformers preparation also reads `settings`
    /// (`tokenizer_config.json`), which it needs.
    pub fn from_file(path: &Path, settings: Option<&Path>, max_len: usize, prep: TextPrep) -> Result<Self> {
        Self::from_tokenizer(open(path)?, path, settings, max_len, prep)
    }

    /// The same from `path`'s tokenizer, already read.
    pub fn from_tokenizer(
        mut inner: tokenizers::Tokenizer,
        path: &Path,
        settings: Option<&Path>,
        max_len: usize,
        prep: TextPrep,
    ) -> Result<Self> {
        let eos = special(&inner, path, "<eos>")?;
        check_len(max_len)?;
        let mut pad = special(&inner, path, "<pad>")?;
        if prep == TextPrep::Transformers {
            let settings_path = settings.ok_or_else(|| {
                Error::new(
                    ErrorKind::MissingFile,
                    format!(
                        "prepare captions as transformers does: it reads tokenizer_config.json, which is not beside {}",
                        path.display()
                    ),
                )
            })?;
            pad = Self::configure_as_transformers(&mut inner, settings_path, max_len)?;
        }
        Ok(Self { inner, max_len, eos, pad, prep, cleaner: text_clean::TextCleaner::new()? })
    }

    /// Sets `inner`'s truncation, padding and normaliser as transformers' tokenizer class
    /// builds them from `settings`; returns the padding id.
    fn configure_as_transformers(
        inner: &mut tokenizers::Tokenizer,
        settings_path: &Path,
        max_len: usize,
    ) -> Result<u32> {
        let fail = |what: String| {
            Error::new(ErrorKind::Tokenizer, format!("read tokenizer settings {}: {what}", settings_path.display()))
        };
        let text = std::fs::read_to_string(settings_path).map_err(|e| fail(e.to_string()))?;
        let settings: TokenizerSettings =
            serde_json::from_str(&text).map_err(|e| fail(format!("it is not a tokenizer_config.json: {e}")))?;
        let class = settings.tokenizer_class.unwrap_or_default();
        let left = match settings.padding_side.as_deref() {
            Some("left") => true,
            Some("right") => false,
            Some(other) => return Err(fail(format!("`padding_side` is {other:?}, not \"left\" or \"right\""))),
            None => LEFT_PADDING_CLASSES.contains(&class.as_str()),
        };
        let pad_token = match &settings.pad_token {
            None => "<pad>".to_string(),
            Some(value) => match added_token_text(value) {
                Some(text) => text,
                None if value.is_object() => "<pad>".to_string(),
                None => return Err(fail(format!("`pad_token` is {value}, not a token"))),
            },
        };
        let pad_id = inner
            .token_to_id(&pad_token)
            .ok_or_else(|| fail(format!("its `pad_token` {pad_token:?} is not in the vocabulary")))?;
        if class.starts_with("Siglip2Tokenizer") {
            let lower = tokenizers::NormalizerWrapper::Lowercase(tokenizers::normalizers::Lowercase);
            let chain = match inner.get_normalizer().cloned() {
                Some(existing) => tokenizers::normalizers::Sequence::new(vec![lower, existing]).into(),
                None => lower,
            };
            inner.with_normalizer(Some(chain)).map_err(|e| fail(e.to_string()))?;
        }
        let truncation = tokenizers::TruncationParams { max_length: max_len, ..Default::default() };
        inner.with_truncation(Some(truncation)).map_err(|e| fail(e.to_string()))?;
        inner.with_padding(Some(tokenizers::PaddingParams {
            strategy: tokenizers::PaddingStrategy::Fixed(max_len),
            direction: if left { tokenizers::PaddingDirection::Left } else { tokenizers::PaddingDirection::Right },
            pad_id,
            pad_token,
            ..Default::default()
        }));
        Ok(pad_id)
    }

    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// The preparation it applies.
    pub fn prep(&self) -> TextPrep {
        self.prep
    }

    /// The text as the authors' preparation hands it to the tokenizer.
    pub fn canonical(&self, text: &str) -> String {
        open_clip_canonical(&self.cleaner, text)
    }

    /// How many of the text's pieces [`Siglip2Tokenizer::encode`] drops to fit the context.
    pub fn tokens_cut(&self, text: &str) -> Result<usize> {
        match self.prep {
            TextPrep::Authors => {
                Ok(body_ids(&self.inner, &self.canonical(text))?.len().saturating_sub(self.max_len - 1))
            }
            TextPrep::Transformers => {
                let encoding = self.transformers_encoding(text)?;
                Ok(encoding.get_overflowing().iter().map(|o| o.get_ids().len()).sum())
            }
        }
    }

    fn transformers_encoding(&self, text: &str) -> Result<tokenizers::Encoding> {
        self.inner.encode(text, true).map_err(|e| Error::new(ErrorKind::Tokenizer, format!("tokenise {text:?}: {e}")))
    }

    /// Exactly `max_len` ids.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match self.prep {
            TextPrep::Authors => {
                let mut ids = body_ids(&self.inner, &self.canonical(text))?;
                ids.truncate(self.max_len - 1);
                ids.push(self.eos);
                ids.resize(self.max_len, self.pad);
                Ok(ids)
            }
            TextPrep::Transformers => Ok(self.transformers_encoding(text)?.get_ids().to_vec()),
        }
    }

    /// [`Siglip2Tokenizer::encode`]'s ids and the attention mask `transformers`' processor
    /// returns beside them (1 for a token, 0 for padding; Gemma's tokenizers list
    /// `attention_mask` among their outputs, and `model(**inputs)` hides the padding with it).
    /// The authors' preparation has none: big_vision attends to the padding.
    pub fn encode_with_mask(&self, text: &str) -> Result<(Vec<u32>, Option<Vec<u32>>)> {
        match self.prep {
            TextPrep::Authors => Ok((self.encode(text)?, None)),
            TextPrep::Transformers => {
                let encoding = self.transformers_encoding(text)?;
                Ok((encoding.get_ids().to_vec(), Some(encoding.get_attention_mask().to_vec())))
            }
        }
    }
}

/// BERT WordPiece tokenisation as BLIP uses it: `tokenizer.json` adds `[CLS]` … `[SEP]` and
/// lower-cases; texts are cut to `max_len` ids keeping `[SEP]` (BLIP's retrieval evaluation
/// uses 35).
#[derive(Clone)]
pub struct BertTokenizer {
    inner: tokenizers::Tokenizer,
    max_len: usize,
    cls: u32,
    sep: u32,
}

impl std::fmt::Debug for BertTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BertTokenizer").field("max_len", &self.max_len).finish()
    }
}

impl BertTokenizer {
    pub fn from_file(path: &Path, max_len: usize) -> Result<Self> {
        let inner = open(path)?;
        let cls = special(&inner, path, "[CLS]")?;
        let sep = special(&inner, path, "[SEP]")?;
        check_len(max_len)?;
        Ok(Self { inner, max_len, cls, sep })
    }

    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// How many of the text's pieces [`BertTokenizer::encode`] drops to fit the context.
    pub fn tokens_cut(&self, text: &str) -> Result<usize> {
        Ok(body_ids(&self.inner, text)?.len().saturating_sub(self.max_len - 2))
    }

    /// `[CLS] pieces… [SEP]`, at most `max_len` ids.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let body = body_ids(&self.inner, text)?;
        let keep = body.len().min(self.max_len - 2);
        let mut ids = Vec::with_capacity(keep + 2);
        ids.push(self.cls);
        ids.extend_from_slice(&body[..keep]);
        ids.push(self.sep);
        Ok(ids)
    }
}

/// RoBERTa's byte-level BPE as FIBER calls it (`RobertaTokenizer(text, truncation=True,
/// max_length=max_text_len)`): `<s> pieces… </s>`, cut to `max_len` ids keeping `</s>`, no
/// prefix space. Read from a `tokenizer.json`, or from the `vocab.json` + `merges.txt` pair
/// that `RobertaTokenizer` itself reads (the special tokens `<s>`, `</s>`, `<pad>`, `<unk>`,
/// `<mask>` are split out of the text as the slow tokenizer does).
#[derive(Clone)]
pub struct RobertaTokenizer {
    inner: tokenizers::Tokenizer,
    max_len: usize,
    bos: u32,
    eos: u32,
    pad: u32,
}

impl std::fmt::Debug for RobertaTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RobertaTokenizer").field("max_len", &self.max_len).finish()
    }
}

/// RoBERTa's special tokens, in `RobertaTokenizer`'s order.
const ROBERTA_SPECIALS: [&str; 5] = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"];

/// Every merge of `merges` joins two tokens of `vocab` into a third: `tokenizers` assumes so
/// (a merge longer than every token overruns its buffer), so a file that breaks it is an
/// error naming the line, not a crash.
fn check_merges(vocab: &Path, merges: &Path) -> Result<()> {
    let fail = |file: &Path, what: String| {
        Error::new(ErrorKind::Tokenizer, format!("load tokenizer {}: {what}", file.display()))
    };
    let vocab_bytes = std::fs::read(vocab).map_err(|e| fail(vocab, e.to_string()))?;
    let tokens: std::collections::HashMap<String, u32> =
        serde_json::from_slice(&vocab_bytes).map_err(|e| fail(vocab, format!("it is not a token → id map: {e}")))?;
    let text = std::fs::read_to_string(merges).map_err(|e| fail(merges, e.to_string()))?;
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.starts_with("#version")) {
        let (a, b) = line.split_once(' ').filter(|(_, b)| !b.contains(' ')).ok_or_else(|| {
            fail(merges, format!("line {}: a merge is two tokens separated by one space, got {line:?}", n + 1))
        })?;
        if let Some(missing) =
            [a.to_string(), b.to_string(), format!("{a}{b}")].into_iter().find(|t| !tokens.contains_key(t))
        {
            return Err(fail(
                merges,
                format!("line {}: the merge {line:?} needs `{missing}`, which {} lacks", n + 1, vocab.display()),
            ));
        }
    }
    Ok(())
}

impl RobertaTokenizer {
    /// `path` is a `tokenizer.json`, or a `vocab.json` with `merges.txt` beside it.
    pub fn from_file(path: &Path, max_len: usize) -> Result<Self> {
        let inner = if path.file_name().is_some_and(|n| n == "vocab.json") {
            let merges = path.with_file_name("merges.txt");
            let fail = |e: String| Error::new(ErrorKind::Tokenizer, format!("load tokenizer {}: {e}", path.display()));
            let (Some(vocab), Some(merges_str)) = (path.to_str(), merges.to_str()) else {
                return Err(fail("its path is not UTF-8".into()));
            };
            if !merges.is_file() {
                return Err(fail(format!("{} is missing beside it", merges.display())));
            }
            check_merges(path, &merges)?;
            let bpe =
                tokenizers::models::bpe::BPE::from_file(vocab, merges_str).build().map_err(|e| fail(e.to_string()))?;
            let mut inner = tokenizers::Tokenizer::new(bpe);
            let byte_level = tokenizers::pre_tokenizers::byte_level::ByteLevel::default().add_prefix_space(false);
            inner.with_pre_tokenizer(Some(byte_level));
            inner.with_decoder(Some(byte_level));
            // `<mask>` takes the space before it, as `RobertaTokenizer` declares it (`lstrip=True`).
            let specials: Vec<tokenizers::AddedToken> = ROBERTA_SPECIALS
                .iter()
                .map(|t| tokenizers::AddedToken::from(*t, true).lstrip(*t == "<mask>"))
                .collect();
            inner.add_special_tokens(specials).map_err(|e| fail(e.to_string()))?;
            inner
        } else {
            open(path)?
        };
        let bos = special(&inner, path, "<s>")?;
        let eos = special(&inner, path, "</s>")?;
        let pad = special(&inner, path, "<pad>")?;
        check_len(max_len)?;
        Ok(Self { inner, max_len, bos, eos, pad })
    }

    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// The padding id (`<pad>`, 1 in roberta-base).
    pub fn pad(&self) -> u32 {
        self.pad
    }

    /// How many of the text's pieces [`RobertaTokenizer::encode`] drops to fit the context.
    pub fn tokens_cut(&self, text: &str) -> Result<usize> {
        Ok(self.body(text)?.len().saturating_sub(self.max_len - 2))
    }

    fn body(&self, text: &str) -> Result<Vec<u32>> {
        // A `tokenizer.json` may carry RoBERTa's post-processor; the ids without special
        // tokens are the same either way.
        body_ids(&self.inner, text)
    }

    /// `<s> pieces… </s>`, at most `max_len` ids.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let body = self.body(text)?;
        let keep = body.len().min(self.max_len - 2);
        let mut ids = Vec::with_capacity(keep + 2);
        ids.push(self.bos);
        ids.extend_from_slice(&body[..keep]);
        ids.push(self.eos);
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::CaptionCleaning;

    #[test]
    fn unescapes_entities_like_python() {
        let cleaner = crate::text_clean::TextCleaner::new().unwrap();
        let clean = |t: &str| CaptionCleaning::HtmlReferences.apply(&cleaner, t).into_owned();
        assert_eq!(clean("fish &amp; chips &lt;3"), "fish & chips <3");
        assert_eq!(clean("&#39;quoted&#x27; &quot;x&quot;"), "'quoted' \"x\"");
        assert_eq!(clean("AT&T & co &unknown; &"), "AT&T & co &unknown; &");
        assert_eq!(clean("&amp;amp;"), "&");
    }

    #[test]
    fn siglip_canonical_form_follows_big_vision() {
        use super::siglip_canonical;
        assert_eq!(siglip_canonical("  A Photo, of a CAT!!\t\n here. "), "a photo of a cat here");
        assert_eq!(siglip_canonical("dog's-ball_(2)"), "dogsball2");
        assert_eq!(siglip_canonical("café — ok"), "café — ok");
    }
}
