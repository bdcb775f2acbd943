//! benchctl's CUDA kernels (`cuda/fused.cu`) against the same computation in candle's own
//! operations on the same GPU, in f32: fused self-attention (tensor-core and CUDA-core
//! kernels, every dtype, causal masks, Swin's bias and shifted-window masks, more rows than one
//! grid holds) and the dense layers' fused epilogue. Built with `--features cuda`; runs where
//! `BENCHCTL_TEST_DEVICE=cuda` (a GPU machine), and says why it skips elsewhere.
#![cfg(feature = "cuda")]

use benchctl_models::cuda::{dense_with_epilogue, self_attention_with, CudaKernels};
use benchctl_models::kernels::Activation;
use candle_core::{DType, Device, Tensor};

fn gpu() -> Option<Device> {
    let device = benchctl_testkit::test_device();
    if device.is_cpu() {
        benchctl_testkit::skip_even_in_ci("the CUDA kernels need BENCHCTL_TEST_DEVICE=cuda (a GPU)");
        return None;
    }
    Some(device)
}

/// Attention as the model code composed it before the kernels, in f32: heads split, q·kᵀ
/// scaled, bias and mask added (row `r` takes mask group `r % groups`), softmax, ·v, merged.
fn composed(qkv: &Tensor, heads: usize, bias: Option<&Tensor>, mask: Option<&Tensor>) -> Tensor {
    let qkv = qkv.to_dtype(DType::F32).unwrap();
    let (rows, seq, three_width) = qkv.dims3().unwrap();
    let width = three_width / 3;
    let head = width / heads;
    let part = |i: usize| {
        qkv.narrow(2, i * width, width)
            .unwrap()
            .reshape((rows, seq, heads, head))
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .contiguous()
            .unwrap()
    };
    let (q, k, v) = (part(0), part(1), part(2));
    let mut logits = (q.matmul(&k.t().unwrap()).unwrap() * (head as f64).powf(-0.5)).unwrap();
    if let Some(bias) = bias {
        logits = logits.broadcast_add(&bias.to_dtype(DType::F32).unwrap().unsqueeze(0).unwrap()).unwrap();
    }
    if let Some(mask) = mask {
        let groups = mask.dim(0).unwrap();
        let per_row =
            mask.to_dtype(DType::F32).unwrap().unsqueeze(0).unwrap().repeat((rows / groups, 1, 1, 1)).unwrap();
        let per_row = per_row.reshape((rows, 1, seq, seq)).unwrap();
        logits = logits.broadcast_add(&per_row).unwrap();
    }
    let weights = candle_nn::ops::softmax_last_dim(&logits).unwrap();
    weights.matmul(&v).unwrap().transpose(1, 2).unwrap().reshape((rows, seq, width)).unwrap()
}

/// Largest difference relative to the reference's largest magnitude.
fn relative_error(ours: &Tensor, reference: &Tensor) -> f32 {
    let ours = ours.to_dtype(DType::F32).unwrap();
    let diff = (&ours - reference).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
    let scale = reference.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
    diff / scale.max(1e-12)
}

/// The drift each dtype is allowed against the f32 reference: f32 rounding; f16's and bf16's
/// rounding of the inputs (shared with the reference), of the softmax weights and of the output.
fn tolerance(dtype: DType) -> f32 {
    match dtype {
        DType::F32 => 2e-5,
        DType::F16 => 4e-3,
        _ => 3e-2,
    }
}

const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];
/// The tensor-core kernel with each query tile (and the default's choice between them) and the
/// CUDA-core kernel.
const KERNELS: [CudaKernels; 4] =
    [CudaKernels::Fused, CudaKernels::FusedNarrow, CudaKernels::FusedWide, CudaKernels::Simt];

fn projection(device: &Device, rows: usize, seq: usize, width: usize, dtype: DType) -> Tensor {
    Tensor::randn(0f32, 1.0, (rows, seq, 3 * width), device).unwrap().to_dtype(dtype).unwrap()
}

#[test]
fn fused_attention_matches_the_composed_path_in_every_dtype() {
    let Some(device) = gpu() else { return };
    // (rows, seq, width, heads): ViT-B/32's 50 tokens, ViT-B/16's 197, L/14-336's 577 (where the
    // default takes 128-query blocks; 577 = 4·128 + 65 leaves a last block of one fragment and a
    // half), a short text, a single token, Swin's 32-wide heads, SigLIP so400m's 72-wide (on the
    // tensor cores rounded up to 80), ViT-H's 80-wide and PE-Core G's 96-wide heads (copied one
    // 16-byte run per thread in turn), 128-wide heads; the wide kernel of heads wider than 64
    // (queries read from dynamic shared memory) at 577 and 730 tokens.
    for (rows, seq, width, heads) in [
        (3, 50, 768, 12),
        (2, 197, 768, 12),
        (2, 577, 256, 4),
        (1, 729, 128, 4),
        (4, 16, 512, 8),
        (2, 1, 128, 2),
        (3, 144, 128, 4),
        (2, 77, 144, 2),
        (1, 729, 1152, 16),
        (2, 257, 160, 2),
        (2, 100, 192, 2),
        (2, 70, 256, 2),
        (2, 577, 256, 2),
        (1, 730, 160, 2),
    ] {
        for dtype in DTYPES {
            let qkv = projection(&device, rows, seq, width, dtype);
            let reference = composed(&qkv, heads, None, None);
            for kernels in KERNELS {
                let ours = self_attention_with(kernels, &qkv, heads, None, None).unwrap().expect("the kernel takes it");
                assert_eq!(ours.dims(), [rows, seq, width]);
                assert_eq!(ours.dtype(), dtype);
                let error = relative_error(&ours, &reference);
                assert!(
                    error <= tolerance(dtype),
                    "{kernels:?} {dtype:?} rows {rows} seq {seq} width {width} heads {heads}: relative error {error}"
                );
            }
        }
    }
}

#[test]
fn a_causal_mask_and_swin_windows_match_the_composed_path() {
    let Some(device) = gpu() else { return };
    // CLIP's text mask: −∞ above the diagonal, one (seq, seq) mask for every row.
    let seq = 77;
    let causal: Vec<f32> = (0..seq * seq).map(|i| if i % seq > i / seq { f32::NEG_INFINITY } else { 0.0 }).collect();
    let causal = Tensor::from_vec(causal, (seq, seq), &device).unwrap();
    // Swin: a (heads, seq, seq) bias and four shifted-window masks of 0 and −100, window r
    // taking mask r % 4.
    let window = 144;
    let bias = Tensor::randn(0f32, 1.0, (4, window, window), &device).unwrap();
    let masks: Vec<f32> = (0..4 * window * window)
        .map(|i| if (i * 7919) % 5 == 0 && i % (window + 1) != 0 { -100.0 } else { 0.0 })
        .collect();
    let masks = Tensor::from_vec(masks, (4, window, window), &device).unwrap();
    for dtype in DTYPES {
        for kernels in KERNELS {
            let text = projection(&device, 3, seq, 512, dtype);
            let ours =
                self_attention_with(kernels, &text, 8, None, Some(&causal.to_dtype(dtype).unwrap())).unwrap().unwrap();
            let error = relative_error(&ours, &composed(&text, 8, None, Some(&causal.unsqueeze(0).unwrap())));
            assert!(error <= tolerance(dtype), "{kernels:?} {dtype:?} causal: relative error {error}");
            // A decoder's heads of 128.
            let ours =
                self_attention_with(kernels, &text, 4, None, Some(&causal.to_dtype(dtype).unwrap())).unwrap().unwrap();
            let error = relative_error(&ours, &composed(&text, 4, None, Some(&causal.unsqueeze(0).unwrap())));
            assert!(error <= tolerance(dtype), "{kernels:?} {dtype:?} causal, heads of 128: relative error {error}");

            let windows = projection(&device, 8, window, 128, dtype);
            let (b, m) = (bias.to_dtype(dtype).unwrap(), masks.to_dtype(dtype).unwrap());
            let ours = self_attention_with(kernels, &windows, 4, Some(&b), Some(&m)).unwrap().unwrap();
            let error = relative_error(&ours, &composed(&windows, 4, Some(&b), Some(&m)));
            assert!(error <= tolerance(dtype), "{kernels:?} {dtype:?} shifted windows: relative error {error}");
            let ours = self_attention_with(kernels, &windows, 4, Some(&b), None).unwrap().unwrap();
            let error = relative_error(&ours, &composed(&windows, 4, Some(&b), None));
            assert!(error <= tolerance(dtype), "{kernels:?} {dtype:?} windows: relative error {error}");
        }
    }
}

#[test]
fn a_query_whose_every_key_is_masked_attends_to_nothing() {
    let Some(device) = gpu() else { return };
    // Row 0 of the mask hides every key from query 0: its output is 0, not NaN; the other
    // queries are unaffected.
    let seq = 20;
    let mask: Vec<f32> = (0..seq * seq).map(|i| if i < seq { f32::NEG_INFINITY } else { 0.0 }).collect();
    let mask = Tensor::from_vec(mask, (seq, seq), &device).unwrap();
    // Heads of 64 and one of 128.
    for (dtype, heads) in DTYPES.into_iter().flat_map(|dtype| [(dtype, 2), (dtype, 1)]) {
        for kernels in KERNELS {
            let qkv = projection(&device, 2, seq, 128, dtype);
            let ours =
                self_attention_with(kernels, &qkv, heads, None, Some(&mask.to_dtype(dtype).unwrap())).unwrap().unwrap();
            let first = ours.narrow(1, 0, 1).unwrap().to_dtype(DType::F32).unwrap();
            assert_eq!(
                first.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap(),
                0.0,
                "{kernels:?} {dtype:?} {heads} heads"
            );
            let rest = ours.narrow(1, 1, seq - 1).unwrap();
            let reference = composed(&qkv, heads, None, None).narrow(1, 1, seq - 1).unwrap();
            let error = relative_error(&rest, &reference);
            assert!(error <= tolerance(dtype), "{kernels:?} {dtype:?} {heads} heads: relative error {error}");
        }
    }
}

#[test]
fn more_rows_than_one_grid_holds_are_all_attended() {
    let Some(device) = gpu() else { return };
    // 70,000 rows (windows) run as two launches of at most 65,535; the last rows must match.
    let qkv = projection(&device, 70_000, 2, 64, DType::F32);
    let ours = self_attention_with(CudaKernels::Fused, &qkv, 1, None, None).unwrap().unwrap();
    let tail = |t: &Tensor| t.narrow(0, 65_000, 5_000).unwrap();
    let error = relative_error(&tail(&ours), &tail(&composed(&qkv, 1, None, None)));
    assert!(error <= tolerance(DType::F32), "relative error {error}");
}

#[test]
fn the_dense_epilogue_matches_candles_operations() {
    let Some(device) = gpu() else { return };
    // 384 outputs take the 16-byte runs, 100 the one-value path.
    for (rows, inputs, outputs) in [(300, 256, 384), (300, 256, 100)] {
        dense_case(&device, rows, inputs, outputs);
    }
}

fn dense_case(device: &Device, rows: usize, inputs: usize, outputs: usize) {
    let device = device.clone();
    let x = Tensor::randn(0f32, 1.0, (rows, inputs), &device).unwrap();
    let w = (Tensor::randn(0f32, 1.0, (outputs, inputs), &device).unwrap() * 0.06).unwrap();
    let b = Tensor::randn(0f32, 1.0, outputs, &device).unwrap();
    let residual = Tensor::randn(0f32, 1.0, (rows, outputs), &device).unwrap();
    for dtype in DTYPES {
        let cast = |t: &Tensor| t.to_dtype(dtype).unwrap();
        // The reference starts from the values as rounded to the dtype, in f32.
        let rounded = |t: &Tensor| cast(t).to_dtype(DType::F32).unwrap();
        let linear = rounded(&x).matmul(&rounded(&w).t().unwrap()).unwrap().broadcast_add(&rounded(&b)).unwrap();
        // Each activation by its defining formula (transformers' quick_gelu, gelu, gelu_new).
        let quick_gelu = (&linear * candle_nn::ops::sigmoid(&(&linear * 1.702).unwrap()).unwrap()).unwrap();
        let cases = [
            (None, false, linear.clone()),
            (Some(Activation::QuickGelu), false, quick_gelu),
            (Some(Activation::Gelu), false, linear.gelu_erf().unwrap()),
            (Some(Activation::GeluTanh), false, linear.gelu().unwrap()),
            (None, true, (&linear + rounded(&residual)).unwrap()),
        ];
        for (activation, with_residual, reference) in cases {
            let residual = with_residual.then(|| cast(&residual));
            let ours = dense_with_epilogue(&cast(&x), &cast(&w), &cast(&b), activation, residual.as_ref()).unwrap();
            assert_eq!((ours.dims(), ours.dtype()), (reference.dims(), dtype));
            let error = relative_error(&ours, &reference);
            assert!(
                error <= tolerance(dtype),
                "{activation:?} residual {with_residual} {dtype:?}: relative error {error}"
            );
        }
    }
}
