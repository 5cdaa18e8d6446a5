//! Image to `pixel_values`, as transformers' torchvision path does it: RGB conversion
//! (transparency composited onto white, as PIL does), [`smart_resize`], bicubic antialiased
//! resize of the 8-bit image, CLIP normalisation, and patch flattening with
//! the frame repeated `temporal_patch_size` times.

use image::DynamicImage;
use tch::{Device, Kind, Tensor};

use super::config::{ImageSizing, PreprocessorConfig};
use super::error::VlmError;
use super::preprocess::{aspect_preserving_size, smart_resize};

/// The image as 8-bit RGB. Transparency is composited onto opaque white with PIL's integer
/// arithmetic (AlphaComposite.c), so the bytes match `Image.alpha_composite`.
pub fn to_rgb(image: &DynamicImage) -> image::RgbImage {
    if !image.color().has_alpha() {
        return image.to_rgb8();
    }
    let rgba = image.to_rgba8();
    let shift_div_255 = |a: u32| ((a >> 8) + a) >> 8;
    let mut out = image::RgbImage::new(rgba.width(), rgba.height());
    for (dst, src) in out.pixels_mut().zip(rgba.pixels()) {
        let a = u32::from(src[3]);
        if a == 0 {
            *dst = image::Rgb([255, 255, 255]);
            continue;
        }
        let (coef1, coef2) = (a * 128, (255 - a) * 128);
        for c in 0..3 {
            let tmp = u32::from(src[c]) * coef1 + 255 * coef2;
            dst[c] = (shift_div_255(tmp + (0x80 << 7)) >> 7) as u8;
        }
    }
    out
}

/// `pixel_values` (patches x (C * T * P * P), f32) and the patch grid (t, h, w).
pub fn pixel_values(image: &DynamicImage, pre: &PreprocessorConfig, device: Device) -> Result<(Tensor, (usize, usize, usize)), VlmError> {
    // Images are often the first tensors a program makes (see `VlModel::load`).
    super::cpu_kernels::pin();
    if pre.sizing == ImageSizing::AspectPreserving {
        return gemma4_pixel_values(image, pre, device);
    }
    let rgb = to_rgb(image);
    let (height, width) = (rgb.height() as usize, rgb.width() as usize);
    let (rh, rw) = smart_resize(height, width, pre.factor(), pre.min_pixels, pre.max_pixels)?;
    let (p, m, tps) = (pre.patch_size as i64, pre.merge_size as i64, pre.temporal_patch_size as i64);
    let resized = resized_chw(&rgb, (rh, rw)).to_kind(Kind::Float);
    // transformers folds the 1/255 rescale into the mean and std (in f64, then f32).
    let mean: Vec<f32> = pre.image_mean.iter().map(|m| (m / pre.rescale_factor) as f32).collect();
    let std: Vec<f32> = pre.image_std.iter().map(|s| (s / pre.rescale_factor) as f32).collect();
    let mean = Tensor::from_slice(&mean).view([1, 3, 1, 1]);
    let std = Tensor::from_slice(&std).view([1, 3, 1, 1]);
    let normalized = (resized - mean) / std;
    let (gh, gw) = (rh as i64 / p, rw as i64 / p);
    let patches = normalized
        .view(&[1, 3, gh / m, m, p, gw / m, m, p][..])
        .permute([0, 2, 5, 3, 6, 1, 4, 7])
        .unsqueeze(6)
        .expand(&[1, gh / m, gw / m, m, m, 3, tps, p, p][..], false)
        .reshape([gh * gw, 3 * tps * p * p]);
    Ok((patches.to_device(device), (1, gh as usize, gw as usize)))
}

/// The image as 8-bit channels-first (1, 3, h, w), resized to (rh, rw) on the CPU as transformers
/// runs it: torchvision resizes 8-bit images natively there (bicubic, antialiased; the f32 path it
/// takes on a GPU rounds differently), so the result is the same whatever device the model runs on.
fn resized_chw(rgb: &image::RgbImage, (rh, rw): (usize, usize)) -> Tensor {
    let (height, width) = (rgb.height() as i64, rgb.width() as i64);
    let chw = Tensor::from_slice(rgb.as_raw()).view([height, width, 3]).permute([2, 0, 1]).contiguous().unsqueeze(0);
    if (rh as i64, rw as i64) == (height, width) {
        chw
    } else {
        chw.internal_upsample_bicubic2d_aa([rh as i64, rw as i64], false, None, None)
    }
}

/// Gemma 4's `pixel_values` of one image, without the processor's padding: (patches, P * P * 3)
/// in row-major patch order, each patch's pixels row-major with the channels innermost, values
/// rescaled (to [0, 1]) and normalised only where the processor says; grid (1, rows, columns).
fn gemma4_pixel_values(
    image: &DynamicImage,
    pre: &PreprocessorConfig,
    device: Device,
) -> Result<(Tensor, (usize, usize, usize)), VlmError> {
    let rgb = to_rgb(image);
    let size = aspect_preserving_size(rgb.height() as usize, rgb.width() as usize, pre.factor(), pre.max_pixels)?;
    let rescaled = resized_chw(&rgb, size).to_kind(Kind::Float) * pre.rescale_factor;
    let normalized = if pre.image_mean == [0.0; 3] && pre.image_std == [1.0; 3] {
        rescaled
    } else {
        let mean: Vec<f32> = pre.image_mean.iter().map(|&m| m as f32).collect();
        let std: Vec<f32> = pre.image_std.iter().map(|&s| s as f32).collect();
        (rescaled - Tensor::from_slice(&mean).view([1, 3, 1, 1])) / Tensor::from_slice(&std).view([1, 3, 1, 1])
    };
    let p = pre.patch_size as i64;
    let (rows, cols) = (size.0 as i64 / p, size.1 as i64 / p);
    let patches = normalized.view([3, rows, p, cols, p]).permute([1, 3, 2, 4, 0]).reshape([rows * cols, p * p * 3]);
    Ok((patches.to_device(device), (1, rows as usize, cols as usize)))
}
