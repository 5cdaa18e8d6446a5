//! Gemma 4's RMSNorm, as its decoder and its vision tower run it.

use tch::{Kind, Tensor};

use crate::error::VlmError;
use crate::layers;
use crate::weights::Weights;

/// Gemma 4's RMSNorm: x * (mean(x^2) + eps)^-0.5, times the weight in f32 (or no weight).
pub(crate) struct Norm {
    weight: Option<Tensor>,
    eps: f64,
}

impl Norm {
    pub(crate) fn load(w: &Weights, prefix: &str, dim: i64, eps: f64) -> Result<Norm, VlmError> {
        Ok(Norm { weight: Some(w.get(&format!("{prefix}.weight"), &[dim])?.to_kind(Kind::Float)), eps })
    }

    pub(crate) fn unscaled(eps: f64) -> Norm {
        Norm { weight: None, eps }
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Tensor {
        let xf = x.to_kind(Kind::Float);
        let normed = if xf.device().is_cuda() {
            layers::rms_normalize(&xf, self.eps)
        } else {
            // transformers' Gemma 4 form, whose CPU bits the releases were made with.
            let mean_square = xf.pow_tensor_scalar(2).mean_dim(-1, true, Kind::Float) + self.eps;
            xf * mean_square.pow_tensor_scalar(-0.5)
        };
        match &self.weight {
            Some(w) => (normed * w).to_kind(x.kind()),
            None => normed.to_kind(x.kind()),
        }
    }
}
