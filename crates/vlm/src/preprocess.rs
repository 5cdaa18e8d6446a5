//! The image sizing rules of the Qwen2-VL processors and of Gemma 4's. The pixel path itself (RGB conversion,
//! bicubic antialiased resize, CLIP normalisation, patch flattening) runs on tensors.

use super::error::VlmError;

/// The largest aspect ratio the processor accepts.
pub const MAX_ASPECT_RATIO: f64 = 200.0;

/// The size an image is resized to: both sides multiples of `factor`, the area within
/// [min_pixels, max_pixels], the aspect ratio kept as closely as possible. Rounding is Python's
/// (ties to even), as in transformers.
pub fn smart_resize(height: usize, width: usize, factor: usize, min_pixels: u64, max_pixels: u64) -> Result<(usize, usize), VlmError> {
    if height == 0 || width == 0 {
        return Err(VlmError::Input(format!("the image is {width}x{height}: nothing to resize")));
    }
    let (h, w, f) = (height as f64, width as f64, factor as f64);
    let ratio = h.max(w) / h.min(w);
    if ratio > MAX_ASPECT_RATIO {
        return Err(VlmError::Input(format!(
            "aspect ratio {ratio:.1} ({width}x{height}) is above {MAX_ASPECT_RATIO}, which the model does not take"
        )));
    }
    let mut h_bar = (h / f).round_ties_even() as usize * factor;
    let mut w_bar = (w / f).round_ties_even() as usize * factor;
    if (h_bar * w_bar) as u64 > max_pixels {
        let beta = (h * w / max_pixels as f64).sqrt();
        h_bar = factor.max(((h / beta / f).floor() as usize) * factor);
        w_bar = factor.max(((w / beta / f).floor() as usize) * factor);
    } else if ((h_bar * w_bar) as u64) < min_pixels {
        let beta = (min_pixels as f64 / (h * w)).sqrt();
        h_bar = ((h * beta / f).ceil() as usize) * factor;
        w_bar = ((w * beta / f).ceil() as usize) * factor;
    }
    Ok((h_bar, w_bar))
}

/// Gemma 4's size for an image: the largest of the same aspect ratio within `max_pixels` whose
/// sides are multiples of `factor` (patch x pooling), each side rounded down; a side that rounds
/// to nothing takes one `factor` and the other its ratio's share, as transformers does
/// (`get_aspect_ratio_preserving_size`).
pub fn aspect_preserving_size(height: usize, width: usize, factor: usize, max_pixels: u64) -> Result<(usize, usize), VlmError> {
    if height == 0 || width == 0 {
        return Err(VlmError::Input(format!("the image is {width}x{height}: nothing to resize")));
    }
    let (h, w) = (height as f64, width as f64);
    let scale = (max_pixels as f64 / (h * w)).sqrt();
    let mut target_h = (scale * h / factor as f64).floor() as usize * factor;
    let mut target_w = (scale * w / factor as f64).floor() as usize * factor;
    if target_h == 0 && target_w == 0 {
        return Err(VlmError::Input(format!("the image is {width}x{height}: it resizes to nothing within {max_pixels} pixels")));
    }
    let longest = (max_pixels / (factor * factor) as u64) as usize * factor;
    if target_h == 0 {
        target_h = factor;
        target_w = ((w / h).floor() as usize * factor).min(longest);
    } else if target_w == 0 {
        target_w = factor;
        target_h = ((h / w).floor() as usize * factor).min(longest);
    }
    if (target_h * target_w) as u64 > max_pixels {
        return Err(VlmError::Input(format!(
            "the image is {width}x{height}: its aspect ratio does not fit {max_pixels} pixels in sides that are multiples of {factor}"
        )));
    }
    Ok((target_h, target_w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_round_to_even_like_python() {
        // 42 / 28 = 1.5 -> 2, 70 / 28 = 2.5 -> 2 (not 3).
        assert_eq!(smart_resize(42, 70, 28, 1, u64::MAX).unwrap(), (56, 56));
    }

    #[test]
    fn area_bounds_and_aspect_ratio() {
        let (h, w) = smart_resize(1000, 1000, 28, 56 * 56, 28 * 28 * 64).unwrap();
        assert!((h * w) as u64 <= 28 * 28 * 64 && h % 28 == 0 && w % 28 == 0);
        let (h, w) = smart_resize(10, 10, 28, 56 * 56, u64::MAX).unwrap();
        assert!((h * w) as u64 >= 56 * 56);
        assert!(smart_resize(10, 2001, 28, 1, u64::MAX).is_err());
        assert!(smart_resize(0, 5, 28, 1, 100).is_err());
    }

    #[test]
    fn gemma4_sizes_as_transformers() {
        // transformers 5.23's Gemma4ImageProcessor, 280 soft tokens (max_pixels 280 x 48^2):
        // 1024 x 1024 -> 768 x 768; 70 tokens -> 384 x 384; a 10:1 strip keeps a row of tokens.
        let max = |tokens: u64| tokens * 48 * 48;
        assert_eq!(aspect_preserving_size(1024, 1024, 48, max(280)).unwrap(), (768, 768));
        assert_eq!(aspect_preserving_size(1024, 1024, 48, max(70)).unwrap(), (384, 384));
        assert_eq!(aspect_preserving_size(59, 201, 48, max(70)).unwrap(), (192, 720));
        assert_eq!(aspect_preserving_size(20, 2000, 48, max(70)).unwrap(), (48, 3360));
        assert!(aspect_preserving_size(0, 10, 48, max(70)).is_err());
    }
}
