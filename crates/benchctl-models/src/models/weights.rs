//! Strict weight loading: a missing tensor or a shape that disagrees with the config is an
//! error naming the tensor, never a silent random initialisation.

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::{LayerNorm, Linear, VarBuilder};
use std::path::Path;

use crate::{Error, ErrorKind, Result};

/// Tensors of one safetensors file, with the file's name for error messages.
#[derive(Clone)]
pub(crate) struct Weights<'a> {
    vb: VarBuilder<'a>,
    file: String,
    /// Tensors are created on request with random values (benchmarks on random weights).
    random: bool,
}

impl<'a> Weights<'a> {
    /// Memory-maps a safetensors file, converting tensors to `dtype` on `device` as they are read.
    pub fn open(path: &Path, dtype: DType, device: &Device) -> Result<Weights<'static>> {
        // SAFETY: the file is only read; benchctl never writes a weight file it has mapped.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[path], dtype, device) }.map_err(|e| {
            Error::new(ErrorKind::BadWeights, format!("read weights {}: {e}", path.display()))
        })?;
        Ok(Weights { vb, file: path.display().to_string(), random: false })
    }

    /// Weights from any VarBuilder (random weights for benchmarks).
    pub fn from_var_builder(vb: VarBuilder<'a>, name: &str) -> Self {
        Weights { vb, file: name.to_string(), random: false }
    }

    /// Creates every requested tensor with N(0, 0.02) values instead of reading it.
    pub fn random(self) -> Self {
        Weights { random: true, ..self }
    }

    pub fn pp(&self, prefix: impl ToString) -> Self {
        Weights { vb: self.vb.pp(prefix), file: self.file.clone(), random: self.random }
    }

    pub fn device(&self) -> &Device {
        self.vb.device()
    }

    fn full_name(&self, name: &str) -> String {
        let prefix = self.vb.prefix();
        if prefix.is_empty() { name.to_string() } else { format!("{prefix}.{name}") }
    }

    /// The tensor `name`, which must exist with exactly this shape.
    pub fn get<S: Into<Shape>>(&self, shape: S, name: &str) -> Result<Tensor> {
        let shape = shape.into();
        if self.random {
            let init = candle_nn::Init::Randn { mean: 0.0, stdev: 0.02 };
            return self.vb.get_with_hints(shape, name, init).map_err(|e| Error::compute("create random weights", e));
        }
        if !self.vb.contains_tensor(name) {
            return Err(Error::new(
                ErrorKind::BadWeights,
                format!("load weights {}: tensor `{}` is missing", self.file, self.full_name(name)),
            ));
        }
        self.vb.get(shape.clone(), name).map_err(|e| {
            Error::new(
                ErrorKind::BadWeights,
                format!(
                    "load weights {}: tensor `{}` does not have the shape {:?} that config.json implies ({e})",
                    self.file,
                    self.full_name(name),
                    shape.dims()
                ),
            )
        })
    }

    pub fn linear(&self, in_dim: usize, out_dim: usize, bias: bool) -> Result<Linear> {
        let weight = self.get((out_dim, in_dim), "weight")?;
        let bias = if bias { Some(self.get(out_dim, "bias")?) } else { None };
        Ok(Linear::new(weight, bias))
    }

    pub fn layer_norm(&self, dim: usize, eps: f64) -> Result<LayerNorm> {
        Ok(LayerNorm::new(self.get(dim, "weight")?, self.get(dim, "bias")?, eps))
    }
}
