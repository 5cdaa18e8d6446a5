//! How fast this machine prepares images for the model: PNG decode, then the processor's
//! resize and normalisation (the engine's [`bpals_vlm::pixels`]), over 1, 4 or all CPU threads. On a GPU node it
//! says whether the CPUs or the GPU bound a full run (`bpals-release bench prep`).
//!
//! The images are made here: 1024 x 1024 greyscale like NIH's, a smooth body with noise on it,
//! so that they compress about as NIH's do (their PNGs are 0.2 to 1 MB); the report gives their
//! mean size.

use std::io::Cursor;
use std::time::Instant;

use image::{DynamicImage, GrayImage, ImageFormat, Luma};
use rayon::prelude::*;
use serde::Serialize;
use tch::Device;

use bpals_vlm::{pixels, PreprocessorConfig, VlmError};

#[derive(Debug, Serialize)]
pub struct PreparationReport {
    pub images: usize,
    pub size: u32,
    pub mean_png_bytes: usize,
    /// The size the processor resizes them to (height, width), and its merged tokens.
    pub resized: (usize, usize),
    pub image_tokens: usize,
    pub runs: Vec<PreparationRun>,
}

#[derive(Debug, Serialize)]
pub struct PreparationRun {
    pub threads: usize,
    pub images_per_second: f64,
    /// Wall time per image divided by threads: one thread's cost of one image.
    pub thread_ms_per_image: f64,
}

/// A radiograph-like grey image: a smooth, bright, roughly elliptical body on a dark ground,
/// with a few levels of pseudo-random noise (seeded: the same pixels every run).
fn radiograph_like(size: u32, seed: u32) -> DynamicImage {
    let mut state = seed.wrapping_mul(2_654_435_761) | 1;
    let half = size as f32 / 2.0;
    DynamicImage::ImageLuma8(GrayImage::from_fn(size, size, |x, y| {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let (dx, dy) = ((x as f32 - half) / half, (y as f32 - half) / (half * 1.2));
        let body = (1.0 - (dx * dx + dy * dy)).max(0.0).sqrt();
        let ribs = (y as f32 / 23.0).sin() * 12.0 * body;
        let v = 30.0 + 170.0 * body + ribs + (state % 12) as f32;
        Luma([v.clamp(0.0, 255.0) as u8])
    }))
}

/// Prepares `images` PNGs of `size` x `size` with `pre` once per entry of `threads`; returns the
/// rate of each run. The PNGs are encoded first, untimed.
pub fn run(pre: &PreprocessorConfig, images: usize, size: u32, threads: &[usize]) -> Result<PreparationReport, VlmError> {
    let pngs = (0..images.max(1) as u32)
        .map(|seed| {
            let mut bytes = Vec::new();
            radiograph_like(size, seed)
                .write_to(&mut Cursor::new(&mut bytes), ImageFormat::Png)
                .map_err(|e| VlmError::Input(format!("encoding a synthetic PNG: {e}")))?;
            Ok(bytes)
        })
        .collect::<Result<Vec<_>, VlmError>>()?;
    let prepare = |png: &Vec<u8>| -> Result<(usize, usize, usize), VlmError> {
        tch::set_num_threads(1);
        let image = image::load_from_memory_with_format(png, ImageFormat::Png)
            .map_err(|e| VlmError::Input(format!("decoding a synthetic PNG: {e}")))?;
        let (_, grid) = pixels::pixel_values(&image, pre, Device::Cpu)?;
        Ok(grid)
    };
    let grid = prepare(&pngs[0])?;
    let mut runs = Vec::new();
    for &n in threads {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n.max(1))
            .build()
            .map_err(|e| VlmError::Input(format!("starting {n} threads: {e}")))?;
        let start = Instant::now();
        pool.install(|| pngs.par_iter().map(prepare).collect::<Result<Vec<_>, _>>())?;
        let seconds = start.elapsed().as_secs_f64();
        runs.push(PreparationRun {
            threads: n.max(1),
            images_per_second: pngs.len() as f64 / seconds,
            thread_ms_per_image: seconds * 1000.0 * n.max(1) as f64 / pngs.len() as f64,
        });
    }
    let merge = pre.merge_size;
    Ok(PreparationReport {
        images: pngs.len(),
        size,
        mean_png_bytes: pngs.iter().map(Vec::len).sum::<usize>() / pngs.len(),
        resized: (grid.1 * pre.patch_size, grid.2 * pre.patch_size),
        image_tokens: grid.0 * grid.1 * grid.2 / (merge * merge),
        runs,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn radiograph_like_images_compress_like_nih_ones() {
        let mut bytes = Vec::new();
        super::radiograph_like(1024, 1).write_to(&mut std::io::Cursor::new(&mut bytes), image::ImageFormat::Png).unwrap();
        assert!((150_000..1_000_000).contains(&bytes.len()), "{} bytes", bytes.len());
    }
}
