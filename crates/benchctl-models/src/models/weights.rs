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
    /// Opens a safetensors file; tensors are read (and converted to `dtype` on `device`) as
    /// they are requested.
    pub fn open(path: &Path, dtype: DType, device: &Device) -> Result<Weights<'static>> {
        let backend = FileBackend::open(path)?;
        let vb = VarBuilder::from_backend(Box::new(backend), dtype, device.clone());
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
        if prefix.is_empty() {
            name.to_string()
        } else {
            format!("{prefix}.{name}")
        }
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

/// A safetensors file read tensor by tensor with positioned reads, not memory-mapped: a
/// mapping keeps every touched page resident until the whole model is loaded, so the peak
/// RSS of a load would be the weights twice (the mapping and the converted copies).
struct FileBackend {
    file: std::fs::File,
    path: String,
    /// Where the tensor data starts (after the 8-byte length and the JSON header).
    data_start: u64,
    tensors: std::collections::HashMap<String, (DType, Vec<usize>, u64, u64)>,
}

fn bad(path: &Path, what: String) -> Error {
    Error::new(ErrorKind::BadWeights, format!("read weights {}: {what}", path.display()))
}

impl FileBackend {
    fn open(path: &Path) -> Result<Self> {
        let file = std::fs::File::open(path).map_err(|e| bad(path, e.to_string()))?;
        let len = file.metadata().map_err(|e| bad(path, e.to_string()))?.len();
        let mut n = [0u8; 8];
        read_at(&file, &mut n, 0).map_err(|_| bad(path, "it is too short to be a safetensors file".into()))?;
        let header_len = u64::from_le_bytes(n);
        if header_len > 100_000_000 || 8 + header_len > len {
            return Err(bad(path, format!("its header length {header_len} does not fit a file of {len} bytes")));
        }
        let mut header = vec![0u8; header_len as usize];
        read_at(&file, &mut header, 8).map_err(|e| bad(path, e.to_string()))?;
        let header: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&header).map_err(|e| bad(path, format!("its header is not JSON: {e}")))?;
        let data_start = 8 + header_len;
        let mut tensors = std::collections::HashMap::new();
        for (name, info) in header.into_iter().filter(|(k, _)| k != "__metadata__") {
            let parse = || -> Option<(DType, Vec<usize>, u64, u64)> {
                let dtype = match info.get("dtype")?.as_str()? {
                    "F32" => DType::F32,
                    "F16" => DType::F16,
                    "BF16" => DType::BF16,
                    "F64" => DType::F64,
                    "I64" => DType::I64,
                    "U32" => DType::U32,
                    "U8" => DType::U8,
                    _ => return None,
                };
                let shape = info
                    .get("shape")?
                    .as_array()?
                    .iter()
                    .map(|d| d.as_u64().map(|d| d as usize))
                    .collect::<Option<Vec<_>>>()?;
                let offsets = info.get("data_offsets")?.as_array()?;
                let (start, end) = (offsets.first()?.as_u64()?, offsets.get(1)?.as_u64()?);
                let bytes = shape.iter().product::<usize>() as u64 * dtype.size_in_bytes() as u64;
                (end >= start && end - start == bytes).then_some((dtype, shape, start, end))
            };
            let entry = parse()
                .ok_or_else(|| bad(path, format!("tensor `{name}` has a malformed or unsupported header entry")))?;
            if data_start + entry.3 > len {
                return Err(bad(path, format!("the file is truncated: tensor `{name}` ends past its {len} bytes")));
            }
            tensors.insert(name, entry);
        }
        Ok(Self { file, path: path.display().to_string(), data_start, tensors })
    }
}

impl candle_nn::var_builder::SimpleBackend for FileBackend {
    fn get(
        &self,
        shape: Shape,
        name: &str,
        _: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let tensor = self.get_unchecked(name, dtype, dev)?;
        if tensor.shape() != &shape {
            candle_core::bail!("shape mismatch for {name}: expected {:?}, got {:?}", shape.dims(), tensor.dims());
        }
        Ok(tensor)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let Some((file_dtype, shape, start, end)) = self.tensors.get(name) else {
            candle_core::bail!("cannot find tensor {name} in {}", self.path)
        };
        let mut bytes = vec![0u8; (end - start) as usize];
        read_at(&self.file, &mut bytes, self.data_start + start)
            .map_err(|e| candle_core::Error::Msg(format!("read {name}: {e}")))?;
        Tensor::from_raw_buffer(&bytes, *file_dtype, shape, &Device::Cpu)?.to_dtype(dtype)?.to_device(dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }
}

/// Fills `buf` from `offset` without moving a shared cursor.
fn read_at(file: &std::fs::File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
    }
    #[cfg(windows)]
    {
        let mut done = 0;
        while done < buf.len() {
            let n = std::os::windows::fs::FileExt::seek_read(file, &mut buf[done..], offset + done as u64)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            done += n;
        }
        Ok(())
    }
}
