//! The answer to one yes/no question: what the engine computes, the score cache stores and the
//! shards ship.

use serde::{Deserialize, Serialize};

/// The logits of the "Yes" and "No" answer tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct YesNo {
    pub logit_yes: f32,
    pub logit_no: f32,
}

impl YesNo {
    /// Whether both logits are finite numbers: a NaN or an infinity is a broken model or an f16
    /// overflow, never a score.
    pub fn is_finite(&self) -> bool {
        self.logit_yes.is_finite() && self.logit_no.is_finite()
    }

    /// Softmax over the two answer tokens, computed in f64 from the f32 logits.
    pub fn p_yes(&self) -> f64 {
        1.0 / (1.0 + (f64::from(self.logit_no) - f64::from(self.logit_yes)).exp())
    }
}
