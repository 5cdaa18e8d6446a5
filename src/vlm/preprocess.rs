//! The image sizing rule of the Qwen2-VL processors. The pixel path itself (RGB conversion,
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
}
