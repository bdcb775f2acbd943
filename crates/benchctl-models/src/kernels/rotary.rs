//! Rotary position embedding on the query and key parts of a fused `(batch, seq, 3·width)`
//! projection, channels turned in adjacent pairs (EVA02's and PE-Core's towers, timm's
//! `apply_rot_embed_cat` on interleaved pairs): one pass over the projection where the composed
//! form (`x · cos + rotate(x) · sin`, then joining q, k and v again) made about fifteen.

use candle_core::{CpuStorage, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::{F32Kernel3, F32Op3};

/// The projection with its q and k parts rotated: each pair `(x0, x1)` of channels becomes
/// `(x0·cos − x1·sin, x1·cos + x0·sin)` (the table's values of each channel), v copied.
struct RotaryPairsOp;

impl F32Kernel3 for RotaryPairsOp {
    const NAME: &'static str = "fused-rotary-pairs";
    const INPUTS: &'static str = "rotary embedding: the projection, sine and cosine tables";

    fn run(
        &self,
        [qkv, sin, cos]: [&[f32]; 3],
        [layout, ..]: [&Layout; 3],
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (_, seq, three_width) = layout.shape().dims3()?;
        let width = three_width / 3;
        if three_width % 3 != 0 || width % 2 != 0 || sin.len() != seq * width || cos.len() != seq * width {
            candle_core::bail!(
                "rotary embedding: tables of {} and {} for {seq} tokens of q, k and v in {three_width}",
                sin.len(),
                cos.len()
            )
        }
        // Written row by row from the input: q and k turned, v copied (one pass, no copy of
        // the whole projection first).
        let mut out = vec![0f32; qkv.len()];
        out.par_chunks_mut(three_width).zip(qkv.par_chunks(three_width)).enumerate().with_min_len(64).for_each(
            |(row, (out, x))| {
                let (sin, cos) = (&sin[row % seq * width..][..width], &cos[row % seq * width..][..width]);
                for (out, x) in out[..2 * width].chunks_exact_mut(width).zip(x.chunks_exact(width)) {
                    let pairs = out.chunks_exact_mut(2).zip(x.chunks_exact(2));
                    for ((pair, x), (s, c)) in pairs.zip(sin.chunks_exact(2).zip(cos.chunks_exact(2))) {
                        // The composed form's own operations: x·cos + (−x1)·sin and x·cos + x0·sin.
                        pair[0] = x[0] * c[0] + -x[1] * s[0];
                        pair[1] = x[1] * c[1] + x[0] * s[1];
                    }
                }
                out[2 * width..].copy_from_slice(&x[2 * width..]);
            },
        );
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }
}

/// `qkv` `(batch, seq, 3·width)` with its q and k parts turned by `(sin, cos)` (`(seq, width)`
/// each), fused for contiguous f32 tensors on the CPU; `None` otherwise (half precision rounds
/// after each operation in the reference too, and CUDA composes it).
pub(crate) fn rotate_pairs_qk(qkv: &Tensor, sin: &Tensor, cos: &Tensor) -> candle_core::Result<Option<Tensor>> {
    let f32_cpu = |t: &Tensor| t.device().is_cpu() && t.dtype() == candle_core::DType::F32 && t.is_contiguous();
    if !(f32_cpu(qkv) && f32_cpu(sin) && f32_cpu(cos)) {
        return Ok(None);
    }
    qkv.apply_op3_no_bwd(sin, cos, &F32Op3(RotaryPairsOp)).map(Some)
}
