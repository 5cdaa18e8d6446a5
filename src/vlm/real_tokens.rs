//! The real tokens of a scoring pass's question rows, one after another.
//!
//! A pass lays its questions out as rows right-padded to the longest: attention, the linear
//! layers' convolution and their delta rule read a row's tokens in order. Everything else in a
//! decoder layer (the projections, the norms, the MLP or the experts, the residual adds) treats
//! each token alone, and there the padding is work thrown away: a release's 57 questions run
//! from about 16 tokens to about 28 with the chat template's tail, so about a fifth of a padded
//! pass's question tokens are padding. [`RealTokens`] moves tensors between the two layouts: the
//! decoder keeps its residual stream packed, and a mixer lays out in rows only what reads rows
//! (its queries, keys and values after their projections), and packs its output again before
//! its projection out.
//!
//! A padding token comes after its row's real ones, so no real token ever reads it: causal
//! attention hides it, and the linear layers' state runs forward. Zeros there give the same bits
//! for every real token as anything finite would.

use tch::{Device, Tensor};

/// How a pass's question rows go through the layers' token-wise parts: padded to the longest
/// (the old way, kept to measure against) or only their real tokens (how releases are scored).
/// The two give each score the same bits on the CPU (tested); on a GPU the products have other
/// row counts, which may choose other kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuffixRows {
    Padded,
    Packed,
}

impl SuffixRows {
    pub fn name(self) -> &'static str {
        match self {
            SuffixRows::Padded => "padded",
            SuffixRows::Packed => "packed",
        }
    }
}

/// Tokens of padding kept after the real ones: a CPU kernel computes a tensor's last rows (a
/// matrix product's rows past its last whole block) or last elements (a vector loop's tail) by
/// another path, whose sums round otherwise. These take that path, so no real token's bits
/// depend on how many tokens precede it.
const SPARE: i64 = 16;

pub struct RealTokens {
    /// Each real token's place in the flattened (rows x longest) layout, in order, then
    /// [`SPARE`] places of padding.
    index: Tensor,
    real: i64,
    rows: i64,
    longest: i64,
}

impl RealTokens {
    /// The real tokens of rows of `lengths` tokens each, padded to `longest`; `None` when no row
    /// is padded (the packed layout would be the padded one).
    pub fn new(lengths: &[i64], longest: i64, device: Device) -> Option<RealTokens> {
        assert!(lengths.iter().all(|&len| (1..=longest).contains(&len)), "a row holds 1 to {longest} real tokens");
        let padding = lengths.iter().position(|&len| len < longest)?;
        let mut index: Vec<i64> =
            lengths.iter().enumerate().flat_map(|(row, &len)| (0..len).map(move |t| row as i64 * longest + t)).collect();
        let real = index.len() as i64;
        index.extend(std::iter::repeat_n(padding as i64 * longest + lengths[padding], SPARE as usize));
        Some(RealTokens { index: Tensor::from_slice(&index).to_device(device), real, rows: lengths.len() as i64, longest })
    }

    /// (rows, longest, ...) -> (1, real tokens + spare, ...): the real tokens, row by row, then
    /// [`SPARE`] copies of a padding token.
    pub fn pack(&self, x: &Tensor) -> Tensor {
        x.flatten(0, 1).index_select(0, &self.index).unsqueeze(0)
    }

    /// (1, real tokens + spare, ...) -> (rows, longest, ...), zeros where padding is.
    pub fn unpack(&self, x: &Tensor) -> Tensor {
        let mut size = x.size();
        size[1] = self.rows * self.longest;
        let real = x.squeeze_dim(0).narrow(0, 0, self.real);
        let flat = Tensor::zeros(&size[1..], (x.kind(), x.device())).index_copy(0, &self.index.narrow(0, 0, self.real), &real);
        size[0] = self.rows;
        size[1] = self.longest;
        flat.view(size.as_slice())
    }

    /// How many rows they come from.
    pub fn rows(&self) -> i64 {
        self.rows
    }
}

/// `x` (1, tokens, ...) laid out in rows (rows, longest, ...) where `real` says which tokens
/// are real; `x` itself where the stream is not packed.
pub fn rows_of(real: Option<&RealTokens>, x: Tensor) -> Tensor {
    match real {
        Some(real) => real.unpack(&x),
        None => x,
    }
}

/// `x` (rows, longest, ...) as its real tokens (1, tokens, ...) where `real` says which they
/// are; `x` itself where the stream is not packed.
pub fn tokens_of(real: Option<&RealTokens>, x: Tensor) -> Tensor {
    match real {
        Some(real) => real.pack(&x),
        None => x,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    /// 0, 1, 2, ... laid out in `shape`.
    fn ramp(shape: &[i64]) -> Tensor {
        Tensor::arange(shape.iter().product::<i64>(), (Kind::Float, Device::Cpu)).view(shape)
    }

    #[test]
    fn packing_keeps_each_rows_real_tokens_in_order_and_unpacking_puts_them_back() {
        let x = ramp(&[3, 4, 2]) + 1.0;
        let real = RealTokens::new(&[2, 4, 1], 4, Device::Cpu).expect("rows are padded");
        assert_eq!(real.real, 7);
        let packed = real.pack(&x);
        assert_eq!(packed.size(), [1, 7 + SPARE, 2]);
        let firsts = Vec::<f32>::try_from(packed.select(2, 0).flatten(0, -1)).unwrap();
        // Row 0's tokens 0 and 1, row 1's four, row 2's first; two values a token. Then copies
        // of the first padding token, row 0's third.
        assert_eq!(firsts[..7], [1.0, 3.0, 9.0, 11.0, 13.0, 15.0, 17.0]);
        assert!(firsts[7..].iter().all(|&v| v == 5.0), "{firsts:?}");
        let back = real.unpack(&packed);
        assert_eq!(back.size(), [3, 4, 2]);
        let kept = Tensor::from_slice(&[1i64, 1, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0]).view([3, 4, 1]).to_kind(Kind::Float);
        assert!(back.equal(&(&x * &kept)), "real tokens back in place, zeros in the padding");
    }

    #[test]
    fn rows_without_padding_need_no_packing() {
        assert!(RealTokens::new(&[4, 4], 4, Device::Cpu).is_none());
        let x = ramp(&[2, 4, 3]);
        assert!(rows_of(None, x.shallow_clone()).equal(&x) && tokens_of(None, x.shallow_clone()).equal(&x));
    }

    #[test]
    fn a_mixer_reads_rows_with_zeros_for_padding_and_its_real_tokens_go_back_packed() {
        let real = RealTokens::new(&[3, 5], 5, Device::Cpu).unwrap();
        let x = ramp(&[1, 8 + SPARE, 2]) + 1.0;
        // Each token's running sum along its row: what a causal mixer reads.
        let rows = rows_of(Some(&real), x);
        assert_eq!(rows.size(), [2, 5, 2]);
        assert_eq!(rows.narrow(1, 3, 2).narrow(0, 0, 1).abs().sum(Kind::Float).double_value(&[]), 0.0);
        let mixed = tokens_of(Some(&real), rows.cumsum(1, Kind::Float));
        assert_eq!(mixed.size(), [1, 8 + SPARE, 2]);
        let firsts = Vec::<f32>::try_from(mixed.select(2, 0).flatten(0, -1)).unwrap();
        assert_eq!(firsts[..8], [1.0, 4.0, 9.0, 7.0, 16.0, 27.0, 40.0, 55.0]);
        // The spare tokens: the first padding token's sum, row 0's fourth (its padding zeros).
        assert!(firsts[8..].iter().all(|&v| v == 9.0), "{firsts:?}");
    }

    #[test]
    #[should_panic(expected = "a row holds 1 to 4 real tokens")]
    fn a_row_longer_than_the_longest_is_a_bug() {
        let _ = RealTokens::new(&[5, 4], 4, Device::Cpu);
    }
}
