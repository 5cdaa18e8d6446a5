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
//!
//! The answers read one token a row, its last. Once no later layer reads the other tokens' keys,
//! values or states (after the last layer, or in Gemma 4 E2B/E4B after the last layer with keys
//! and values of its own), the stream narrows to those ([`LastTokens`]): that layer makes its keys
//! and values from every token and the rest of it from the last ones; the layers after it run on
//! the last ones alone.

use tch::{Device, Tensor};

/// How a pass's question rows go through the layers' token-wise parts: padded to the longest
/// through every layer (the old way, kept to measure against), or only their real tokens, and in
/// the last layers only the tokens the answers read (how releases are scored). The two give each
/// score the same bits on the CPU (tested); on a GPU the products have other row counts, which
/// may choose other kernels.
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

    /// One token a row, each real (rows of length one): the layout of a stream narrowed to its
    /// rows' last tokens, then [`SPARE`] copies of the first.
    fn one_a_row(rows: i64, device: Device) -> RealTokens {
        let index: Vec<i64> = (0..rows).chain(std::iter::repeat_n(0, SPARE as usize)).collect();
        RealTokens { index: Tensor::from_slice(&index).to_device(device), real: rows, rows, longest: 1 }
    }
}

/// The question rows of a scoring pass as the decoder runs them.
pub struct QuestionRows {
    /// Which tokens the stream holds until it narrows; `None`: every place of every row.
    pub real: Option<RealTokens>,
    /// Each row's last token, whose final hidden state the answer reads.
    pub last: LastTokens,
    /// Whether the stream narrows to `last` where no later layer reads the other tokens.
    pub narrows: bool,
}

impl QuestionRows {
    /// Rows of `lengths` real tokens, right-padded to `longest`, run the way `way` says.
    pub fn new(lengths: &[i64], longest: i64, way: SuffixRows, device: Device) -> QuestionRows {
        let real = match way {
            SuffixRows::Packed => RealTokens::new(lengths, longest, device),
            SuffixRows::Padded => None,
        };
        let last = LastTokens::new(lengths, longest, real.as_ref(), device);
        QuestionRows { real, last, narrows: way == SuffixRows::Packed }
    }
}

/// Each question row's last real token: where it lies in the stream, in the rows' padded layout
/// and in its own row, and the layout of a stream narrowed to these ([`RealTokens`] of one token
/// a row).
pub struct LastTokens {
    /// Each row's last token's place in the stream before it narrows, then [`SPARE`] copies of
    /// the first: the narrowed stream, like a packed one, keeps a tail no real token takes.
    in_stream: Tensor,
    /// Its place in the flattened (rows x longest) layout.
    in_rows: Tensor,
    /// Its place in its row.
    in_row: Tensor,
    longest: i64,
    narrowed: RealTokens,
}

impl LastTokens {
    /// The last tokens of rows of `lengths`, padded to `longest`, in a stream that holds the
    /// tokens `real` says (every place of every row where `None`).
    pub fn new(lengths: &[i64], longest: i64, real: Option<&RealTokens>, device: Device) -> LastTokens {
        let in_row: Vec<i64> = lengths.iter().map(|&len| len - 1).collect();
        let in_rows: Vec<i64> = in_row.iter().enumerate().map(|(row, &at)| row as i64 * longest + at).collect();
        let mut in_stream: Vec<i64> = match real {
            // Packed: row by row, each row's real tokens.
            Some(_) => lengths
                .iter()
                .scan(0, |end, &len| {
                    *end += len;
                    Some(*end - 1)
                })
                .collect(),
            None => in_rows.clone(),
        };
        in_stream.extend(std::iter::repeat_n(in_stream[0], SPARE as usize));
        let tensor = |v: &[i64]| Tensor::from_slice(v).to_device(device);
        LastTokens {
            in_stream: tensor(&in_stream),
            in_rows: tensor(&in_rows),
            in_row: tensor(&in_row),
            longest,
            narrowed: RealTokens::one_a_row(lengths.len() as i64, device),
        }
    }

    /// The stream (1, tokens, ...) or (rows, longest, ...) narrowed to each row's last token:
    /// (1, rows + spare, ...).
    pub fn pick(&self, stream: &Tensor) -> Tensor {
        stream.flatten(0, 1).index_select(0, &self.in_stream).unsqueeze(0)
    }

    /// `x` (n, rows, longest, ...) at each row's last token: (n, rows, 1, ...). For positions.
    pub fn pick_in_rows(&self, x: &Tensor) -> Tensor {
        let mut size = x.size();
        size[2] = 1;
        x.flatten(1, 2).index_select(1, &self.in_rows).view(size.as_slice())
    }

    /// Queries of the rows' last tokens (rows, heads, 1, d) in their rows' places, zeros in the
    /// others: (rows, heads, longest, d). Attention then runs on the shapes it runs on for every
    /// token, which keeps a CPU's bits: a product of one query a row sums in another order.
    pub fn spread(&self, q: &Tensor) -> Tensor {
        let mut size = q.size();
        let places = self.places(&size);
        size[2] = self.longest;
        Tensor::zeros(size.as_slice(), (q.kind(), q.device())).scatter(2, &places, q)
    }

    /// Attention's output at each row's last token: (rows, heads, longest, d) -> (rows, heads,
    /// 1, d).
    pub fn gather(&self, out: &Tensor) -> Tensor {
        let mut size = out.size();
        size[2] = 1;
        out.gather(2, &self.places(&size), false)
    }

    /// Each row's last place, as an index of `size` (rows, heads, 1, d).
    fn places(&self, size: &[i64]) -> Tensor {
        self.in_row.view([-1, 1, 1, 1]).expand(size, false)
    }

    /// The layout of the narrowed stream: one token a row.
    pub fn narrowed(&self) -> &RealTokens {
        &self.narrowed
    }

    /// The narrowed stream's (1, rows + spare, ...) rows alone: (rows, ...).
    pub fn rows_alone(&self, narrowed: &Tensor) -> Tensor {
        narrowed.squeeze_dim(0).narrow(0, 0, self.narrowed.rows)
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
    use crate::vlm::cache::tests::{small_text, SMALL_DECODERS};
    use crate::vlm::cache::DecoderCache;
    use crate::vlm::text::TextModel;
    use crate::vlm::weights::Weights;
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

    /// Question rows narrowed to their last tokens where no later layer reads the others give
    /// each row's final hidden state, to the bit, as their real tokens through every layer: on
    /// every kind of decoder of benches/configs (made small, as `vlm::cache`'s tests make them):
    /// Qwen's last layer full attention or linear, dense or experts, and Gemma 4's, with and
    /// without KV-shared layers after the last with keys and values of its own.
    #[test]
    fn rows_narrowed_to_their_last_tokens_give_every_rows_answer_as_whole_layers_do() {
        // One thread, as the engine scores: a product split between threads splits its rows by
        // their count.
        tch::set_num_threads(1);
        let cpu = (Kind::Int64, Device::Cpu);
        for (name, layers, kv_shared) in SMALL_DECODERS {
            let config = small_text(name, layers, kv_shared);
            let weights = Weights::random(Device::Cpu, Kind::Float, !config.text.tie_word_embeddings, 7);
            let text = TextModel::load(&weights, &config.text, config.image_token_id).unwrap();
            // Two images' prefixes of 12 tokens, then three questions each, of 1 to 6 tokens.
            let mut cache = DecoderCache::default();
            let prefix = Tensor::arange(12, cpu).view([1, 1, 12]).expand([3, 2, 12], false);
            text.fill_cache(&text.embed(&Tensor::randint(512, [2, 12], cpu)), &prefix, &mut cache, None);
            let input = text.embed(&Tensor::randint(512, [6, 6], cpu));
            let positions = Tensor::arange_start(12, 18, cpu).view([1, 1, 6]).expand([3, 6, 6], false);
            // Rows of several lengths (a packed stream), and of one (the rows as they are).
            for lengths in [[5, 2, 6, 6, 3, 1], [6; 6]] {
                let [whole, narrowed] = [false, true].map(|narrows| {
                    let rows = QuestionRows { narrows, ..QuestionRows::new(&lengths, 6, SuffixRows::Packed, Device::Cpu) };
                    assert_eq!(rows.real.is_some(), lengths[1] == 2);
                    text.forward_shared_prefix(&input, &positions, &mut cache.shared(), false, &rows)
                });
                assert_eq!(narrowed.size(), [6, config.text.hidden_size as i64], "{name}");
                let diff = (&whole - &narrowed).abs().max().double_value(&[]);
                assert!(whole.equal(&narrowed), "{name}, {layers} layers, rows of {lengths:?}: {diff}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "a row holds 1 to 4 real tokens")]
    fn a_row_longer_than_the_longest_is_a_bug() {
        let _ = RealTokens::new(&[5, 4], 4, Device::Cpu);
    }
}
