//! `BBox_List_2017.csv`: 984 boxes on 880 images in the real file. It spells Infiltration as
//! "Infiltrate", and its coordinate header `Bbox [x,y,w,h]` spans four columns.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use super::csv_rows::MetadataCsv;
use super::SourceError;
use crate::vocab::{label_index, normalize_bbox_label, NO_FINDING};

#[derive(Debug, Clone, PartialEq)]
pub struct BoundingBox {
    pub image_index: String,
    pub label: String,
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

/// Reads the boxes; with `known_images`, every box's image must be one of them.
pub fn read(path: &Path, known_images: Option<&HashSet<&str>>) -> Result<Vec<BoundingBox>, SourceError> {
    let (rows, header) = MetadataCsv::open(path, 6, "image, label, x, y, w, h")?;
    if header.get(0).map(str::trim) != Some("Image Index") || header.get(1).map(str::trim) != Some("Finding Label") {
        return Err(rows.bad_header("expected columns \"Image Index\", \"Finding Label\", then the box".into()));
    }
    let mut boxes = Vec::new();
    for row in rows {
        let row = row?;
        let image_index = row.field(0).to_string();
        if known_images.is_some_and(|known| !known.contains(image_index.as_str())) {
            return Err(row.error(format!("image {image_index:?} is not in the data entry file")));
        }
        let label = normalize_bbox_label(row.field(1));
        if label_index(label).is_none() || label == NO_FINDING {
            return Err(row.error(format!("unknown finding label {:?}", row.field(1))));
        }
        let num = |i: usize| -> Result<f64, SourceError> {
            row.field(i)
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| row.error(format!("box value {:?} is not a number", row.field(i))))
        };
        boxes.push(BoundingBox { image_index, label: label.to_string(), x: num(2)?, y: num(3)?, w: num(4)?, h: num(5)? });
    }
    Ok(boxes)
}

/// The (width, height) of each boxed image's PNG in `folder`, read from its header; images not
/// in the folder are left out. NIH's boxes are in these pixels (its PNGs are 1024x1024), not in
/// the metadata's `OriginalImage` size.
pub fn image_sizes(folder: &Path, boxes: &[BoundingBox]) -> Result<HashMap<String, (u32, u32)>, SourceError> {
    let mut sizes = HashMap::new();
    for b in boxes {
        let path = folder.join(&b.image_index);
        if sizes.contains_key(&b.image_index) || !path.is_file() {
            continue;
        }
        let size = image::ImageReader::open(&path)
            .map_err(|source| SourceError::Io { path: path.clone(), source })?
            .into_dimensions()
            .map_err(|source| SourceError::ImageSize { path: path.clone(), source })?;
        sizes.insert(b.image_index.clone(), size);
    }
    Ok(sizes)
}
