use candle_core::{Device, Tensor, DType, Module, D, IndexOp};
fn t<F: FnMut() -> candle_core::Result<Tensor>>(name: &str, mut f: F) -> candle_core::Result<Tensor> {
    let r = f()?;
    let s = std::time::Instant::now();
    for _ in 0..5 { f()?; }
    println!("{name:>14}: {:8.2} ms", s.elapsed().as_secs_f64() * 200.0);
    Ok(r)
}
fn main() -> candle_core::Result<()> {
    let dev = Device::Cpu;
    let (b, s, w, h) = (32usize, 50usize, 768usize, 12usize);
    let x = Tensor::randn(0f32, 1., (b, s, w), &dev)?;
    let ln = candle_nn::LayerNorm::new(Tensor::ones(w, DType::F32, &dev)?, Tensor::zeros(w, DType::F32, &dev)?, 1e-5);
    let lin = |i: usize, o: usize| -> candle_core::Result<candle_nn::Linear> { Ok(candle_nn::Linear::new(Tensor::randn(0f32, 0.02, (o, i), &dev)?, Some(Tensor::zeros(o, DType::F32, &dev)?))) };
    let (qkv, out, fc1, fc2) = (lin(w, 3 * w)?, lin(w, w)?, lin(w, 4 * w)?, lin(4 * w, w)?);
    let n = t("layernorm", || ln.forward(&x))?;
    let q3 = t("qkv linear", || qkv.forward(&n))?;
    let hd = w / h;
    let parts = t("split", || { let q = q3.narrow(D::Minus1, 0, w)?; q.reshape((b, s, h, hd))?.transpose(1, 2)?.contiguous() })?;
    let qs = t("scale", || parts.clone() * 0.125)?;
    let kt = t("k.t()", || parts.t())?;
    let logits = t("q·kᵀ", || qs.matmul(&kt))?;
    let sm = t("softmax", || candle_nn::ops::softmax_last_dim(&logits))?;
    let av = t("attn·v", || sm.matmul(&parts))?;
    let merged = t("merge heads", || av.transpose(1, 2)?.reshape((b, s, w)))?;
    let o = t("out linear", || out.forward(&merged))?;
    let r = t("residual add", || &o + &x)?;
    let h1 = t("fc1", || fc1.forward(&r))?;
    let g = t("quick_gelu", || &h1 * candle_nn::ops::sigmoid(&(&h1 * 1.702)?)?)?;
    let _ = t("gelu_erf", || h1.gelu_erf())?;
    let _ = t("fc2", || fc2.forward(&g))?;
    let _ = t("cls pick", || r.i((.., 0, ..)))?;
    Ok(())
}
