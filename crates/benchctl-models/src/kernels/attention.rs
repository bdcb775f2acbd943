//! Self-attention straight from a fused q/k/v projection: text (causal mask), ViT, Swin
//! windows (relative-position bias and shift masks), and long sequences through the packed
//! GEMM.

use benchctl_cpu::{madd, per_tier, Tier};
use candle_core::{CpuStorage, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::activation::exp;
use super::{contiguous_f32, half_on_cpu, lanewise, widen};

/// Queries attended together: their logits and outputs are independent sums, so their chains
/// of fused multiply-adds overlap instead of waiting on one another (eight at once, over two
/// blocks of keys or values), and each key and value vector loaded serves four queries.
const QUERIES: usize = 4;

/// From this many keys on, an unmasked self-attention runs through the packed GEMM
/// ([`attend_long`]): at 4,096 patches (SigLIP so400m at 896 px) [`attend_row`]'s groups of
/// [`QUERIES`] queries would each stream a head's keys and values again (docs/performance.md,
/// "VQAScore"), and already at 197 tokens (ViT-B/16, SigLIP B/16) the GEMM runs the image
/// tower 25 % faster on an Intel Xeon (AVX-512; 4.0 → 5.0 images/s for both, batch 32, 2
/// threads). Below, it is slower: ViT-B/32's 50 tokens 19 against 22–23 images/s, SigLIP's
/// 64-token texts 15.8 against 17 (docs/performance.md, "New towers beside PyTorch").
pub(super) const LONG_SEQUENCE: usize = 128;

/// Queries whose logits [`attend_long`] holds at once: `TILE × seq` floats (4 MB at 4,096
/// keys), in cache between the two products and the softmax.
pub(super) const TILE: usize = 256;

/// Self-attention of one batch row straight from its fused projection `rows` (`seq` rows of
/// `[q | k | v]`, each `width` wide) into `out` (`seq` rows of `width`): per head and query,
/// logits `q·k / √d` (+ the bias and mask terms), a softmax, and the weighted sum of the
/// values. A masked (−∞) logit weighs exactly 0. `scratch` holds one head's keys transposed
/// (and padded to whole vectors), so 16 logits at a time are sums of broadcast query values
/// times key rows, kept in registers: no horizontal sums. Queries go [`QUERIES`] at a time;
/// each query's sums run in the same order as one at a time, so results do not depend on
/// the grouping.
#[inline(always)]
fn attend_row_body<const FUSED: bool>(
    rows: &[f32],
    out: &mut [f32],
    seq: usize,
    width: usize,
    heads: usize,
    logit_terms: LogitTerms,
    scratch: &mut Scratch,
) {
    const LANES: usize = 16;
    let LogitTerms { bias, mask } = logit_terms;
    let head = width / heads;
    let scale = (head as f32).powf(-0.5);
    let padded = seq.div_ceil(LANES) * LANES;
    let Scratch { keys, weights, by_key } = scratch;
    for h in 0..heads {
        let part = |r: usize, which: usize| &rows[r * 3 * width + which * width + h * head..][..head];
        for j in 0..seq {
            for (d, &k) in part(j, 1).iter().enumerate() {
                keys[d * padded + j] = k;
            }
        }
        for first in (0..seq).step_by(QUERIES) {
            // A short last group repeats its last query; only real queries are written.
            let query = |r: usize| part((first + r).min(seq - 1), 0);
            let qs: [&[f32]; QUERIES] = std::array::from_fn(query);
            // Two blocks of 16 keys at a time where there are two: eight independent chains
            // of multiply-adds keep both FMA pipes busy (four left half of them idle).
            let blocks = padded / LANES;
            for pair in 0..blocks / 2 {
                logit_block::<FUSED, { 2 * LANES }>(keys, padded, pair * 2 * LANES, head, &qs, weights);
            }
            if blocks % 2 == 1 {
                logit_block::<FUSED, LANES>(keys, padded, (blocks - 1) * LANES, head, &qs, weights);
            }
            let count = QUERIES.min(seq - first);
            for r in 0..count {
                let i = first + r;
                let logits = &mut weights[r * padded..][..seq];
                let bias_row = bias.map(|b| &b[(h * seq + i) * seq..][..seq]);
                let mask_row = mask.map(|m| &m[i * seq..][..seq]);
                match (bias_row, mask_row) {
                    (Some(b), Some(m)) => logits
                        .iter_mut()
                        .zip(b.iter().zip(m))
                        .for_each(|(w, (&b, &m))| *w = madd::<FUSED>(*w, scale, b) + m),
                    (Some(t), None) | (None, Some(t)) => {
                        logits.iter_mut().zip(t).for_each(|(w, &t)| *w = madd::<FUSED>(*w, scale, t))
                    }
                    (None, None) => logits.iter_mut().for_each(|w| *w *= scale),
                }
                softmax_in_place(logits);
            }
            // The group's weights key by key (`seq × QUERIES`), so each value row meets its
            // QUERIES weights side by side: the loop below then indexes nothing (checked
            // indexing into four weight rows spilled registers, a third of the attention's
            // time).
            for (j, by_key) in by_key[..seq * QUERIES].chunks_exact_mut(QUERIES).enumerate() {
                for (r, w) in by_key.iter_mut().enumerate() {
                    *w = weights[r * padded + j];
                }
            }
            let by_key = &by_key[..seq * QUERIES];
            // 32 output values of each query at a time where the head has them (eight chains,
            // as above), summed over the values in registers; then 16 at a time.
            let wide = head / (2 * LANES) * 2 * LANES;
            for c in (0..wide).step_by(2 * LANES) {
                let acc = value_block::<FUSED, { 2 * LANES }>((0..seq).map(|j| &part(j, 2)[c..]), by_key);
                for (r, acc) in acc.iter().enumerate().take(count) {
                    out[(first + r) * width + h * head + c..][..2 * LANES].copy_from_slice(acc);
                }
            }
            for c in (wide..head).step_by(LANES) {
                let lanes = LANES.min(head - c);
                let values = (0..seq).map(|j| &part(j, 2)[c..][..lanes]);
                let acc = if lanes == LANES {
                    value_block::<FUSED, LANES>(values, by_key)
                } else {
                    let mut acc = [[0f32; LANES]; QUERIES];
                    for (v, w) in values.zip(by_key.chunks_exact(QUERIES)) {
                        for (acc, &w) in acc.iter_mut().zip(w) {
                            for (a, &v) in acc.iter_mut().zip(v) {
                                *a = madd::<FUSED>(w, v, *a);
                            }
                        }
                    }
                    acc
                };
                for (r, acc) in acc.iter().enumerate().take(count) {
                    out[(first + r) * width + h * head + c..][..lanes].copy_from_slice(&acc[..lanes]);
                }
            }
        }
    }
}

/// [`QUERIES`] queries' logits against the `W` keys from column `at` of `keys` (`(head,
/// padded)`, one head's keys transposed) into their rows of `weights`; `W` is 32 (eight chains
/// of multiply-adds) or 16 (a last odd block). Each logit sums over the head in order.
#[inline(always)]
fn logit_block<const FUSED: bool, const W: usize>(
    keys: &[f32],
    padded: usize,
    at: usize,
    head: usize,
    qs: &[&[f32]; QUERIES],
    weights: &mut [f32],
) {
    let mut acc = [[0f32; W]; QUERIES];
    for d in 0..head {
        let k = &keys[d * padded + at..][..W];
        for (acc, q) in acc.iter_mut().zip(qs) {
            let qd = q[d];
            for l in 0..W {
                acc[l] = madd::<FUSED>(qd, k[l], acc[l]);
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        weights[r * padded + at..][..W].copy_from_slice(acc);
    }
}

/// [`QUERIES`] queries' `W` output values (32 or 16): the weighted sum, in key order, of each
/// value row's first `W` values (`values`, key by key) with the group's weights `by_key`
/// (`(seq, QUERIES)`).
#[inline(always)]
fn value_block<'a, const FUSED: bool, const W: usize>(
    values: impl Iterator<Item = &'a [f32]>,
    by_key: &[f32],
) -> [[f32; W]; QUERIES] {
    let mut acc = [[0f32; W]; QUERIES];
    for (v, w) in values.zip(by_key.chunks_exact(QUERIES)) {
        let v = &v[..W];
        for (acc, &w) in acc.iter_mut().zip(w) {
            for (a, &v) in acc.iter_mut().zip(v) {
                *a = madd::<FUSED>(w, v, *a);
            }
        }
    }
    acc
}

/// One row of logits turned into softmax weights in place; a masked (−∞) logit weighs exactly
/// 0. The maximum and the sum go lane by lane, then across the lanes: a vector op per 16
/// logits instead of a chain of scalar ones (the two chains were a third of the attention's
/// time on ViT-B/32).
#[inline(always)]
fn softmax_in_place(logits: &mut [f32]) {
    let max = lanewise(logits, f32::NEG_INFINITY, f32::max).into_iter().fold(f32::NEG_INFINITY, f32::max);
    logits.iter_mut().for_each(|w| *w = if *w > f32::NEG_INFINITY { exp(*w - max) } else { 0.0 });
    let inv = 1.0 / lanewise(logits, 0.0, |a, b| a + b).into_iter().sum::<f32>();
    logits.iter_mut().for_each(|w| *w *= inv);
}

/// Rows of `logits` (`seq` each) scaled by `scale` and turned into softmax weights in place.
#[inline(always)]
fn softmax_rows_body<const FUSED: bool>(logits: &mut [f32], seq: usize, scale: f32) {
    for row in logits.chunks_exact_mut(seq) {
        row.iter_mut().for_each(|w| *w *= scale);
        softmax_in_place(row);
    }
}

per_tier!(fn softmax_rows = softmax_rows_body(logits: &mut [f32], seq: usize, scale: f32));

/// Unmasked self-attention over a long sequence through the packed GEMM, every (batch row,
/// head) pair a task on its own (a batch of ViT-B/16's 197 tokens is 384 of them; run row by
/// row, head by head, the gathers ran on one core while the other waited, and each small
/// product paid for its own parallel dispatch): per pair, the head's keys packed as a `(seq,
/// head)` layer and its values (transposed) as a `(head, seq)` one, then per [`TILE`] queries
/// `logits = q · Kᵀ`, a row softmax of `logits / √d`, `out = weights · V`. The same sums as
/// [`attend_row`], in the GEMM's order. `None` on a tier without a packed GEMM.
fn attend_long(tier: Tier, qkv: &[f32], out: &mut [f32], seq: usize, width: usize, heads: usize) -> Option<()> {
    let head = width / heads;
    let per_pair: Vec<Vec<f32>> = (0..out.len() / (seq * width) * heads)
        .into_par_iter()
        .map(|pair| {
            let rows = &qkv[pair / heads * seq * 3 * width..][..seq * 3 * width];
            attend_long_head(tier, rows, seq, width, pair % heads, head)
        })
        .collect::<Option<_>>()?;
    out.par_chunks_mut(seq * width).zip(per_pair.par_chunks(heads)).for_each(|(out, heads_of_row)| {
        for (h, attended) in heads_of_row.iter().enumerate() {
            for (i, row) in attended.chunks_exact(head).enumerate() {
                out[i * width + h * head..][..head].copy_from_slice(row);
            }
        }
    });
    Some(())
}

/// Head `h` of one batch row's fused projection `rows` attended, `(seq, head)`, on the calling
/// thread.
fn attend_long_head(tier: Tier, rows: &[f32], seq: usize, width: usize, h: usize, head: usize) -> Option<Vec<f32>> {
    let scale = (head as f32).powf(-0.5);
    let part = |r: usize, which: usize| &rows[r * 3 * width + which * width + h * head..][..head];
    let mut queries = Vec::with_capacity(seq * head);
    let mut keys = Vec::with_capacity(seq * head);
    let mut values = vec![0f32; head * seq];
    for r in 0..seq {
        queries.extend_from_slice(part(r, 0));
        keys.extend_from_slice(part(r, 1));
        for (d, &v) in part(r, 2).iter().enumerate() {
            values[d * seq + r] = v;
        }
    }
    let keys = crate::gemm::PackedDense::pack(tier, &keys, None, seq, head)?;
    let values = crate::gemm::PackedDense::pack(tier, &values, None, head, seq)?;
    let mut attended = Vec::with_capacity(seq * head);
    for first in (0..seq).step_by(TILE) {
        let m = TILE.min(seq - first);
        let mut logits = keys.forward_serial(&queries[first * head..][..m * head], m);
        softmax_rows(tier, &mut logits, seq, scale);
        attended.extend(values.forward_serial(&logits, m));
    }
    Some(attended)
}

/// What is added to one batch row's scaled logits: a per-head `(heads, seq, seq)` bias (a
/// Swin window's relative positions) and a `(seq, seq)` mask shared by the heads.
#[derive(Debug, Clone, Copy, Default)]
struct LogitTerms<'a> {
    bias: Option<&'a [f32]>,
    mask: Option<&'a [f32]>,
}

/// Per-task buffers of [`attend_row_body`].
struct Scratch {
    /// One head's keys, `(head, seq)` padded with zero columns to whole vectors of 16.
    keys: Vec<f32>,
    /// [`QUERIES`] queries' logits, then weights, `(seq)` each, padded the same way.
    weights: Vec<f32>,
    /// The same weights key by key: `(seq, QUERIES)`.
    by_key: Vec<f32>,
}

per_tier!(
    #[allow(clippy::too_many_arguments)] // the tier, then the body's own seven
    fn attend_row = attend_row_body(
    rows: &[f32],
    out: &mut [f32],
    seq: usize,
    width: usize,
    heads: usize,
    logit_terms: LogitTerms,
    scratch: &mut Scratch,
));

/// Multi-head self-attention from the fused `(batch, seq, 3·width)` projection, one batch row
/// per task: no split of q, k and v into heads, no merge back, no separate softmax pass, and
/// none of the `batch × heads` tiny matrix products candle would run (for a 16-token text
/// the latter cost more in dispatch than in arithmetic).
struct SelfAttentionOp {
    heads: usize,
    tier: Tier,
}

impl SelfAttentionOp {
    fn run(&self, qkv: &CpuStorage, layout: &Layout, mask: Option<&[f32]>) -> candle_core::Result<(CpuStorage, Shape)> {
        self.run_with(qkv, layout, None, mask, 1)
    }

    /// Row `r` adds `bias` (per head) and mask group `r % groups` of `masks`.
    fn run_with(
        &self,
        qkv: &CpuStorage,
        layout: &Layout,
        bias: Option<&[f32]>,
        masks: Option<&[f32]>,
        groups: usize,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(data) = qkv else { candle_core::bail!("fused attention: f32 only") };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("fused attention: contiguous input only")
        };
        let (batch, seq, three_width) = layout.shape().dims3()?;
        let width = three_width / 3;
        if three_width % 3 != 0 || self.heads == 0 || width % self.heads != 0 {
            candle_core::bail!(
                "fused attention: a projection of {three_width} does not split into q, k, v of {} heads",
                self.heads
            );
        }
        let square = seq * seq;
        if bias.is_some_and(|b| b.len() != self.heads * square)
            || masks.is_some_and(|m| groups == 0 || m.len() != groups * square || batch % groups != 0)
        {
            candle_core::bail!("fused attention: the bias or mask does not fit {batch} rows of {seq} tokens");
        }
        let qkv = &data[start..end];
        let mut out = vec![0f32; batch * seq * width];
        if seq >= LONG_SEQUENCE && bias.is_none() && masks.is_none() && crate::gemm::PackedDense::packs_on(self.tier) {
            attend_long(self.tier, qkv, &mut out, seq, width, self.heads)
                .ok_or_else(|| candle_core::Error::Msg("fused attention: no packed GEMM on this tier".into()))?;
            return Ok((CpuStorage::F32(out), Shape::from((batch, seq, width))));
        }
        out.par_chunks_mut(seq * width).zip(qkv.par_chunks(seq * three_width)).enumerate().for_each_init(
            || {
                let padded = seq.div_ceil(16) * 16;
                Scratch {
                    keys: vec![0f32; width / self.heads * padded],
                    weights: vec![0f32; QUERIES * padded],
                    by_key: vec![0f32; QUERIES * padded],
                }
            },
            |scratch, (r, (out, rows))| {
                let mask = masks.map(|m| &m[(r % groups) * square..][..square]);
                attend_row(self.tier, rows, out, seq, width, self.heads, LogitTerms { bias, mask }, scratch)
            },
        );
        Ok((CpuStorage::F32(out), Shape::from((batch, seq, width))))
    }
}

impl candle_core::CustomOp1 for SelfAttentionOp {
    fn name(&self) -> &'static str {
        "fused-self-attention"
    }

    fn cpu_fwd(&self, qkv: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        self.run(qkv, layout, None)
    }
}

impl candle_core::CustomOp2 for SelfAttentionOp {
    fn name(&self) -> &'static str {
        "fused-masked-self-attention"
    }

    fn cpu_fwd(
        &self,
        qkv: &CpuStorage,
        layout: &Layout,
        mask: &CpuStorage,
        mask_layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (CpuStorage::F32(mask), Some((m0, m1))) = (mask, mask_layout.contiguous_offsets()) else {
            candle_core::bail!("fused attention: the mask must be contiguous f32")
        };
        self.run(qkv, layout, Some(&mask[m0..m1]))
    }
}

/// Windowed self-attention (Swin) of a fused `(windows, seq, 3·width)` projection: a
/// per-head `(heads, seq, seq)` bias on every window, and for shifted windows a `(groups,
/// seq, seq)` mask, window `r` taking group `r % groups` (windows are image-major).
struct WindowAttentionOp {
    attention: SelfAttentionOp,
    groups: usize,
}

const BIAS_AND_MASK: &str = "fused attention: biases and masks";

impl candle_core::CustomOp2 for WindowAttentionOp {
    fn name(&self) -> &'static str {
        "fused-window-attention"
    }

    fn cpu_fwd(
        &self,
        qkv: &CpuStorage,
        layout: &Layout,
        bias: &CpuStorage,
        bias_layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        self.attention.run_with(qkv, layout, Some(contiguous_f32(BIAS_AND_MASK, bias, bias_layout)?), None, 1)
    }
}

impl candle_core::CustomOp3 for WindowAttentionOp {
    fn name(&self) -> &'static str {
        "fused-shifted-window-attention"
    }

    fn cpu_fwd(
        &self,
        qkv: &CpuStorage,
        layout: &Layout,
        bias: &CpuStorage,
        bias_layout: &Layout,
        mask: &CpuStorage,
        mask_layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (bias, mask) =
            (contiguous_f32(BIAS_AND_MASK, bias, bias_layout)?, contiguous_f32(BIAS_AND_MASK, mask, mask_layout)?);
        self.attention.run_with(qkv, layout, Some(bias), Some(mask), self.groups)
    }
}

/// [`windowed_self_attention_on`] on the tier `BENCHCTL_CPU` picks.
pub(crate) fn windowed_self_attention(
    qkv: &Tensor,
    heads: usize,
    bias: &Tensor,
    mask: Option<&Tensor>,
) -> candle_core::Result<Option<Tensor>> {
    windowed_self_attention_on(Tier::current(), qkv, heads, bias, mask)
}

/// Swin's window attention from the fused `(windows, seq, 3·width)` projection, adding the
/// `(heads, seq, seq)` relative position bias and, when given, the `(groups, seq, seq)`
/// shifted-window mask: the fused kernel on contiguous f32 CPU tensors, `None` (use the
/// composed path) for anything else.
pub(crate) fn windowed_self_attention_on(
    tier: Tier,
    qkv: &Tensor,
    heads: usize,
    bias: &Tensor,
    mask: Option<&Tensor>,
) -> candle_core::Result<Option<Tensor>> {
    if let Some(dtype) = half_on_cpu(qkv) {
        let (qkv, bias, mask) = (widen(qkv)?, widen(bias)?, mask.map(widen).transpose()?);
        let attended = windowed_self_attention_on(tier, &qkv, heads, &bias, mask.as_ref())?;
        return attended.map(|a| a.to_dtype(dtype)).transpose();
    }
    let f32_cpu = |t: &Tensor| t.device().is_cpu() && t.dtype() == candle_core::DType::F32 && t.is_contiguous();
    if !f32_cpu(qkv) || !f32_cpu(bias) || qkv.rank() != 3 || mask.is_some_and(|m| !f32_cpu(m) || m.rank() != 3) {
        return Ok(None);
    }
    let op = |groups| WindowAttentionOp { attention: SelfAttentionOp { heads, tier }, groups };
    match mask {
        None => Ok(Some(qkv.apply_op2_no_bwd(bias, &op(1))?)),
        Some(m) => Ok(Some(qkv.apply_op3_no_bwd(bias, m, &op(m.dim(0)?))?)),
    }
}

/// Self-attention of a fused `(batch, seq, 3·width)` q/k/v projection, with an optional
/// additive `(seq, seq)` mask: the fused kernel on contiguous f32 CPU tensors, `None` (use
/// the composed path) for anything else.
pub fn self_attention(qkv: &Tensor, heads: usize, mask: Option<&Tensor>) -> candle_core::Result<Option<Tensor>> {
    self_attention_on(Tier::current(), qkv, heads, mask)
}

/// [`self_attention`] on a given tier.
pub(crate) fn self_attention_on(
    tier: Tier,
    qkv: &Tensor,
    heads: usize,
    mask: Option<&Tensor>,
) -> candle_core::Result<Option<Tensor>> {
    if let Some(dtype) = half_on_cpu(qkv) {
        let (qkv, mask) = (widen(qkv)?, mask.map(widen).transpose()?);
        let attended = self_attention_on(tier, &qkv, heads, mask.as_ref())?;
        return attended.map(|a| a.to_dtype(dtype)).transpose();
    }
    let f32_cpu = |t: &Tensor| t.device().is_cpu() && t.dtype() == candle_core::DType::F32 && t.is_contiguous();
    if !f32_cpu(qkv) || qkv.rank() != 3 {
        return Ok(None);
    }
    let seq = qkv.dim(1)?;
    let op = SelfAttentionOp { heads, tier };
    match mask {
        None => Ok(Some(qkv.apply_op1_no_bwd(&op)?)),
        Some(m) if f32_cpu(m) && m.dims() == [seq, seq] => Ok(Some(qkv.apply_op2_no_bwd(m, &op)?)),
        Some(_) => Ok(None),
    }
}
