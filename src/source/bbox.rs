//! `BBox_List_2017.csv`: 984 boxes on 880 images in the real file. It spells Infiltration as
//! "Infiltrate", and its coordinate header `Bbox [x,y,w,h]` spans four columns.

use std::collections::HashSet;
use std::path::Path;

use super::{open_csv, SourceError};
use crate::labels::{label_index, normalize_bbox_label, NO_FINDING};

#[derive(Debug, Clone, PartialEq)]
pub struct BoundingBox {
    pub image_index: String,
    pub label: String,
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

pub fn read(path: &Path, known_images: &HashSet<&str>) -> Result<Vec<BoundingBox>, SourceError> {
    let mut reader = open_csv(path)?;
    let mut records = reader.records();
    let header = match records.next() {
        Some(r) => r.map_err(|e| SourceError::csv(path, &e))?,
        None => return Err(SourceError::Header { path: path.into(), message: "the file is empty".into() }),
    };
    if header.get(0).map(str::trim) != Some("Image Index") || header.get(1).map(str::trim) != Some("Finding Label") {
        return Err(SourceError::Header {
            path: path.into(),
            message: "expected columns \"Image Index\", \"Finding Label\", then the box".into(),
        });
    }
    let mut boxes = Vec::new();
    for record in records {
        let record = record.map_err(|e| SourceError::csv(path, &e))?;
        let line = record.position().map_or(0, |p| p.line());
        if record.iter().all(|f| f.trim().is_empty()) {
            continue;
        }
        let bad = |message: String| SourceError::Row { path: path.into(), line, message };
        if record.len() < 6 {
            return Err(bad(format!("expected 6 fields (image, label, x, y, w, h), found {}", record.len())));
        }
        if let Some(extra) = record.iter().skip(6).find(|f| !f.trim().is_empty()) {
            return Err(bad(format!("unexpected value {extra:?} after the box")));
        }
        let image_index = record[0].trim().to_string();
        if !known_images.contains(image_index.as_str()) {
            return Err(bad(format!("image {image_index:?} is not in the data entry file")));
        }
        let label = normalize_bbox_label(record[1].trim());
        if label_index(label).is_none() || label == NO_FINDING {
            return Err(bad(format!("unknown finding label {:?}", record[1].trim())));
        }
        let num = |i: usize| -> Result<f64, SourceError> {
            record[i].trim().parse::<f64>().ok().filter(|v| v.is_finite()).ok_or_else(|| bad(format!("box value {:?} is not a number", &record[i])))
        };
        boxes.push(BoundingBox { image_index, label: label.to_string(), x: num(2)?, y: num(3)?, w: num(4)?, h: num(5)? });
    }
    Ok(boxes)
}
