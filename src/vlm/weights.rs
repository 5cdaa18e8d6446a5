//! Checkpoint tensors by name, loaded from safetensors files onto the engine's device and dtype.
//! Every tensor is fetched with the shape the config implies, so a mismatch names the tensor.

use std::collections::HashMap;
use std::path::PathBuf;

use tch::{Device, Kind, Tensor};

use super::error::VlmError;

pub struct Weights {
    tensors: HashMap<String, Tensor>,
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
    pub fn load(files: &[PathBuf], device: Device, kind: Kind) -> Result<Weights, VlmError> {
        let mut tensors = HashMap::new();
        for file in files {
            let read = Tensor::read_safetensors(file).map_err(|e| VlmError::NotA {
                path: file.clone(),
                what: "readable safetensors",
                source: e.into(),
            })?;
            for (name, tensor) in read {
                let kind = if tensor.is_floating_point() { kind } else { tensor.kind() };
                tensors.insert(normalize(&name), tensor.to_device(device).to_kind(kind));
            }
        }
        Ok(Weights { tensors })
    }

    pub fn parameter_count(&self) -> i64 {
        self.tensors.values().map(|t| t.numel() as i64).sum()
    }

    pub fn has(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    pub fn get(&self, name: &str, shape: &[i64]) -> Result<Tensor, VlmError> {
        let tensor = self.tensors.get(name).ok_or_else(|| VlmError::Input(format!("the checkpoint has no tensor {name}")))?;
        if tensor.size() != shape {
            return Err(VlmError::Input(format!("tensor {name} has shape {:?}; the config implies {shape:?}", tensor.size())));
        }
        Ok(tensor.shallow_clone())
    }
}
