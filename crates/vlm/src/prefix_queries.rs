//! Which of a scoring pass's queries meet the image prefix.
//!
//! Attention lays a pass's questions out as rows padded to the longest, and the prefix part of
//! [`shared_prefix`](super::shared_prefix) is a product of every query against its image's prefix:
//! on a release's 57 questions of about 16 to 28 tokens, a fifth of those queries are padding,
//! and another tenth repeat a token that other questions of the image begin with (the same
//! query, since a token's state depends on the tokens before it alone). In the last layer only
//! each question's last token is read at all. [`PrefixQueries`] names, image by image, the queries
//! whose prefix part is needed, each once; the prefix part runs on those alone, and its results
//! are spread back to every place that reads them. The questions' own part (a few dozen keys a
//! row) keeps the rows.
//!
//! A query's prefix part is a row of a matrix product and row-wise sums, so at one thread (as
//! the engine scores on a CPU) it does not depend on which other queries share the product,
//! except in a CPU product's last rows past its last whole block, which another path computes:
//! each image's chosen queries are followed by spare copies of its first, which take that path
//! (as many as the packed stream keeps after its real tokens, for the same reason).

use tch::Tensor;

/// Each image's chosen query places, and where every place of its rows finds its query's prefix
/// part.
pub struct PrefixQueries {
    /// (images, chosen): each image's chosen places in its (rows x longest) layout, the same
    /// count for every image (the fewest taking copies of their first), then the spare copies.
    pick: Tensor,
    /// (images, rows x longest): each place's chosen query; a spare one where its own is not
    /// chosen (padding, or a token whose prefix part nothing reads).
    spread: Tensor,
}

/// One image's part: the places chosen, and each place's chosen query (`None`: not chosen).
#[derive(Clone)]
pub struct ImageQueries {
    pub chosen: Vec<i64>,
    pub of_place: Vec<Option<i64>>,
}

impl PrefixQueries {
    /// From each image's choice, followed by `spare` copies of its first chosen query; every
    /// image has the same number of places.
    pub fn new(images: &[ImageQueries], spare: usize, device: tch::Device) -> PrefixQueries {
        let count = images.iter().map(|i| i.chosen.len()).max().unwrap_or(0) + spare;
        let places = images.first().map_or(0, |i| i.of_place.len());
        let (mut pick, mut spread) = (Vec::with_capacity(images.len() * count), Vec::with_capacity(images.len() * places));
        for image in images {
            assert!(!image.chosen.is_empty(), "an image's rows have a real token");
            assert_eq!(image.of_place.len(), places, "every image has as many rows as the others");
            pick.extend(image.chosen.iter().copied().chain(std::iter::repeat_n(image.chosen[0], count - image.chosen.len())));
            // The first spare stands in where a place's own query was not chosen.
            let spare = image.chosen.len() as i64;
            spread.extend(image.of_place.iter().map(|chosen| chosen.unwrap_or(spare)));
        }
        let tensor = |v: &[i64], columns: usize| Tensor::from_slice(v).view([images.len() as i64, columns as i64]).to_device(device);
        PrefixQueries { pick: tensor(&pick, count), spread: tensor(&spread, places) }
    }

    fn images_and_count(&self) -> (i64, i64) {
        (self.pick.size()[0], self.pick.size()[1])
    }

    /// The chosen queries of `q` (b, heads, s, d), for each key/value head of the prefix as one
    /// matrix: (images, kv_heads, chosen x groups, d), query by query, each one's heads of that
    /// key/value head in turn.
    pub fn stacked(&self, q: &Tensor, kv_heads: i64) -> Tensor {
        let (b, heads, s, d) = (q.size()[0], q.size()[1], q.size()[2], q.size()[3]);
        let (images, count) = self.images_and_count();
        let (rows, groups) = (b / images, heads / kv_heads);
        let by_place =
            q.view([images, rows, kv_heads, groups, s, d]).permute([0, 2, 1, 4, 3, 5]).reshape([images, kv_heads, rows * s, groups * d]);
        let index = self.pick.view([images, 1, count, 1]).expand([images, kv_heads, count, groups * d], false);
        by_place.gather(2, &index, false).view([images, kv_heads, count * groups, d])
    }

    /// A prefix mask `mask` (s, p) of what the query at each place of a row sees, for the stacked
    /// queries of [`Self::stacked`]: (images, 1, chosen x groups, p).
    pub fn mask(&self, mask: &Tensor, groups: i64) -> Tensor {
        let (images, count) = self.images_and_count();
        let (s, p) = (mask.size()[0], mask.size()[1]);
        let in_row = self.pick.remainder(s).flatten(0, -1);
        mask.index_select(0, &in_row).view([images, count, 1, p]).expand([images, count, groups, p], false).reshape([
            images,
            1,
            count * groups,
            p,
        ])
    }

    /// Results of the stacked queries `t` (images, kv_heads, chosen x groups, x) at every place of
    /// `rows` rows of `s` tokens an image, in the order of the prefix part over every query:
    /// (images, kv_heads, rows x groups x s, x).
    pub fn spread(&self, t: &Tensor, rows: i64, s: i64) -> Tensor {
        let (images, kv_heads, x) = (t.size()[0], t.size()[1], t.size()[3]);
        let (_, count) = self.images_and_count();
        let groups = t.size()[2] / count;
        let index = self.spread.view([images, 1, rows * s, 1]).expand([images, kv_heads, rows * s, groups * x], false);
        t.view([images, kv_heads, count, groups * x])
            .gather(2, &index, false)
            .view([images, kv_heads, rows, s, groups, x])
            .permute([0, 1, 2, 4, 3, 5])
            .reshape([images, kv_heads, rows * groups * s, x])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    /// Spare copies after each image's chosen queries, fewer than a release keeps.
    const SPARE: i64 = 3;

    /// Two images of two rows of three places; the second image's first row shares its first
    /// token with its second, and some places are padding.
    fn choice() -> PrefixQueries {
        let first = ImageQueries { chosen: vec![0, 1, 3], of_place: vec![Some(0), Some(1), None, Some(2), None, None] };
        let second = ImageQueries { chosen: vec![0, 1, 2, 4], of_place: vec![Some(0), Some(1), Some(2), Some(0), Some(3), None] };
        PrefixQueries::new(&[first, second], SPARE as usize, Device::Cpu)
    }

    #[test]
    fn the_chosen_queries_stack_as_every_querys_do_and_spread_back_to_their_places() {
        let (images, rows, kv_heads, groups, s, d) = (2, 2, 2, 3, 3, 4);
        let q = Tensor::arange(images * rows * kv_heads * groups * s * d, (Kind::Float, Device::Cpu)).view([
            images * rows,
            kv_heads * groups,
            s,
            d,
        ]);
        let queries = choice();
        let stacked = queries.stacked(&q, kv_heads);
        let count = 4 + SPARE;
        assert_eq!(stacked.size(), [images, kv_heads, count * groups, d]);
        // Every query stacked, as the prefix part without a choice stacks them: (images,
        // kv_heads, rows x groups x s, d).
        let every =
            q.view([images, rows, kv_heads, groups, s, d]).permute([0, 2, 1, 3, 4, 5]).reshape([images, kv_heads, rows * groups * s, d]);
        let back = queries.spread(&stacked, rows, s);
        assert_eq!(back.size(), every.size());
        // A chosen place gets its own query back; a shared one its first place's.
        let at = |t: &Tensor, image: i64, row: i64, g: i64, place: i64| t.get(image).get(1).get((row * groups + g) * s + place);
        for (image, row, place, from) in
            [(0, 0, 0, (0, 0)), (0, 0, 1, (0, 1)), (0, 1, 0, (1, 0)), (1, 0, 2, (0, 2)), (1, 1, 0, (0, 0)), (1, 1, 1, (1, 1))]
        {
            for g in 0..groups {
                assert!(at(&back, image, row, g, place).equal(&at(&every, image, from.0, g, from.1)), "{image} {row} {place}");
            }
        }
        // A place not chosen takes a spare: the image's first chosen query.
        assert!(at(&back, 0, 0, 2, 2).equal(&at(&every, 0, 0, 2, 0)));
    }

    #[test]
    fn a_mask_follows_each_chosen_querys_place_in_its_row() {
        let mask = Tensor::arange(3, (Kind::Float, Device::Cpu)).view([3, 1]).expand([3, 5], false);
        let stacked = choice().mask(&mask, 2);
        assert_eq!(stacked.size(), [2, 1, (4 + SPARE) * 2, 5]);
        let rows = Vec::<f32>::try_from(stacked.select(3, 0).flatten(0, -1)).unwrap();
        // The first image's places 0, 1, 3 (row 1's first), then copies of 0; each twice (groups).
        assert_eq!(rows[..8], [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
        let second = &rows[(4 + SPARE as usize) * 2..];
        assert_eq!(second[..8], [0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 1.0, 1.0]);
    }
}
