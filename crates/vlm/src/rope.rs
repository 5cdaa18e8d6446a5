//! Multimodal rotary positions (M-RoPE): three position ids per token, for time, height and
//! width. Text tokens advance all three together; an image's tokens take the same start on the
//! time axis and its row and column on the merged patch grid; text after the image resumes past
//! the image's largest side.

use super::error::VlmError;

/// Position ids `[temporal, height, width]` for a sequence with images, and the offset the next
/// decoded token's position has from its index (`max position + 1 - len`).
pub fn position_ids(
    input_ids: &[u32],
    image_token_id: u32,
    grids: &[(usize, usize, usize)],
    merge: usize,
) -> Result<([Vec<i64>; 3], i64), VlmError> {
    let mut ids: [Vec<i64>; 3] =
        [Vec::with_capacity(input_ids.len()), Vec::with_capacity(input_ids.len()), Vec::with_capacity(input_ids.len())];
    let mut grids = grids.iter();
    let mut current: i64 = 0;
    let mut i = 0;
    while i < input_ids.len() {
        if input_ids[i] != image_token_id {
            for axis in &mut ids {
                axis.push(current);
            }
            current += 1;
            i += 1;
            continue;
        }
        let run = input_ids[i..].iter().take_while(|&&t| t == image_token_id).count();
        let &(t, h, w) = grids.next().ok_or_else(|| VlmError::Input("more image token runs than images".into()))?;
        let (rows, cols) = (h / merge, w / merge);
        if run != t * rows * cols {
            return Err(VlmError::Input(format!(
                "an image run has {run} tokens; its grid {t}x{h}x{w} with merge {merge} needs {}",
                t * rows * cols
            )));
        }
        for ti in 0..t {
            for r in 0..rows {
                for c in 0..cols {
                    ids[0].push(current + ti as i64);
                    ids[1].push(current + r as i64);
                    ids[2].push(current + c as i64);
                }
            }
        }
        current += rows.max(cols) as i64;
        i += run;
    }
    if grids.next().is_some() {
        return Err(VlmError::Input("fewer image token runs than images".into()));
    }
    let max = ids.iter().flat_map(|a| a.iter()).copied().max().unwrap_or(-1);
    Ok((ids, max + 1 - input_ids.len() as i64))
}
