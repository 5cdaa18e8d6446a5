//! Batched greedy decoding: many prompts over one or more images, decoded together.
//!
//! Prompts about one image share its prefix (the chat header and the image): it runs once and its
//! cache (keys and values, and a hybrid model's linear-attention states) is copied per prompt. The caches of different images are zero-padded to one length,
//! and the suffixes to one length; a key mask per row hides every pad, and each row keeps its own
//! rotary positions, so a row decodes as it would alone; linear-attention layers skip a row's
//! padding, so their states are the row's own. Rows that reach a stop token leave the
//! batch, so the batch shrinks as answers end.

use tch::{Device, Kind, Tensor};

use super::error::VlmError;
use super::families::ImageFeatures;
use super::model::VlModel;
use super::text::{AttentionPath, DecoderCache};

/// One image's features and patch grid.
pub struct GenerationImage<'a> {
    pub features: &'a ImageFeatures,
    pub grid: (usize, usize, usize),
}

/// One prompt: its token ids (the image placeholders expanded) and which image it shows.
pub struct GenerationPrompt<'a> {
    pub image: usize,
    pub ids: &'a [u32],
}

/// The new tokens of one prompt, the stop token included when it came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    pub tokens: Vec<u32>,
    /// True when `max_new_tokens` cut the answer before a stop token.
    pub truncated: bool,
}

/// A row of the batch: its prompt's own tokens (after the shared prefix) and their positions.
struct Row {
    prompt: usize,
    suffix: Vec<u32>,
    suffix_positions: [Vec<i64>; 3],
    next_position: i64,
}

impl VlModel {
    /// Greedy decoding of every prompt, batched. Results are in prompt order.
    pub fn generate_batch(
        &self,
        images: &[GenerationImage<'_>],
        prompts: &[GenerationPrompt<'_>],
        max_new_tokens: usize,
        stop: &[u32],
    ) -> Result<Vec<Generated>, VlmError> {
        if let Some(bad) = prompts.iter().find(|p| p.image >= images.len() || p.ids.is_empty()) {
            return Err(VlmError::Input(format!("a prompt names image {} of {} or has no tokens", bad.image, images.len())));
        }
        if prompts.is_empty() {
            return Ok(Vec::new());
        }
        tch::no_grad(|| {
            let (rows, cache, prefix_valid) = self.prefill_prefixes(images, prompts)?;
            let (mut cache, mut valid, first) = self.prefill_suffixes(&rows, cache, prefix_valid)?;
            let mut results: Vec<Generated> = vec![Generated { tokens: Vec::new(), truncated: true }; prompts.len()];
            // Batch position -> row; rows leave when they stop.
            let mut active: Vec<usize> = (0..rows.len()).collect();
            let mut next = first;
            for step in 0..max_new_tokens {
                let mut keep = Vec::with_capacity(active.len());
                for (slot, &row) in active.iter().enumerate() {
                    let result = &mut results[rows[row].prompt];
                    result.tokens.push(next[slot]);
                    if stop.contains(&next[slot]) {
                        result.truncated = false;
                    } else {
                        keep.push(slot);
                    }
                }
                if keep.is_empty() || step + 1 == max_new_tokens {
                    break;
                }
                if keep.len() < active.len() {
                    let slots = self.index(&keep.iter().map(|&s| s as i64).collect::<Vec<_>>());
                    cache = cache.select_rows(&slots);
                    valid = valid.index_select(0, &slots);
                    next = keep.iter().map(|&s| next[s]).collect();
                    active = keep.iter().map(|&s| active[s]).collect();
                }
                let n = active.len() as i64;
                let ids = self.index(&next.iter().map(|&t| i64::from(t)).collect::<Vec<_>>()).view([n, 1]);
                let at: Vec<i64> = active.iter().map(|&r| rows[r].next_position + step as i64).collect();
                let positions = self.index(&[at.as_slice(), &at, &at].concat()).view([3, n, 1]);
                valid = Tensor::cat(&[&valid, &Tensor::ones([n, 1], (Kind::Bool, self.device))], 1);
                let mask = additive(&valid.view([n, 1, 1, -1]), self.kind);
                let hidden = self.text.forward_masked(
                    &self.text.embed(&ids),
                    &positions,
                    &mut cache,
                    &mask,
                    AttentionPath::FoldedGroups,
                    None,
                    None,
                );
                next = argmax_rows(&self.text.logits(&hidden.squeeze_dim(1)))?;
            }
            Ok(results)
        })
    }

    fn index(&self, values: &[i64]) -> Tensor {
        Tensor::from_slice(values).to_device(self.device)
    }

    /// Runs each image's shared prefix once; returns the rows (grouped by image), one cache row
    /// per prompt padded to the longest prefix, and which of its keys are real.
    fn prefill_prefixes(
        &self,
        images: &[GenerationImage<'_>],
        prompts: &[GenerationPrompt<'_>],
    ) -> Result<(Vec<Row>, DecoderCache, Tensor), VlmError> {
        let mut groups: Vec<(usize, DecoderCache, Vec<usize>)> = Vec::new();
        let mut rows = Vec::with_capacity(prompts.len());
        for (index, image) in images.iter().enumerate() {
            let members: Vec<usize> = (0..prompts.len()).filter(|&p| prompts[p].image == index).collect();
            let Some(&first) = members.first() else { continue };
            let shortest = members.iter().map(|&p| prompts[p].ids.len()).min().unwrap_or(1);
            let lead = prompts[first].ids;
            let common = (0..shortest).take_while(|&i| members.iter().all(|&p| prompts[p].ids[i] == lead[i])).count().min(shortest - 1);
            let mut cache = DecoderCache::default();
            if common > 0 {
                self.prefill(lead, common, image.features, image.grid, &mut cache)?;
            }
            for &p in &members {
                let ids = prompts[p].ids;
                let (axes, delta) = self.positions(ids, image.grid)?;
                rows.push(Row {
                    prompt: p,
                    suffix: ids[common..].to_vec(),
                    suffix_positions: axes.map(|a| a[common..].to_vec()),
                    next_position: ids.len() as i64 + delta,
                });
            }
            groups.push((common, cache, members));
        }
        let longest = groups.iter().map(|(c, _, _)| *c as i64).max().unwrap_or(0);
        let mut valid = Vec::with_capacity(rows.len() * longest as usize);
        let caches: Vec<DecoderCache> = groups
            .iter()
            .map(|(common, cache, members)| {
                for _ in members {
                    valid.extend((0..longest).map(|k| k < *common as i64));
                }
                cache.padded(longest).expand(members.len() as i64)
            })
            .collect();
        let prefix_valid = Tensor::from_slice(&valid).to_device(self.device).view([rows.len() as i64, longest]);
        Ok((rows, DecoderCache::concat(&caches), prefix_valid))
    }

    /// Runs every row's own tokens (right-padded to the longest) over the prefix caches; returns
    /// the cache, the key mask and each row's first new token.
    fn prefill_suffixes(
        &self,
        rows: &[Row],
        mut cache: DecoderCache,
        prefix_valid: Tensor,
    ) -> Result<(DecoderCache, Tensor, Vec<u32>), VlmError> {
        let n = rows.len() as i64;
        let longest = rows.iter().map(|r| r.suffix.len()).max().unwrap_or(1);
        let mut ids = Vec::with_capacity(rows.len() * longest);
        let mut positions = [Vec::new(), Vec::new(), Vec::new()];
        let mut real = Vec::with_capacity(rows.len() * longest);
        for row in rows {
            let pad = longest - row.suffix.len();
            ids.extend(row.suffix.iter().map(|&t| i64::from(t)).chain(std::iter::repeat_n(0, pad)));
            real.extend((0..longest).map(|k| k < row.suffix.len()));
            for (axis, out) in row.suffix_positions.iter().zip(positions.iter_mut()) {
                let last = *axis.last().expect("every row keeps a token of its own");
                out.extend(axis.iter().copied().chain((1..=pad as i64).map(|k| last + k)));
            }
        }
        let s = longest as i64;
        let suffix_valid = Tensor::from_slice(&real).to_device(self.device).view([n, s]);
        let causal = Tensor::ones([s, s], (Kind::Bool, self.device)).tril(0).view([1, 1, s, s]);
        let prefix_len = prefix_valid.size()[1];
        let sees = Tensor::cat(
            &[
                prefix_valid.view([n, 1, 1, prefix_len]).expand([n, 1, s, prefix_len], false),
                suffix_valid.view([n, 1, 1, s]).logical_and(&causal),
            ],
            3,
        );
        let ids = self.index(&ids).view([n, s]);
        let positions = self.index(&positions.concat()).view([3, n, s]);
        let hidden = self.text.forward_masked(
            &self.text.embed(&ids),
            &positions,
            &mut cache,
            &additive(&sees, self.kind),
            AttentionPath::Repeated,
            Some(&suffix_valid),
            None,
        );
        let last: Vec<i64> = rows.iter().enumerate().map(|(i, r)| i as i64 * s + r.suffix.len() as i64 - 1).collect();
        let last = hidden.view([n * s, -1]).index_select(0, &self.index(&last));
        let first = argmax_rows(&self.text.logits(&last))?;
        Ok((cache, Tensor::cat(&[prefix_valid, suffix_valid], 1), first))
    }
}

/// 0 where `sees` is true, the dtype's most negative value where it is false.
fn additive(sees: &Tensor, kind: Kind) -> Tensor {
    Tensor::zeros(sees.size(), (Kind::Float, sees.device())).masked_fill(&sees.logical_not(), f64::from(f32::MIN)).to_kind(kind)
}

/// The argmax token of each row of (rows, vocab) logits.
fn argmax_rows(logits: &Tensor) -> Result<Vec<u32>, VlmError> {
    let best = logits.argmax(-1, false);
    // The chosen logit of each row, read beside the token: argmax picks a NaN where a row has
    // one, and an infinity is not a score either; a token would come out all the same.
    let peaks = logits.gather(-1, &best.unsqueeze(-1), false).to_kind(Kind::Float).to_device(Device::Cpu);
    let peaks = Vec::<f32>::try_from(peaks.view([-1])).map_err(|e| VlmError::Input(format!("reading the chosen logits: {e}")))?;
    if peaks.iter().any(|p| !p.is_finite()) {
        return Err(VlmError::NonFinite { what: "generating the next token".into() });
    }
    let best = Vec::<i64>::try_from(best.to_device(Device::Cpu).view([-1]))
        .map_err(|e| VlmError::Input(format!("reading the decoded tokens: {e}")))?;
    Ok(best.into_iter().map(|t| t as u32).collect())
}
