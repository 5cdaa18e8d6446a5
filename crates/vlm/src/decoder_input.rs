//! What every family's text decoder takes in: token embeddings with the image's among them. Its
//! own module, so that the Qwen decoder ([`super::text`]) and Gemma 4's
//! ([`super::families::gemma4`]) both use it without either importing the other.

use tch::Tensor;

/// The input of a decoder pass: token embeddings (batch, seq, hidden), the image's among them.
pub struct Embedded {
    pub embeds: Tensor,
    /// Gemma 4 E2B/E4B: each token's per-layer embeddings (batch, seq, layers, width).
    pub per_layer: Option<Tensor>,
    /// The image's run of positions in this pass, [start, end), where it has one.
    pub image_span: Option<(i64, i64)>,
}
