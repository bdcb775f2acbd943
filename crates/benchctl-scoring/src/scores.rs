//! The ragged N×K×L score tensor a model produces for a suite, and beside it, where a metric
//! compares texts with texts, each item's L×L text–text similarities.

use crate::{Error, Result, Truth};
use benchctl_base::spill::SpillVec;

/// Scores of one item: row k holds image k's score against each of the L texts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreMatrix<'a> {
    images: usize,
    texts: usize,
    values: &'a [f32],
    /// The scores at full precision, for scores read from elsewhere as f64.
    exact: Option<&'a [f64]>,
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
        Ok(Self { images, texts, values, exact: None })
    }

    pub fn images(&self) -> usize {
        self.images
    }

    pub fn texts(&self) -> usize {
        self.texts
    }

    /// s(image, text), at the precision the scores were given in (a model's f32, or an
    /// external file's f64): metrics compare these, so `0.25 + 1e-9` and `0.25` never tie.
    pub fn get(&self, image: usize, text: usize) -> f64 {
        let i = image * self.texts + text;
        match self.exact {
            Some(exact) => exact[i],
            None => f64::from(self.values[i]),
        }
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
    /// The natural log of a match probability, at most 0 (a generative model's VQAScore,
    /// `log P("Yes")`): compared as they are, so probabilities that round to 1.0 stay apart;
    /// thresholds apply to `exp(score)`.
    LogProbability,
}

impl ScoreKind {
    /// Every kind, in the order of their cache codes ([`ScoreKind::code`]).
    pub const ALL: [ScoreKind; 4] =
        [ScoreKind::Similarity, ScoreKind::Probability, ScoreKind::Logit, ScoreKind::LogProbability];

    /// A small number naming the kind where only numbers are stored (an embedding cache).
    pub fn code(self) -> f32 {
        ScoreKind::ALL.iter().position(|&k| k == self).unwrap_or_default() as f32
    }

    /// Whether the scores are (or stand for) match probabilities, so thresholds apply.
    pub fn has_probability(self) -> bool {
        !matches!(self, ScoreKind::Similarity)
    }

    /// The match probability of a score of this kind: itself, or `1 / (1 + e^(−x))` in f32
    /// (torch's `sigmoid`, as the reference computes a model's probability); `None` for
    /// similarities.
    pub fn probability(self, score: f64) -> Option<f64> {
        match self {
            ScoreKind::Similarity => None,
            ScoreKind::Probability => Some(score),
            ScoreKind::Logit => Some(f64::from(1.0 / (1.0 + (-(score as f32)).exp()))),
            ScoreKind::LogProbability => Some(score.exp()),
        }
    }

    /// The name stored in run records.
    pub fn name(self) -> &'static str {
        match self {
            ScoreKind::Similarity => "similarity",
            ScoreKind::Probability => "probability",
            ScoreKind::Logit => "logit",
            ScoreKind::LogProbability => "log-probability",
        }
    }

    /// From [`ScoreKind::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        ScoreKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// N items' score matrices, stored contiguously. Items may differ in K and L. All of it grows
/// with the suite, so it spills to a file past the memory budget ([`benchctl_base::spill`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScoreTensor {
    shapes: SpillVec<(usize, usize)>,
    offsets: SpillVec<usize>,
    values: SpillVec<f32>,
    /// Every value at f64 precision, once any item was pushed with [`ScoreTensor::push_exact`].
    exact: Option<SpillVec<f64>>,
    kind: ScoreKind,
    /// Each item's L×L text–text similarities (row i: text i against every text), where the
    /// model embeds texts on their own and the suite's metrics compare texts with texts
    /// (SugarCrepe++'s text-only task): either every item has them or none does.
    text: Option<Box<ScoreTensor>>,
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
        self.push_f32(images, texts, values, None)
    }

    /// Appends the scores of an item with `truth`: NaN exactly at the cells it does not ask
    /// ([`Truth::is_asked`]), which no model scored and no metric reads.
    pub fn push_asked(&mut self, truth: &Truth, values: &[f32]) -> Result<()> {
        self.push_f32(truth.images(), truth.texts(), values, Some(truth))
    }

    fn push_f32(&mut self, images: usize, texts: usize, values: &[f32], asked: Option<&Truth>) -> Result<()> {
        let wide: Vec<f64> = values.iter().map(|&v| f64::from(v)).collect();
        self.check(images, texts, &wide, asked)?;
        if let Some(exact) = &mut self.exact {
            exact.extend_from_slice(&wide);
        }
        self.offsets.push(self.values.len());
        self.shapes.push((images, texts));
        self.values.extend_from_slice(values);
        Ok(())
    }

    /// Appends one item's K×L scores given at f64 precision (scores made elsewhere), kept at
    /// that precision for the metrics. Every value must be finite: infinity has no margin and
    /// a value beyond f32's range must not become one.
    pub fn push_exact(&mut self, images: usize, texts: usize, values: &[f64]) -> Result<()> {
        self.push_f64(images, texts, values, None)
    }

    /// [`ScoreTensor::push_exact`] for an item with `truth`: NaN exactly at its unasked cells.
    pub fn push_exact_asked(&mut self, truth: &Truth, values: &[f64]) -> Result<()> {
        self.push_f64(truth.images(), truth.texts(), values, Some(truth))
    }

    fn push_f64(&mut self, images: usize, texts: usize, values: &[f64], asked: Option<&Truth>) -> Result<()> {
        let unasked = |pos: usize| asked.is_some_and(|t| !t.is_asked(pos / texts.max(1), pos % texts.max(1)));
        if let Some(pos) = values.iter().enumerate().position(|(pos, v)| !v.is_finite() && !unasked(pos)) {
            return Err(Error::new(format!(
                "score of item {} at position {pos} is {}, not a finite number",
                self.shapes.len(),
                values[pos]
            )));
        }
        self.check(images, texts, values, asked)?;
        let exact = self.exact.get_or_insert_with(|| self.values.iter().map(|&v| f64::from(v)).collect());
        exact.extend_from_slice(values);
        self.offsets.push(self.values.len());
        self.shapes.push((images, texts));
        self.values.extend(values.iter().map(|&v| v as f32));
        Ok(())
    }

    /// The shape and value checks every push makes; the cells `asked` leaves out must be NaN
    /// and are not checked further.
    fn check(&self, images: usize, texts: usize, values: &[f64], asked: Option<&Truth>) -> Result<()> {
        if values.len() != images * texts {
            return Err(Error::new(format!(
                "a {images}×{texts} score matrix needs {} values, got {}",
                images * texts,
                values.len()
            )));
        }
        let unasked = |pos: usize| asked.is_some_and(|t| !t.is_asked(pos / texts, pos % texts));
        if let Some(pos) = (0..values.len()).find(|&pos| values[pos].is_nan() != unasked(pos)) {
            let what = if unasked(pos) { "is not asked, so it must be NaN" } else { "is NaN" };
            return Err(Error::new(format!("score of item {} at position {pos} {what}", self.shapes.len())));
        }
        let values: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
        let values = values.as_slice();
        if self.kind == ScoreKind::Logit {
            if let Some(pos) = values.iter().position(|v| !v.is_finite()) {
                return Err(Error::new(format!(
                    "score of item {} at position {pos} is {}, not a finite logit",
                    self.shapes.len(),
                    values[pos]
                )));
            }
        }
        if self.kind == ScoreKind::LogProbability {
            if let Some(pos) = values.iter().position(|v| !(v.is_finite() && *v <= 0.0)) {
                return Err(Error::new(format!(
                    "score of item {} at position {pos} is {}, not the finite log of a probability",
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
        let range = start..start + images * texts;
        ScoreMatrix {
            images,
            texts,
            values: &self.values[range.clone()],
            exact: self.exact.as_ref().map(|e| &e[range]),
        }
    }

    /// The items at `order` (indices into this tensor), with their text scores: the same
    /// scores read in another order.
    pub fn reordered(&self, order: &[u32]) -> Self {
        let mut out = Self::of_kind(self.kind);
        if self.exact.is_some() {
            out.exact = Some(SpillVec::new());
        }
        for &i in order {
            let (images, texts) = self.shapes[i as usize];
            let start = self.offsets[i as usize];
            let range = start..start + images * texts;
            out.offsets.push(out.values.len());
            out.shapes.push((images, texts));
            out.values.extend_from_slice(&self.values[range.clone()]);
            if let (Some(to), Some(from)) = (&mut out.exact, &self.exact) {
                to.extend_from_slice(&from[range]);
            }
        }
        out.text = self.text.as_ref().filter(|t| t.len() == self.len()).map(|t| Box::new(t.reordered(order)));
        out
    }

    pub fn iter(&self) -> impl Iterator<Item = ScoreMatrix<'_>> + '_ {
        (0..self.len()).map(|i| self.item(i))
    }

    /// Appends the text–text similarities of the last item pushed: L×L values (row-major, row i
    /// text i against every text), finite, at f64 precision. Items pushed before the first
    /// call have none, so the tensor then holds them for no item and the call is refused.
    pub fn push_text_scores(&mut self, values: &[f64]) -> Result<()> {
        let Some(&(_, texts)) = self.shapes.last() else {
            return Err(Error::new("text scores need the item's scores first"));
        };
        let item = self.shapes.len() - 1;
        let text = self.text.get_or_insert_with(|| Box::new(ScoreTensor::of_kind(ScoreKind::Similarity)));
        if text.len() != item {
            return Err(Error::new(format!(
                "item {item} has text scores but {} earlier item(s) have none",
                item - text.len()
            )));
        }
        text.push_exact(texts, texts, values).map_err(|e| Error::new(format!("text scores of item {item}: {e}")))
    }

    /// Item `index`'s L×L text–text similarities, if the tensor holds them.
    pub fn text_scores(&self, index: usize) -> Option<ScoreMatrix<'_>> {
        self.text.as_ref().filter(|t| t.len() == self.len()).map(|t| t.item(index))
    }

    /// Checks that item i's scores have the shape of truth i.
    pub fn check_against<'t>(&self, truths: impl ExactSizeIterator<Item = &'t Truth>) -> Result<()> {
        if truths.len() != self.len() {
            return Err(Error::new(format!("{} items need scores, got scores for {}", truths.len(), self.len())));
        }
        if let Some(text) = &self.text {
            if text.len() != self.len() {
                return Err(Error::new(format!(
                    "{} items have scores but {} have text scores",
                    self.len(),
                    text.len()
                )));
            }
        }
        for (i, (truth, shape)) in truths.zip(self.shapes.iter()).enumerate() {
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
