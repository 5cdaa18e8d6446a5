//! Selection: the curated subset of images and the (image, label) rows the release covers.
//! The trial sample, which needs the signal, is a later stage: [`crate::trial`].

pub mod curate;

use serde::Serialize;

use crate::hashing::stable_u64;
use crate::release_spec::{RowPolicy, SelectionSpec};
use crate::source::{NihTable, SourceError};
use crate::vocab::LABELS;

/// One curated image, with what later stages and the shards need from the NIH table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ImageRef {
    pub image_index: String,
    pub patient_id: u32,
    pub view_position: String,
    /// Official split ("train_val" or "test"), when the split lists were given.
    pub official_split: Option<String>,
    /// Bit i set = NIH asserts `LABELS[i]`.
    pub labels: u16,
}

/// One (image, label) row of the release.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PairRow {
    /// Index into [`Selection::images`].
    pub image: usize,
    /// Index into [`LABELS`].
    pub label: usize,
    pub nih_label: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Selection {
    /// Sorted by image index: the row order of every output.
    pub images: Vec<ImageRef>,
    pub rows: Vec<PairRow>,
    /// Images that passed the filters, before the curated size was applied.
    pub candidates: usize,
    /// The spec asked for more images than there are candidates (allowed on the embedded sample only).
    pub capped: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    #[error(transparent)]
    Table(#[from] SourceError),
    #[error("selection.curated_images asks for {wanted} images but only {available} pass the filters")]
    TooFewImages { wanted: usize, available: usize },
    #[error("the selection has {got} rows but selection.expected_rows says {expected}")]
    RowCount { got: usize, expected: usize },
    #[error("the curated list (selection.images) names {image}, which is not in the data entry file")]
    NotInSource { image: String },
    #[error("the curated list (selection.images) names {image}, whose view {view} is not one of selection.views")]
    WrongView { image: String, view: String },
    #[error("the curated list (selection.images) has {got} images but selection.curated_images says {expected}")]
    ListSize { got: usize, expected: usize },
}

/// Picks the curated images: those of the committed `list` when there is one, else a seeded
/// order keyed by image name (so the choice does not depend on the file's row order) cut at
/// `curated_images`; then sorted by name. `allow_cap` lets a demo build on a small sample take
/// fewer images than asked.
pub fn select(table: &NihTable, spec: &SelectionSpec, list: Option<&[String]>, allow_cap: bool) -> Result<Selection, SelectError> {
    let names = table.str_column("image_index")?;
    let views = table.str_column("view_position")?;
    let patients = table.u32_column("patient_id")?;
    let masks = table.label_masks()?;
    let splits = table.split_column()?;

    let seed = spec.seed.to_string();
    let in_views = |i: usize| spec.views.iter().any(|v| v == views[i]);
    let (mut candidates, available, capped) = match list {
        Some(list) => {
            let index: std::collections::HashMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
            let mut chosen = Vec::with_capacity(list.len());
            for image in list {
                let &i = index.get(image.as_str()).ok_or_else(|| SelectError::NotInSource { image: image.clone() })?;
                if !in_views(i) {
                    return Err(SelectError::WrongView { image: image.clone(), view: views[i].to_string() });
                }
                chosen.push(i);
            }
            if chosen.len() != spec.curated_images {
                return Err(SelectError::ListSize { got: chosen.len(), expected: spec.curated_images });
            }
            let available = chosen.len();
            (chosen, available, false)
        }
        None => {
            let mut candidates: Vec<usize> = (0..names.len()).filter(|&i| in_views(i)).collect();
            let available = candidates.len();
            let capped = spec.curated_images > available;
            if capped && !allow_cap {
                return Err(SelectError::TooFewImages { wanted: spec.curated_images, available });
            }
            // Cached: the key is a hash, computed once per image rather than once per comparison.
            candidates.sort_by_cached_key(|&i| (stable_u64(&["curated", &seed, names[i]]), i));
            candidates.truncate(spec.curated_images);
            (candidates, available, capped)
        }
    };
    candidates.sort_by(|&a, &b| names[a].cmp(names[b]));

    let images: Vec<ImageRef> = candidates
        .iter()
        .map(|&i| ImageRef {
            image_index: names[i].to_string(),
            patient_id: patients[i],
            view_position: views[i].to_string(),
            official_split: splits[i].map(str::to_string),
            labels: masks[i],
        })
        .collect();
    let mut rows = Vec::new();
    for (image, img) in images.iter().enumerate() {
        for label in 0..LABELS.len() {
            let asserted = img.labels & (1 << label) != 0;
            if asserted || spec.rows == RowPolicy::AllLabels {
                rows.push(PairRow { image, label, nih_label: asserted });
            }
        }
    }
    if let Some(expected) = spec.expected_rows {
        if rows.len() != expected && !capped {
            return Err(SelectError::RowCount { got: rows.len(), expected });
        }
    }
    Ok(Selection { images, rows, candidates: available, capped })
}
