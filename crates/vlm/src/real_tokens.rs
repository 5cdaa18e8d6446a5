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
//! The questions of one image often begin alike ("Does this radiograph show ..." starts 20 of
//! `specs/s1a.yaml`'s 57). A token's hidden state depends on the tokens before it alone, so where
//! questions of one image share their first tokens, those tokens' states are the same in each:
//! the stream then holds each such token once ([`SuffixRows::Deduplicated`]), and laying out in
//! rows copies it into every row that has it. Attention and the linear layers still read every
//! row whole; the token-wise parts see each shared token once.
//!
//! The answers read one token a row, its last. Once no later layer reads the other tokens' keys,
//! values or states (after the last layer, or in Gemma 4 E2B/E4B after the last layer with keys
//! and values of its own), the stream narrows to those ([`LastTokens`]): that layer makes its keys
//! and values from every token and the rest of it from the last ones; the layers after it run on
//! the last ones alone.

use std::collections::HashMap;

use tch::{Device, Tensor};

use super::prefix_queries::{ImageQueries, PrefixQueries};

/// How a pass's question rows go through the layers' token-wise parts: padded to the longest
/// through every layer (the old way, kept to measure against); only their real tokens, and in
/// the last layers only the tokens the answers read; or that, with the tokens an image's
/// questions share from their start held once (how releases are scored). The three give each
/// score the same bits on the CPU (tested); on a GPU the products have other row counts, which
/// may choose other kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuffixRows {
    Padded,
    Packed,
    Deduplicated,
}

impl SuffixRows {
    pub fn name(self) -> &'static str {
        match self {
            SuffixRows::Padded => "padded",
            SuffixRows::Packed => "packed",
            SuffixRows::Deduplicated => "deduplicated",
        }
    }
}

/// Tokens of padding kept after the real ones: a CPU kernel computes a tensor's last rows (a
/// matrix product's rows past its last whole block) or last elements (a vector loop's tail) by
/// another path, whose sums round otherwise. These take that path, so no real token's bits
/// depend on how many tokens precede it.
pub(super) const SPARE: i64 = 16;

pub struct RealTokens {
    /// Each token the stream holds: its place in the flattened (rows x longest) layout (the
    /// first of its places, where rows share it), in order, then [`SPARE`] copies of one place
    /// (the first padding place, or the first token's where no row is padded).
    index: Tensor,
    /// The places a token takes after its first (where rows share it), and that token in the
    /// stream: unpacking copies it there too. `None` where no row shares a token.
    repeats: Option<(Tensor, Tensor)>,
    /// Each place of the flattened layout: the stream's token there, -1 where the place is
    /// padding.
    source: Vec<i64>,
    real: i64,
    rows: i64,
    longest: i64,
    /// Each real token once, image by image, for the prefix part of attention (set for a pass's
    /// images by [`QuestionRows::new`]).
    prefix_queries: Option<PrefixQueries>,
}

impl RealTokens {
    /// The real tokens of rows of `lengths` tokens each, padded to `longest`; `None` when no row
    /// is padded (the packed layout would be the padded one).
    pub fn new(lengths: &[i64], longest: i64, device: Device) -> Option<RealTokens> {
        check_lengths(lengths, longest);
        lengths.iter().any(|&len| len < longest).then(|| RealTokens::holding(lengths, longest, |_, _, new| new, device))
    }

    /// The real tokens of `rows`, those an image's rows share from their start held once: a
    /// token is shared where rows of one image have the same ids up to it. `None` when no row is
    /// padded and none shares a token (the stream would be the rows).
    pub fn deduplicated(rows: &RowIds<'_>, device: Device) -> Option<RealTokens> {
        check_lengths(rows.lengths, rows.longest);
        let longest = rows.longest as usize;
        let image_of: Vec<usize> = rows.per_image.iter().enumerate().flat_map(|(image, &n)| std::iter::repeat_n(image, n)).collect();
        assert_eq!(image_of.len(), rows.lengths.len(), "rows.per_image counts every row");
        // A token is its image, the stream token before it in its row, and its id: a trie of
        // each image's rows.
        let mut known: HashMap<(usize, i64, i64), i64> = HashMap::new();
        let mut before = -1;
        let real = RealTokens::holding(
            rows.lengths,
            rows.longest,
            |row, t, new| {
                if t == 0 {
                    before = -1;
                }
                before = *known.entry((image_of[row], before, rows.ids[row * longest + t])).or_insert(new);
                before
            },
            device,
        );
        (real.repeats.is_some() || rows.lengths.iter().any(|&len| len < rows.longest)).then_some(real)
    }

    /// The stream of `lengths` rows' real tokens, row by row: `token_of(row, t, new)` says which
    /// stream token a place holds, `new` where it is a token of its own (the next in the stream).
    fn holding(lengths: &[i64], longest: i64, mut token_of: impl FnMut(usize, usize, i64) -> i64, device: Device) -> RealTokens {
        let rows = lengths.len() as i64;
        let mut index: Vec<i64> = Vec::new();
        let (mut repeat_places, mut repeated) = (Vec::new(), Vec::new());
        let mut source = vec![-1; (rows * longest) as usize];
        for (row, &len) in lengths.iter().enumerate() {
            for t in 0..len as usize {
                let place = row * longest as usize + t;
                let new = index.len() as i64;
                source[place] = token_of(row, t, new);
                if source[place] == new {
                    index.push(place as i64);
                } else {
                    repeat_places.push(place as i64);
                    repeated.push(source[place]);
                }
            }
        }
        let real = index.len() as i64;
        // The spare tokens copy the first padding place, or the first token where none is.
        let spare = source.iter().position(|&s| s < 0).unwrap_or(0) as i64;
        index.extend(std::iter::repeat_n(spare, SPARE as usize));
        let tensor = |v: &[i64]| Tensor::from_slice(v).to_device(device);
        let repeats = (!repeated.is_empty()).then(|| (tensor(&repeat_places), tensor(&repeated)));
        RealTokens { index: tensor(&index), repeats, source, real, rows, longest, prefix_queries: None }
    }

    /// (rows, longest, ...) -> (1, real tokens + spare, ...): the real tokens, row by row (a
    /// shared token where it first comes), then the `SPARE` copies.
    pub fn pack(&self, x: &Tensor) -> Tensor {
        x.flatten(0, 1).index_select(0, &self.index).unsqueeze(0)
    }

    /// (1, real tokens + spare, ...) -> (rows, longest, ...): each token in every place it takes,
    /// zeros where padding is.
    pub fn unpack(&self, x: &Tensor) -> Tensor {
        let mut size = x.size();
        size[1] = self.rows * self.longest;
        let real = x.squeeze_dim(0).narrow(0, 0, self.real);
        let mut flat = Tensor::zeros(&size[1..], (x.kind(), x.device())).index_copy(0, &self.index.narrow(0, 0, self.real), &real);
        if let Some((places, tokens)) = &self.repeats {
            flat = flat.index_copy(0, places, &real.index_select(0, tokens));
        }
        size[0] = self.rows;
        size[1] = self.longest;
        flat.view(size.as_slice())
    }

    /// How many places of the rows repeat a token the stream holds once (none but where rows
    /// share their first tokens).
    pub fn held_once(&self) -> usize {
        self.repeats.as_ref().map_or(0, |(places, _)| places.size()[0] as usize)
    }

    /// How many rows they come from.
    pub fn rows(&self) -> i64 {
        self.rows
    }

    /// The queries whose prefix part attention computes: each token the stream holds, once.
    pub fn prefix_queries(&self) -> Option<&PrefixQueries> {
        self.prefix_queries.as_ref()
    }

    /// Each token the stream holds, chosen once, at its first place, for a pass of `images`
    /// images of as many rows each: the stream holds an image's tokens one after another, and a
    /// token only where it first comes.
    fn choose_prefix_queries(&self, images: usize, device: Device) -> PrefixQueries {
        let places = self.source.len() / images;
        let chosen: Vec<ImageQueries> = self
            .source
            .chunks(places)
            .map(|image| {
                let first = image.iter().copied().find(|&token| token >= 0).expect("an image's rows have a real token");
                let mut chosen = Vec::new();
                let of_place = image
                    .iter()
                    .enumerate()
                    .map(|(place, &token)| {
                        (token >= 0).then(|| {
                            if token - first == chosen.len() as i64 {
                                chosen.push(place as i64);
                            }
                            token - first
                        })
                    })
                    .collect();
                ImageQueries { chosen, of_place }
            })
            .collect();
        PrefixQueries::new(&chosen, SPARE as usize, device)
    }

    /// Where the token at `place` of the flattened (rows x longest) layout is in the stream.
    fn in_stream(&self, place: i64) -> i64 {
        self.source[place as usize]
    }

    /// One token a row, each real (rows of length one): the layout of a stream narrowed to its
    /// rows' last tokens, then [`SPARE`] copies of the first.
    fn one_a_row(rows: i64, device: Device) -> RealTokens {
        RealTokens::holding(&vec![1; rows as usize], 1, |_, _, new| new, device)
    }
}

fn check_lengths(lengths: &[i64], longest: i64) {
    assert!(lengths.iter().all(|&len| (1..=longest).contains(&len)), "a row holds 1 to {longest} real tokens");
}

/// A pass's question rows as the host laid them out.
pub struct RowIds<'a> {
    /// Each row's token ids after the prefix, right-padded to `longest` (rows x longest).
    pub ids: &'a [i64],
    /// Each row's real tokens.
    pub lengths: &'a [i64],
    pub longest: i64,
    /// How many rows each image has, image by image.
    pub per_image: &'a [usize],
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
    /// The rows of `ids`, run the way `way` says.
    pub fn new(ids: &RowIds<'_>, way: SuffixRows, device: Device) -> QuestionRows {
        let mut real = match way {
            SuffixRows::Deduplicated => RealTokens::deduplicated(ids, device),
            SuffixRows::Packed => RealTokens::new(ids.lengths, ids.longest, device),
            SuffixRows::Padded => None,
        };
        let images = ids.per_image.len();
        assert!(ids.per_image.iter().all(|&n| n == ids.per_image[0]), "every image of a pass has as many rows");
        if let Some(real) = &mut real {
            real.prefix_queries = Some(real.choose_prefix_queries(images, device));
        }
        let mut last = LastTokens::new(ids.lengths, ids.longest, real.as_ref(), device);
        last.prefix_queries = Some(LastTokens::choose_prefix_queries(ids.lengths, ids.longest, images, device));
        QuestionRows { real, last, narrows: way != SuffixRows::Padded }
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
    /// Each row's last token, for the prefix part of attention in the layers that run the last
    /// tokens alone (set for a pass's images by [`QuestionRows::new`]).
    prefix_queries: Option<PrefixQueries>,
}

impl LastTokens {
    /// The last tokens of rows of `lengths`, padded to `longest`, in a stream that holds the
    /// tokens `real` says (every place of every row where `None`).
    pub fn new(lengths: &[i64], longest: i64, real: Option<&RealTokens>, device: Device) -> LastTokens {
        let in_row: Vec<i64> = lengths.iter().map(|&len| len - 1).collect();
        let in_rows: Vec<i64> = in_row.iter().enumerate().map(|(row, &at)| row as i64 * longest + at).collect();
        let mut in_stream: Vec<i64> = match real {
            Some(real) => in_rows.iter().map(|&place| real.in_stream(place)).collect(),
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
            prefix_queries: None,
        }
    }

    /// The queries whose prefix part attention computes in the layers that run the last tokens
    /// alone: those tokens.
    pub fn prefix_queries(&self) -> Option<&PrefixQueries> {
        self.prefix_queries.as_ref()
    }

    /// The last token of each of rows of `lengths`, padded to `longest`, for a pass of `images`
    /// images of as many rows each.
    fn choose_prefix_queries(lengths: &[i64], longest: i64, images: usize, device: Device) -> PrefixQueries {
        let rows = lengths.len() / images;
        let chosen: Vec<ImageQueries> = lengths
            .chunks(rows)
            .map(|image| {
                let chosen: Vec<i64> = image.iter().enumerate().map(|(row, &len)| row as i64 * longest + len - 1).collect();
                let mut of_place = vec![None; rows * longest as usize];
                for (row, &place) in chosen.iter().enumerate() {
                    of_place[place as usize] = Some(row as i64);
                }
                ImageQueries { chosen, of_place }
            })
            .collect();
        PrefixQueries::new(&chosen, SPARE as usize, device)
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
    use crate::cache::tests::{small_text, SMALL_DECODERS};
    use crate::cache::DecoderCache;
    use crate::families::TextModel;
    use crate::weights::Weights;
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

    /// Rows of one image that begin alike share those tokens in the stream; rows of another
    /// image with the same ids do not (their states differ). Unpacking puts a shared token in
    /// every row that has it, and each row's last token is found in the stream.
    #[test]
    fn an_images_rows_share_the_tokens_they_begin_with() {
        // Image 0: rows [7 8 9], [7 8 5 6], [7 3]; image 1: [7 8 9].
        let ids = [7, 8, 9, 0, 7, 8, 5, 6, 7, 3, 0, 0, 7, 8, 9, 0];
        let lengths = [3, 4, 2, 3];
        let rows = RowIds { ids: &ids, lengths: &lengths, longest: 4, per_image: &[3, 1] };
        let real = RealTokens::deduplicated(&rows, Device::Cpu).expect("tokens are shared");
        // Image 0: 7 8 9 | 5 6 | 3; image 1: 7 8 9.
        assert_eq!((real.real, real.held_once()), (9, 3));
        let x = ramp(&[4, 4, 1]);
        let packed = real.pack(&x);
        let held = Vec::<f32>::try_from(packed.flatten(0, -1)).unwrap();
        assert_eq!(held[..9], [0.0, 1.0, 2.0, 6.0, 7.0, 9.0, 12.0, 13.0, 14.0]);
        let back = Vec::<f32>::try_from(real.unpack(&packed).flatten(0, -1)).unwrap();
        assert_eq!(back, [0.0, 1.0, 2.0, 0.0, 0.0, 1.0, 6.0, 7.0, 0.0, 9.0, 0.0, 0.0, 12.0, 13.0, 14.0, 0.0]);
        let last = LastTokens::new(&lengths, 4, Some(&real), Device::Cpu);
        let picked = Vec::<f32>::try_from(last.rows_alone(&last.pick(&packed)).flatten(0, -1)).unwrap();
        assert_eq!(picked, [2.0, 7.0, 9.0, 14.0]);
        // Rows alike but for their length: the shorter one's tokens are all shared, and no row is
        // padded past what the stream holds.
        let rows = RowIds { ids: &[4, 5, 4, 0], lengths: &[2, 1], longest: 2, per_image: &[2] };
        let real = RealTokens::deduplicated(&rows, Device::Cpu).expect("a row is padded");
        assert_eq!((real.real, real.held_once()), (2, 1));
        assert_eq!(RealTokens::new(&[2, 1], 2, Device::Cpu).unwrap().held_once(), 0);
        // Distinct rows of one length: nothing to pack.
        let rows = RowIds { ids: &[4, 5, 6, 7], lengths: &[2, 2], longest: 2, per_image: &[2] };
        assert!(RealTokens::deduplicated(&rows, Device::Cpu).is_none());
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
    /// each row's final hidden state, to the bit, as their real tokens through every layer; and
    /// so do they with the tokens an image's rows share from their start held once: on every
    /// kind of decoder of benches/configs (made small, as `vlm::cache`'s tests make them): Qwen's
    /// last layer full attention or linear, dense or experts, and Gemma 4's, with and without
    /// KV-shared layers after the last with keys and values of its own.
    #[test]
    fn rows_narrowed_or_sharing_their_first_tokens_give_every_rows_answer_as_whole_layers_do() {
        // One thread, as the engine scores: a product split between threads splits its rows by
        // their count.
        tch::set_num_threads(1);
        let cpu = (Kind::Int64, Device::Cpu);
        for (name, layers, kv_shared) in SMALL_DECODERS {
            let config = small_text(name, layers, kv_shared);
            let weights = Weights::random(Device::Cpu, Kind::Float, !config.text.tie_word_embeddings, 7);
            let text = TextModel::load(config.family, &weights, &config.text, config.image_token_id).unwrap();
            // Two images' prefixes of 12 tokens, then three questions each, of 1 to 6 tokens.
            let mut cache = DecoderCache::default();
            let prefix = Tensor::arange(12, cpu).view([1, 1, 12]).expand([3, 2, 12], false);
            text.fill_cache(&text.embed(&Tensor::randint(512, [2, 12], cpu)), &prefix, &mut cache, None);
            let positions = Tensor::arange_start(12, 18, cpu).view([1, 1, 6]).expand([3, 6, 6], false);
            // Rows of several lengths (a packed stream), and of one (the rows as they are); and
            // rows whose first tokens repeat within an image (and across images, where they are
            // not shared): each image's first two rows begin with the same three tokens.
            let distinct: Vec<i64> = (1..=36).collect();
            let mut stems = distinct.clone();
            stems.copy_within(0..3, 6);
            stems.copy_within(0..18, 18);
            // The stems' rows hold 30 tokens, 23 of them in the stream: the first image's first
            // two rows share 3; the second image's second row is its first's first 4 tokens,
            // its last token in the middle of another row.
            stems.copy_within(18..22, 24);
            for (lengths, ids, held) in
                [([5, 2, 6, 6, 3, 1], &distinct, Some(23)), ([6; 6], &distinct, None), ([5, 4, 6, 5, 4, 6], &stems, Some(23))]
            {
                let input = text.embed(&Tensor::from_slice(ids).view([6, 6]));
                let rows = RowIds { ids, lengths: &lengths, longest: 6, per_image: &[3, 3] };
                let deduplicated = QuestionRows::new(&rows, SuffixRows::Deduplicated, Device::Cpu);
                assert_eq!(deduplicated.real.as_ref().map(|r| r.real), held, "{name}, rows of {lengths:?}");
                let whole = QuestionRows { narrows: false, ..QuestionRows::new(&rows, SuffixRows::Packed, Device::Cpu) };
                let narrowed = QuestionRows::new(&rows, SuffixRows::Packed, Device::Cpu);
                let [whole, narrowed, deduplicated] = [whole, narrowed, deduplicated]
                    .map(|rows| text.forward_shared_prefix(&input, &positions, &mut cache.shared(), false, &rows));
                assert_eq!(narrowed.size(), [6, config.text.hidden_size as i64], "{name}");
                for (way, out) in [("narrowed", narrowed), ("deduplicated", deduplicated)] {
                    let diff = (&whole - &out).abs().max().double_value(&[]);
                    assert!(whole.equal(&out), "{name}, {layers} layers, rows of {lengths:?}, {way}: {diff}");
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "a row holds 1 to 4 real tokens")]
    fn a_row_longer_than_the_longest_is_a_bug() {
        let _ = RealTokens::new(&[5, 4], 4, Device::Cpu);
    }
}
