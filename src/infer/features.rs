//! Every image's feature vector from a scorer (see [`super::IMAGE_FEATURES`]): for confident
//! learning's probes. Parallel over passes as scoring is; results in input order.

use rayon::prelude::*;

use super::runner::{decode_png, read_image};
use super::{ImageInput, ImageJob, InferError, RunOptions, Scorer};

/// The feature vector of each image of `images`, in order. Every vector has the same length.
pub fn run_features(images: &[ImageJob], scorer: &dyn Scorer, options: &RunOptions) -> Result<Vec<Vec<f32>>, InferError> {
    let bar = options.progress_bar(images.len(), "features");
    let per_pass = scorer.images_per_pass().max(1);
    let pass = |jobs: &[ImageJob]| -> Result<Vec<Vec<f32>>, InferError> {
        let read: Vec<(Vec<u8>, String, image::DynamicImage)> = jobs
            .iter()
            .map(|job| {
                let (bytes, sha) = read_image(job)?;
                let decoded = decode_png(&bytes, job)?;
                Ok((bytes, sha, decoded))
            })
            .collect::<Result<_, InferError>>()?;
        let inputs: Vec<ImageInput<'_>> =
            jobs.iter().zip(&read).map(|(job, (bytes, sha, image))| ImageInput { name: &job.name, sha256: sha, bytes, image }).collect();
        let vectors = scorer.image_features(&inputs)?;
        bar.inc(jobs.len() as u64);
        Ok(vectors)
    };
    let passes: Vec<Vec<Vec<f32>>> = options.pool()?.install(|| images.par_chunks(per_pass).map(pass).collect::<Result<_, _>>())?;
    bar.finish_and_clear();
    let vectors: Vec<Vec<f32>> = passes.into_iter().flatten().collect();
    let backend = || scorer.identity().backend.name().to_string();
    if vectors.len() != images.len() {
        return Err(InferError::Scorer {
            backend: backend(),
            message: format!("{} feature vectors for {} images", vectors.len(), images.len()),
        });
    }
    for (job, v) in images.iter().zip(&vectors) {
        if v.len() != vectors[0].len() || v.iter().any(|x| !x.is_finite()) {
            return Err(InferError::Scorer {
                backend: backend(),
                message: format!("image {}: {} features, not {} finite numbers", job.name, v.len(), vectors[0].len()),
            });
        }
    }
    Ok(vectors)
}
