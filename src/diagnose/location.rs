//! Reading a reference box as a side and a zone, and deciding when the model's location
//! contradicts it.
//!
//! On a frontal film the patient's right lung is on the image's left. Zones are bands of the
//! image height, split at the spec's `zone_bounds`.

use super::RowDiagnosis;
use crate::source::BoundingBox;
use bpals_vlm::grounding::{BoxStatus, ImageBox};

/// The patient's side a box's centre lies on.
pub fn implied_side(b: &BoundingBox, width: u32) -> &'static str {
    if b.x + b.w / 2.0 < f64::from(width) / 2.0 {
        "right"
    } else {
        "left"
    }
}

/// The zone a box's centre lies in.
pub fn implied_zone(b: &BoundingBox, height: u32, bounds: [f64; 2]) -> &'static str {
    let y = (b.y + b.h / 2.0) / f64::from(height);
    if y < bounds[0] {
        "upper"
    } else if y < bounds[1] {
        "middle"
    } else {
        "lower"
    }
}

/// The NIH box as an [`ImageBox`].
pub fn as_image_box(b: &BoundingBox) -> ImageBox {
    ImageBox { label: Some(b.label.clone()), x1: b.x, y1: b.y, x2: b.x + b.w, y2: b.y + b.h }
}

/// Whether the model places the finding where none of NIH's boxes of it can be: its side's
/// half or its zone's band misses every box, or its box overlaps none of them.
pub fn contradicts(d: &RowDiagnosis, nih: &[&BoundingBox], (width, height): (u32, u32), bounds: [f64; 2]) -> bool {
    let (w, h) = (f64::from(width), f64::from(height));
    let overlaps = |a: (f64, f64), b: (f64, f64)| a.0 < b.1 && b.0 < a.1;
    if let Some(side) = d.side() {
        let half = if side == "right" { (0.0, w / 2.0) } else { (w / 2.0, w) };
        if !nih.iter().any(|b| overlaps(half, (b.x, b.x + b.w))) {
            return true;
        }
    }
    if let Some(zone) = d.zone() {
        let band = match zone {
            "upper" => (0.0, bounds[0] * h),
            "middle" => (bounds[0] * h, bounds[1] * h),
            _ => (bounds[1] * h, h),
        };
        if !nih.iter().any(|b| overlaps(band, (b.y, b.y + b.h))) {
            return true;
        }
    }
    if let Some(g) = &d.grounding {
        let boxed = matches!(g.grounding.status, BoxStatus::Ok | BoxStatus::OutsideImage);
        if boxed && g.grounding.boxes.iter().all(|m| nih.iter().all(|b| m.iou(&as_image_box(b)) == 0.0)) {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nih(x: f64, y: f64, w: f64, h: f64) -> BoundingBox {
        BoundingBox { image_index: "a.png".into(), label: "Nodule".into(), x, y, w, h }
    }

    #[test]
    fn boxes_read_as_side_and_zone() {
        assert_eq!(implied_side(&nih(100.0, 0.0, 50.0, 50.0), 1024), "right");
        assert_eq!(implied_side(&nih(700.0, 0.0, 50.0, 50.0), 1024), "left");
        let bounds = [0.375, 0.5625];
        assert_eq!(implied_zone(&nih(0.0, 100.0, 10.0, 10.0), 1024, bounds), "upper");
        assert_eq!(implied_zone(&nih(0.0, 450.0, 10.0, 10.0), 1024, bounds), "middle");
        assert_eq!(implied_zone(&nih(0.0, 800.0, 10.0, 10.0), 1024, bounds), "lower");
    }

    #[test]
    fn a_location_contradicts_only_where_no_box_can_be() {
        let bounds = [0.375, 0.5625];
        let b = nih(100.0, 100.0, 100.0, 100.0); // patient's right, upper
        let right_upper = RowDiagnosis { side_p: Some([0.9, 0.1]), zone_p: Some([0.8, 0.1, 0.1]), ..Default::default() };
        assert_eq!((right_upper.side(), right_upper.zone()), (Some("right"), Some("upper")));
        let undecided = RowDiagnosis { side_p: Some([0.6, 0.55]), zone_p: Some([0.2, 0.3, 0.1]), ..Default::default() };
        assert_eq!((undecided.side(), undecided.zone()), (None, None), "yes to both sides, no to every zone");
        assert!(!contradicts(&undecided, &[&b], (1024, 1024), bounds), "no stated place, no contradiction");
        assert!(!contradicts(&right_upper, &[&b], (1024, 1024), bounds));
        let left = RowDiagnosis { side_p: Some([0.2, 0.8]), ..Default::default() };
        assert!(contradicts(&left, &[&b], (1024, 1024), bounds));
        let lower = RowDiagnosis { zone_p: Some([0.1, 0.1, 0.8]), ..Default::default() };
        assert!(contradicts(&lower, &[&b], (1024, 1024), bounds));
        // A box elsewhere contradicts; one that overlaps does not; no box says nothing.
        let boxed = |x1: f64, status| RowDiagnosis {
            grounding: Some(super::super::RowGrounding {
                answer: String::new(),
                truncated: false,
                grounding: bpals_vlm::grounding::Grounding {
                    status,
                    boxes: vec![ImageBox { label: None, x1, y1: 100.0, x2: x1 + 50.0, y2: 150.0 }],
                },
            }),
            ..Default::default()
        };
        assert!(contradicts(&boxed(600.0, BoxStatus::Ok), &[&b], (1024, 1024), bounds));
        assert!(!contradicts(&boxed(150.0, BoxStatus::Ok), &[&b], (1024, 1024), bounds));
        assert!(!contradicts(&RowDiagnosis::default(), &[&b], (1024, 1024), bounds));
    }
}
