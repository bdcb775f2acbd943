//! Strict weight loading: a missing tensor or a shape that disagrees with the config is an
//! error naming the tensor, never a silent random initialisation; so is a checkpoint with
//! more layers than the config builds ([`Weights::check_no_extra_layers`]: the extra layers
//! would be ignored). The header is validated by the `safetensors` crate (offsets contiguous,
//! non-overlapping, sized by dtype and shape, covering the file) before any tensor is read.

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::{Linear, VarBuilder};
use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::kernels::LayerNorm;
use crate::{Error, ErrorKind, Result};

/// Tensors of one safetensors file, with the file's name for error messages.
#[derive(Clone)]
pub(crate) struct Weights<'a> {
    vb: VarBuilder<'a>,
    file: String,
    /// Whether tensors are created on request with random values (benchmarks on random
    /// weights) instead of read.
    random: Random,
    /// For a file: every tensor's name and shape, and the names read so far.
    shapes: Option<Arc<std::collections::BTreeMap<String, Vec<usize>>>>,
    used: Option<Arc<Mutex<HashSet<String>>>>,
}

/// Where a [`Weights`]' tensors come from when not from a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Random {
    /// Read from the file or builder.
    Off,
    /// Random, as variables of the builder's `VarMap`.
    Recorded,
    /// Random, as plain tensors owned by the model alone.
    Detached,
}

impl<'a> Weights<'a> {
    /// Opens a safetensors file, or a PyTorch checkpoint (a zip archive as `torch.save`
    /// writes it: a state dict, or a PyTorch Lightning `.ckpt` whose `state_dict` entry holds
    /// the tensors); tensors are read (and converted to `dtype` on `device`) as they are
    /// requested, so a checkpoint's other contents (optimizer state, queues) are never read.
    pub fn open(path: &Path, dtype: DType, device: &Device) -> Result<Weights<'static>> {
        let mut magic = [0u8; 4];
        let is_zip =
            std::fs::File::open(path).and_then(|f| read_at(&f, &mut magic, 0)).is_ok_and(|_| magic == *b"PK\x03\x04");
        let sharded = path.file_name().is_some_and(|n| n.to_string_lossy().ends_with(".index.json"));
        let (backend, shapes, used): (Box<dyn candle_nn::var_builder::SimpleBackend>, _, _) = if sharded {
            let backend = ShardedBackend::open(path)?;
            let shapes = backend.shapes();
            let used = backend.used.clone();
            (Box::new(backend), shapes, used)
        } else if is_zip {
            let backend = PthBackend::open(path)?;
            let shapes = backend.shapes();
            let used = backend.used.clone();
            (Box::new(backend), shapes, used)
        } else {
            let backend = FileBackend::open(path)?;
            let shapes = backend.tensors.iter().map(|(name, (_, shape, _, _))| (name.clone(), shape.clone())).collect();
            let used = backend.used.clone();
            (Box::new(backend), shapes, used)
        };
        let vb = VarBuilder::from_backend(backend, dtype, device.clone());
        Ok(Weights {
            vb,
            file: path.display().to_string(),
            random: Random::Off,
            shapes: Some(Arc::new(shapes)),
            used: Some(used),
        })
    }

    /// The shape of the tensor named `name` under this prefix, when the weights come from a
    /// file that holds it (to infer a configuration from a checkpoint).
    pub fn dims_of(&self, name: &str) -> Option<Vec<usize>> {
        self.shapes.as_ref()?.get(&self.full_name(name)).cloned()
    }

    /// Whether the file holds `name` under this prefix (`true` for random weights).
    pub fn has(&self, name: &str) -> bool {
        self.random != Random::Off || self.vb.contains_tensor(name)
    }

    pub fn dtype(&self) -> DType {
        self.vb.dtype()
    }

    /// Tensors already in memory (a checkpoint renamed or split at load), read as a file's
    /// are: each one requested is marked, so that [`Weights::check_every_tensor_used`] names any
    /// the model did not read. `name` stands for the file in messages.
    pub fn from_tensors(
        tensors: std::collections::HashMap<String, Tensor>,
        dtype: DType,
        device: &Device,
        name: &str,
    ) -> Weights<'static> {
        let shapes = tensors.iter().map(|(n, t)| (n.clone(), t.dims().to_vec())).collect();
        let backend = MapBackend { tensors, used: Default::default() };
        let used = backend.used.clone();
        Weights {
            vb: VarBuilder::from_backend(Box::new(backend), dtype, device.clone()),
            file: name.to_string(),
            random: Random::Off,
            shapes: Some(Arc::new(shapes)),
            used: Some(used),
        }
    }

    /// Weights from any VarBuilder (random weights for benchmarks).
    pub fn from_var_builder(vb: VarBuilder<'a>, name: &str) -> Self {
        Weights { vb, file: name.to_string(), random: Random::Off, shapes: None, used: None }
    }

    /// Creates every requested tensor with N(0, 0.02) values instead of reading it, as a
    /// variable of the builder's `VarMap` (which can then be saved).
    pub fn random(self) -> Self {
        Weights { random: Random::Recorded, ..self }
    }

    /// A model of random weights (benchmarks), `build` run over them. Each weight is a plain
    /// tensor made when the model asks for it, never a candle variable: an operation on a
    /// variable records its inputs for backpropagation, which would keep every activation of
    /// a forward pass alive until its output is dropped (on a GPU, 20 times PyTorch's memory:
    /// ViT-B/16 at batch 256 took 75 GB). Made one at a time, a weight the model repacks
    /// (see `transformer::Dense`) is let go at once, as when a checkpoint loads.
    pub fn build_random<T>(
        dtype: DType,
        device: &Device,
        name: &str,
        build: impl Fn(&Weights) -> Result<T>,
    ) -> Result<T> {
        let mut weights = Weights::from_var_builder(VarBuilder::zeros(dtype, device), name);
        weights.random = Random::Detached;
        build(&weights)
    }

    pub fn pp(&self, prefix: impl ToString) -> Self {
        Weights { vb: self.vb.pp(prefix), ..self.clone() }
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
        match self.random {
            Random::Off => {}
            Random::Recorded => {
                let init = candle_nn::Init::Randn { mean: 0.0, stdev: 0.02 };
                return self
                    .vb
                    .get_with_hints(shape, name, init)
                    .map_err(|e| Error::compute("create random weights", e));
            }
            Random::Detached => {
                return Tensor::randn(0f32, 0.02, shape, self.vb.device())
                    .and_then(|t| t.to_dtype(self.vb.dtype()))
                    .map_err(|e| Error::compute("create random weights", e));
            }
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

    /// After a model is built: refuses tensors of layers beyond those it read, e.g.
    /// `encoder.layers.12.*` when the config builds 12 layers (0–11). A list of layers is
    /// recognised by a numeric name component whose prefix the model read with lower
    /// numbers, so no per-architecture list of names is needed.
    pub fn check_no_extra_layers(&self) -> Result<()> {
        let (Some(shapes), Some(used)) = (&self.shapes, &self.used) else { return Ok(()) };
        let used =
            used.lock().map_err(|_| Error::new(ErrorKind::BadWeights, "load weights: a loader thread failed"))?;
        // For each layer list the model read: its prefix and how many layers it read.
        let mut read: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        for name in used.iter() {
            if let Some((prefix, index)) = layer_of(name) {
                let count = read.entry(prefix).or_default();
                *count = (*count).max(index + 1);
            }
        }
        let mut extra: Vec<&String> = shapes
            .keys()
            .filter(|n| !used.contains(*n))
            .filter(|n| {
                layer_of(n).is_some_and(|(prefix, index)| read.get(&prefix).is_some_and(|&count| index >= count))
            })
            .collect();
        extra.sort();
        if let Some(first) = extra.first() {
            let (prefix, _) = layer_of(first).unwrap_or_default();
            return Err(Error::new(
                ErrorKind::BadWeights,
                format!(
                    "load weights {}: tensor `{first}` (and {} more) belongs to a layer of `{prefix}` beyond the {} that config.json builds: the config and the checkpoint disagree",
                    self.file,
                    extra.len() - 1,
                    read[&prefix]
                ),
            ));
        }
        Ok(())
    }

    /// After the model is built: every tensor of the file was read, or is one the
    /// architecture is known not to use (`known_unused`: buffers it recomputes, heads of
    /// other tasks, training state). Anything else means the checkpoint is of another
    /// architecture or variant than the config describes, and would be silently ignored.
    /// A pattern is a whole name, a prefix ending in `.`, a suffix starting with `.`, or a
    /// `.middle.` part. Checks the extra layers first, for their clearer message.
    pub fn check_every_tensor_used(&self, architecture: &str, known_unused: &[&str]) -> Result<()> {
        self.check_no_extra_layers()?;
        let (Some(shapes), Some(used)) = (&self.shapes, &self.used) else { return Ok(()) };
        let used =
            used.lock().map_err(|_| Error::new(ErrorKind::BadWeights, "load weights: a loader thread failed"))?;
        let known = |name: &str| {
            known_unused.iter().any(|p| match (p.starts_with('.'), p.ends_with('.')) {
                (true, true) => name.contains(p) || name.starts_with(&p[1..]),
                (true, false) => name.ends_with(p) || name == &p[1..],
                (false, true) => name.starts_with(p),
                (false, false) => name == *p,
            })
        };
        let unused: Vec<&String> = shapes.keys().filter(|n| !used.contains(*n) && !known(n)).collect();
        if let Some(first) = unused.first() {
            return Err(Error::new(
                ErrorKind::BadWeights,
                format!(
                    "load weights {}: tensor `{first}` (and {} more) is not part of the {architecture} model the config describes: the checkpoint is of another architecture or variant",
                    self.file,
                    unused.len() - 1
                ),
            ));
        }
        Ok(())
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

/// The layer list a tensor name belongs to: the prefix before its first numeric component
/// and that number (`vision_model.encoder.layers.3.mlp.fc1.weight` → (`…layers`, 3)).
fn layer_of(name: &str) -> Option<(String, usize)> {
    let parts: Vec<&str> = name.split('.').collect();
    let at = parts.iter().position(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))?;
    Some((parts[..at].join("."), parts[at].parse().ok()?))
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
    /// The names read so far (see [`Weights::check_no_extra_layers`]).
    used: Arc<Mutex<HashSet<String>>>,
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
        // The safetensors crate's own validation: offsets start at 0, follow each other with
        // neither gap nor overlap, and match each tensor's dtype and shape.
        let metadata: safetensors::tensor::Metadata =
            serde_json::from_slice(&header).map_err(|e| bad(path, format!("its header is not valid: {e}")))?;
        let covered = metadata.tensors().values().map(|t| t.data_offsets.1).max().unwrap_or(0) as u64;
        if 8 + header_len + covered != len {
            return Err(bad(
                path,
                format!("its tensors cover {covered} bytes of data but the file holds {}", len - 8 - header_len),
            ));
        }
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
        Ok(Self { file, path: path.display().to_string(), data_start, tensors, used: Default::default() })
    }
}

/// `tensor` if it has `shape`, else the error naming both.
fn of_shape(tensor: Tensor, shape: &Shape, name: &str) -> candle_core::Result<Tensor> {
    if tensor.shape() != shape {
        candle_core::bail!("shape mismatch for {name}: expected {:?}, got {:?}", shape.dims(), tensor.dims());
    }
    Ok(tensor)
}

/// Notes that `name` was read, for [`Weights::check_every_tensor_used`] (a poisoned set only
/// loses that check's precision, never the load).
fn mark_read(used: &Mutex<HashSet<String>>, name: &str) {
    if let Ok(mut used) = used.lock() {
        used.insert(name.to_string());
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
        of_shape(self.get_unchecked(name, dtype, dev)?, &shape, name)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let Some((file_dtype, shape, start, end)) = self.tensors.get(name) else {
            candle_core::bail!("cannot find tensor {name} in {}", self.path)
        };
        mark_read(&self.used, name);
        let mut bytes = vec![0u8; (end - start) as usize];
        read_at(&self.file, &mut bytes, self.data_start + start)
            .map_err(|e| candle_core::Error::Msg(format!("read {name}: {e}")))?;
        Tensor::from_raw_buffer(&bytes, *file_dtype, shape, &Device::Cpu)?.to_dtype(dtype)?.to_device(dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }
}

/// Tensors in memory, marked as they are read ([`Weights::from_tensors`]).
struct MapBackend {
    tensors: std::collections::HashMap<String, Tensor>,
    used: Arc<Mutex<HashSet<String>>>,
}

impl candle_nn::var_builder::SimpleBackend for MapBackend {
    fn get(
        &self,
        shape: Shape,
        name: &str,
        _: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        of_shape(self.get_unchecked(name, dtype, dev)?, &shape, name)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let Some(tensor) = self.tensors.get(name) else { candle_core::bail!("cannot find tensor {name}") };
        mark_read(&self.used, name);
        tensor.to_dtype(dtype)?.to_device(dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }
}

/// A checkpoint in shards: the safetensors (or PyTorch) files its index names, each validated
/// as one file is, every tensor in exactly one of them.
struct ShardedBackend {
    shards: Vec<Box<dyn candle_nn::var_builder::SimpleBackend>>,
    /// Every tensor's shard and shape.
    owner: std::collections::HashMap<String, (usize, Vec<usize>)>,
    used: Arc<Mutex<HashSet<String>>>,
}

impl ShardedBackend {
    fn open(index: &Path) -> Result<Self> {
        let dir = index.parent().unwrap_or(Path::new("."));
        let used: Arc<Mutex<HashSet<String>>> = Default::default();
        let (mut shards, mut owner) = (Vec::new(), std::collections::HashMap::new());
        for name in crate::hub::shard_names(index)? {
            let path = dir.join(&name);
            let (shard, shapes): (Box<dyn candle_nn::var_builder::SimpleBackend>, _) = if name.ends_with(".bin") {
                let mut shard = PthBackend::open(&path)?;
                shard.used = used.clone();
                let shapes = shard.shapes();
                (Box::new(shard), shapes)
            } else {
                let mut shard = FileBackend::open(&path)?;
                shard.used = used.clone();
                let shapes = shard.tensors.iter().map(|(n, (_, shape, _, _))| (n.clone(), shape.clone())).collect();
                (Box::new(shard), shapes)
            };
            for (tensor, shape) in shapes {
                if owner.insert(tensor.clone(), (shards.len(), shape)).is_some() {
                    return Err(bad(index, format!("tensor `{tensor}` is in more than one shard (again in {name})")));
                }
            }
            shards.push(shard);
        }
        Ok(Self { shards, owner, used })
    }

    fn shapes(&self) -> std::collections::BTreeMap<String, Vec<usize>> {
        self.owner.iter().map(|(name, (_, shape))| (name.clone(), shape.clone())).collect()
    }

    fn shard(&self, name: &str) -> candle_core::Result<&dyn candle_nn::var_builder::SimpleBackend> {
        match self.owner.get(name) {
            Some(&(i, _)) => Ok(self.shards[i].as_ref()),
            None => candle_core::bail!("cannot find tensor {name} in any shard"),
        }
    }
}

impl candle_nn::var_builder::SimpleBackend for ShardedBackend {
    fn get(
        &self,
        shape: Shape,
        name: &str,
        init: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        self.shard(name)?.get(shape, name, init, dtype, dev)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        self.shard(name)?.get_unchecked(name, dtype, dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.owner.contains_key(name)
    }
}

/// A PyTorch checkpoint read with candle's pickle reader: Lightning's `.ckpt` (tensors under
/// `state_dict`) or a bare state dict.
struct PthBackend {
    tensors: candle_core::pickle::PthTensors,
    path: String,
    used: Arc<Mutex<HashSet<String>>>,
}

/// Every tensor of a PyTorch checkpoint but those named in `skip`, in its own dtype (for
/// conversion): `(tensors, names skipped)`.
pub(crate) fn read_checkpoint(
    path: &Path,
    skip: &[&str],
) -> Result<(std::collections::HashMap<String, Tensor>, Vec<String>)> {
    let backend = PthBackend::open(path)?;
    let mut names: Vec<&String> = backend.tensors.tensor_infos().keys().collect();
    names.sort();
    let (mut tensors, mut skipped) = (std::collections::HashMap::new(), Vec::new());
    for name in names {
        if skip.contains(&name.as_str()) {
            skipped.push(name.clone());
            continue;
        }
        let tensor = backend
            .tensors
            .get(name)
            .and_then(|t| t.ok_or_else(|| candle_core::Error::Msg("not found".into())))
            .and_then(|t| t.contiguous())
            .map_err(|e| bad(path, format!("tensor `{name}`: {e}")))?;
        tensors.insert(name.clone(), tensor);
    }
    Ok((tensors, skipped))
}

impl PthBackend {
    fn open(path: &Path) -> Result<Self> {
        let read = |key| {
            candle_core::pickle::PthTensors::new(path, key)
                .map_err(|e| bad(path, format!("it is not a readable PyTorch checkpoint: {e}")))
        };
        // A Lightning checkpoint keeps its tensors under `state_dict`; a bare state dict has
        // no such key.
        let tensors = match read(Some("state_dict")) {
            Ok(tensors) if !tensors.tensor_infos().is_empty() => tensors,
            _ => read(None)?,
        };
        if tensors.tensor_infos().is_empty() {
            return Err(bad(path, "it holds no tensors (neither a state dict nor a `state_dict` entry)".into()));
        }
        Ok(Self { tensors, path: path.display().to_string(), used: Default::default() })
    }

    fn shapes(&self) -> std::collections::BTreeMap<String, Vec<usize>> {
        self.tensors.tensor_infos().iter().map(|(name, info)| (name.clone(), info.layout.dims().to_vec())).collect()
    }
}

impl candle_nn::var_builder::SimpleBackend for PthBackend {
    fn get(
        &self,
        shape: Shape,
        name: &str,
        _: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        of_shape(self.get_unchecked(name, dtype, dev)?, &shape, name)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let Some(tensor) = self.tensors.get(name)? else {
            candle_core::bail!("cannot find tensor {name} in {}", self.path)
        };
        mark_read(&self.used, name);
        tensor.contiguous()?.to_dtype(dtype)?.to_device(dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.tensors.tensor_infos().contains_key(name)
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
