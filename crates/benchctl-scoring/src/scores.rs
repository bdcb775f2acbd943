//! The ragged N×K×L score tensor a model produces for a suite.

use crate::{Error, Result, Truth};

/// Scores of one item: row k holds image k's score against each of the L texts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreMatrix<'a> {
    images: usize,
    texts: usize,
    values: &'a [f32],
}

impl<'a> ScoreMatrix<'a> {
    pub fn new(images: usize, texts: usize, values: &'a [f32]) -> Result<Self> {
        if values.len() != images * texts {
            return Err(Error::new(format!(
                "a {images}×{texts} score matrix needs {} values, got {}",
                images * texts,
                values.len()
            )));
        }
        Ok(Self { images, texts, values })
    }

    pub fn images(&self) -> usize {
        self.images
    }

    pub fn texts(&self) -> usize {
        self.texts
    }

    /// s(image, text).
    pub fn get(&self, image: usize, text: usize) -> f32 {
        self.values[image * self.texts + text]
    }

    pub fn values(&self) -> &'a [f32] {
        self.values
    }

    /// Row k as a slice: image k against every text.
    pub fn row(&self, image: usize) -> &'a [f32] {
        &self.values[image * self.texts..(image + 1) * self.texts]
    }
}

/// What a score means, which decides the metrics that apply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ScoreKind {
    /// Any real number; only the order matters (CLIP logits, cosine similarities).
    #[default]
    Similarity,
    /// A match probability in [0, 1] (scores made elsewhere): thresholds apply too. Saturated
    /// probabilities (exactly 1.0 or 0.0 in f32) tie, and ties count against the model:
    /// models in the zoo therefore report [`ScoreKind::Logit`].
    Probability,
    /// The log-odds of a match probability (SigLIP's `scale · cos + bias`, BLIP ITM's
    /// `l1 − l0`): compared as they are, so a wide margin never becomes a tie by saturation;
    /// thresholds apply to `σ(logit)`, computed in f32 as the reference pipelines compute the
    /// probability ([`ScoreKind::probability`]).
    Logit,
}

impl ScoreKind {
    /// Whether the scores are (or stand for) match probabilities, so thresholds apply.
    pub fn has_probability(self) -> bool {
        matches!(self, ScoreKind::Probability | ScoreKind::Logit)
    }

    /// The match probability of a score of this kind: itself, or `1 / (1 + e^(−x))` in f32
    /// (torch's `sigmoid`); `None` for similarities.
    pub fn probability(self, score: f32) -> Option<f32> {
        match self {
            ScoreKind::Similarity => None,
            ScoreKind::Probability => Some(score),
            ScoreKind::Logit => Some(1.0 / (1.0 + (-score).exp())),
        }
    }

    /// The name stored in run records.
    pub fn name(self) -> &'static str {
        match self {
            ScoreKind::Similarity => "similarity",
            ScoreKind::Probability => "probability",
            ScoreKind::Logit => "logit",
        }
    }

    /// From [`ScoreKind::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        [ScoreKind::Similarity, ScoreKind::Probability, ScoreKind::Logit].into_iter().find(|k| k.name() == name)
    }
}

/// N items' score matrices, stored contiguously. Items may differ in K and L.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScoreTensor {
    shapes: Vec<(usize, usize)>,
    offsets: Vec<usize>,
    values: Vec<f32>,
    kind: ScoreKind,
}

impl ScoreTensor {
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty tensor of match probabilities: values outside [0, 1] are rejected.
    pub fn probabilities() -> Self {
        Self::of_kind(ScoreKind::Probability)
    }

    /// An empty tensor of scores of this kind.
    pub fn of_kind(kind: ScoreKind) -> Self {
        Self { kind, ..Self::default() }
    }

    pub fn kind(&self) -> ScoreKind {
        self.kind
    }

    /// Appends one item's K×L scores (row-major). NaN is rejected: it has no order.
    pub fn push(&mut self, images: usize, texts: usize, values: &[f32]) -> Result<()> {
        ScoreMatrix::new(images, texts, values)?;
        if let Some(pos) = values.iter().position(|v| v.is_nan()) {
            return Err(Error::new(format!(
                "score of item {} at position {pos} is NaN",
                self.shapes.len()
            )));
        }
        if self.kind == ScoreKind::Logit {
            if let Some(pos) = values.iter().position(|v| !v.is_finite()) {
                return Err(Error::new(format!(
                    "score of item {} at position {pos} is {}, not a finite logit",
                    self.shapes.len(),
                    values[pos]
                )));
            }
        }
        if self.kind == ScoreKind::Probability {
            if let Some(pos) = values.iter().position(|v| !(0.0..=1.0).contains(v)) {
                return Err(Error::new(format!(
                    "score of item {} at position {pos} is {}, not a probability",
                    self.shapes.len(),
                    values[pos]
                )));
            }
        }
        self.offsets.push(self.values.len());
        self.shapes.push((images, texts));
        self.values.extend_from_slice(values);
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.shapes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.shapes.is_empty()
    }

    pub fn item(&self, index: usize) -> ScoreMatrix<'_> {
        let (images, texts) = self.shapes[index];
        let start = self.offsets[index];
        ScoreMatrix { images, texts, values: &self.values[start..start + images * texts] }
    }

    pub fn iter(&self) -> impl Iterator<Item = ScoreMatrix<'_>> + '_ {
        (0..self.len()).map(|i| self.item(i))
    }

    /// Checks that item i's scores have the shape of truth i.
    pub fn check_against(&self, truths: &[&Truth]) -> Result<()> {
        if truths.len() != self.len() {
            return Err(Error::new(format!(
                "{} items need scores, got scores for {}",
                truths.len(),
                self.len()
            )));
        }
        for (i, (truth, shape)) in truths.iter().zip(&self.shapes).enumerate() {
            if (truth.images(), truth.texts()) != *shape {
                return Err(Error::new(format!(
                    "item {i} has {}×{} candidates but its scores are {}×{}",
                    truth.images(),
                    truth.texts(),
                    shape.0,
                    shape.1
                )));
            }
        }
        Ok(())
    }
}
