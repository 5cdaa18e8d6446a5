//! Checkpoint tensors by name, loaded from safetensors files onto the engine's device and dtype.
//! Every tensor is fetched with the shape the config implies, so a mismatch names the tensor.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::PathBuf;

use tch::{Device, Kind, Tensor};

use super::error::VlmError;
use super::safetensors_file::SafetensorsFile;

pub struct Weights {
    /// In a cell so that [`Weights::take`] can hand a tensor over for good (its memory freed
    /// once the layer is done with it) while the loaders share `&Weights`.
    tensors: RefCell<HashMap<String, Tensor>>,
    /// Parameters of the tensors taken out of `tensors`.
    taken: Cell<i64>,
    /// The file each tensor was read from, for errors that name it.
    sources: HashMap<String, PathBuf>,
    /// Set for [`Weights::random`]: tensors are made on request instead of read.
    random: Option<RandomWeights>,
}

/// Random weights made on the device in the shape each layer asks for, for throughput
/// benchmarks of full-size models that are not on the machine (no download, no disk).
struct RandomWeights {
    device: Device,
    kind: Kind,
    /// Whether the checkpoint would have an `lm_head.weight` (untied embeddings).
    lm_head: bool,
    parameters: std::cell::Cell<i64>,
}

/// Draws per random tensor beyond which the draws repeat (4 MiB of f32).
const RANDOM_POOL: i64 = 1 << 20;

impl RandomWeights {
    /// A tensor of N(0, 0.02^2) draws. Up to [`RANDOM_POOL`] elements they are all drawn; a
    /// larger tensor repeats its first `RANDOM_POOL` draws. libtorch draws on one thread, and a
    /// full-size slice asks for about 2e9 (the 8B's embedding alone is 2.5 GB in f32): drawn, they
    /// took 26 s of the 29 s a CPU run of one slice took; repeated, the copy runs on every thread.
    /// What a benchmark measures does not depend on the values, and every router's weights (at
    /// most 128 x 2,816) fit in one pool, so the experts' choice stays random.
    fn normal(&self, shape: &[i64]) -> Tensor {
        let options = (Kind::Float, self.device);
        let numel: i64 = shape.iter().product();
        if numel <= RANDOM_POOL {
            return Tensor::empty(shape, options).normal_(0.0, 0.02);
        }
        let pool = Tensor::empty([1, RANDOM_POOL], options).normal_(0.0, 0.02);
        // In place: no second full-size temporary.
        let tensor = Tensor::empty([numel], options);
        let whole = numel / RANDOM_POOL;
        let mut repeats = tensor.narrow(0, 0, whole * RANDOM_POOL).view([whole, RANDOM_POOL]);
        repeats.copy_(&pool.expand([whole, RANDOM_POOL], false));
        let rest = numel - whole * RANDOM_POOL;
        let mut tail = tensor.narrow(0, whole * RANDOM_POOL, rest);
        tail.copy_(&pool.view([-1]).narrow(0, 0, rest));
        tensor.view(shape)
    }
}

/// One naming for both checkpoint layouts: the hub's (`visual.*`, `model.*`, `lm_head.*`) and
/// transformers 5's in-memory one (`model.visual.*`, `model.language_model.*`).
fn normalize(name: &str) -> String {
    if let Some(rest) = name.strip_prefix("model.visual.") {
        format!("visual.{rest}")
    } else if let Some(rest) = name.strip_prefix("model.language_model.") {
        format!("model.{rest}")
    } else {
        name.to_string()
    }
}

impl Weights {
    /// Every tensor of `files`, read one at a time (see [`SafetensorsFile`]) and moved to
    /// `device`; floating-point tensors take `kind`, others keep theirs (and are refused when a
    /// layer asks for them). Resident memory while loading stays about the weights' size.
    pub fn load(files: &[PathBuf], device: Device, kind: Kind) -> Result<Weights, VlmError> {
        let mut tensors = HashMap::new();
        let mut sources = HashMap::new();
        for file in files {
            let read = SafetensorsFile::open(file)?;
            for name in read.names() {
                let tensor = read.read(name)?;
                let kind = if tensor.is_floating_point() { kind } else { tensor.kind() };
                sources.insert(normalize(name), file.clone());
                tensors.insert(normalize(name), tensor.to_device(device).to_kind(kind));
            }
        }
        Ok(Weights { tensors: RefCell::new(tensors), taken: Cell::new(0), sources, random: None })
    }

    /// Weights drawn from N(0, 0.02^2) (norm scales 1, biases 0; see [`RandomWeights::normal`]
    /// for the largest) as the model asks for them, seeded, on `device` in `kind`. Their outputs mean nothing; their cost is the real model's.
    pub fn random(device: Device, kind: Kind, lm_head: bool, seed: i64) -> Weights {
        tch::manual_seed(seed);
        let random = RandomWeights { device, kind, lm_head, parameters: std::cell::Cell::new(0) };
        Weights { tensors: RefCell::default(), taken: Cell::new(0), sources: HashMap::new(), random: Some(random) }
    }

    pub fn parameter_count(&self) -> i64 {
        match &self.random {
            Some(r) => r.parameters.get(),
            None => self.tensors.borrow().values().map(|t| t.numel() as i64).sum::<i64>() + self.taken.get(),
        }
    }

    pub fn has(&self, name: &str) -> bool {
        match &self.random {
            Some(r) => name != "lm_head.weight" || r.lm_head,
            None => self.tensors.borrow().contains_key(name),
        }
    }

    /// [`Weights::get`], and the tensor leaves these weights: a layer that copies it into a
    /// larger one (a stack of experts) frees it when done, so loading never holds both.
    pub fn take(&self, name: &str, shape: &[i64]) -> Result<Tensor, VlmError> {
        let tensor = self.get(name, shape)?;
        if self.random.is_none() {
            self.tensors.borrow_mut().remove(name);
            self.taken.set(self.taken.get() + tensor.numel() as i64);
        }
        Ok(tensor)
    }

    /// The stored shape of a tensor of the checkpoint (None for random weights, or no such tensor).
    pub fn shape(&self, name: &str) -> Option<Vec<i64>> {
        self.tensors.borrow().get(name).map(Tensor::size)
    }

    pub fn get(&self, name: &str, shape: &[i64]) -> Result<Tensor, VlmError> {
        if let Some(r) = &self.random {
            let options = (Kind::Float, r.device);
            let tensor = if name.ends_with(".bias") {
                Tensor::zeros(shape, options)
            } else if name.contains("norm") || name.ends_with("ln_q.weight") || name.contains("scale") || name.ends_with("layer_scalar") {
                Tensor::ones(shape, options)
            } else {
                r.normal(shape)
            };
            r.parameters.set(r.parameters.get() + tensor.numel() as i64);
            return Ok(tensor.to_kind(r.kind));
        }
        let tensors = self.tensors.borrow();
        let Some(tensor) = tensors.get(name) else {
            let mut files: Vec<String> = self.sources.values().map(|p| p.display().to_string()).collect();
            files.sort();
            files.dedup();
            return Err(VlmError::Input(format!("the checkpoint ({}) has no tensor {name}", files.join(", "))));
        };
        if tensor.size() != shape {
            let message = format!("tensor {name} has shape {:?}; config.json implies {shape:?}", tensor.size());
            return Err(VlmError::File { path: self.sources[name].clone(), message });
        }
        // Every parameter is a float; the same bytes read as integers would be other numbers
        // (and an integer embedding table fails inside libtorch).
        if !tensor.is_floating_point() {
            let message = format!(
                "tensor {name} is stored as {}; a parameter must be a floating-point type (F64, F32, F16 or BF16, converted to the run's dtype)",
                dtype_name(tensor.kind())
            );
            return Err(VlmError::File { path: self.sources[name].clone(), message });
        }
        Ok(tensor.shallow_clone())
    }
}

/// A tensor kind as safetensors' header spells it.
fn dtype_name(kind: Kind) -> String {
    match kind {
        Kind::Bool => "BOOL".into(),
        Kind::Uint8 => "U8".into(),
        Kind::Int8 => "I8".into(),
        Kind::Int16 => "I16".into(),
        Kind::Int => "I32".into(),
        Kind::Int64 => "I64".into(),
        other => format!("{other:?}"),
    }
}
