//! S2's location evaluation against NIH's boxes (`BBox_List_2017.csv`; on the sample, the drawn
//! boxes), as Wang et al. 2017 scored localisation: a box is correct when its IoU with the
//! reference, or its IoBB (intersection over the predicted box), is above a threshold. Beside
//! the model, in the same table, a baseline box: the finding's mean box over the reference list,
//! so readers see what the model adds over knowing where the finding usually is. Zone accuracy
//! compares the side and zone the model states with those NIH's box implies.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::Float64Type;
use arrow_array::Array;
use serde::Serialize;

use super::{release_rows, EvalError};
use crate::diagnose::location::{as_image_box, implied_side, implied_zone};
use crate::source::BoundingBox;
use crate::vocab::LABELS;
use bpals_vlm::grounding::ImageBox;

pub const THRESHOLDS: [f64; 3] = [0.1, 0.25, 0.5];

/// What the evaluation needs from one release row with a grounding answer.
#[derive(Debug, Clone)]
pub struct LocatedRow {
    pub image_index: String,
    pub label: String,
    /// The model's first box, None when the answer held none that parses.
    pub model_box: Option<ImageBox>,
    /// Whether the finding was asked a side and zone, and what the model stated.
    pub zoned: bool,
    pub side: Option<String>,
    pub zone: Option<String>,
}

/// Accuracy of one kind of box against the reference boxes.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct BoxScores {
    /// Share of reference boxes matched with IoU above each of [`THRESHOLDS`].
    pub iou_above: [f64; 3],
    /// Share matched with IoBB above each of [`THRESHOLDS`].
    pub iobb_above: [f64; 3],
    /// Share whose box centre falls inside the reference box.
    pub centre_inside: f64,
    pub mean_iou: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FindingLocation {
    pub finding: String,
    /// Reference boxes on rows of the release that asked for a box.
    pub boxes: usize,
    /// Of those, how many the model answered with a box that parses.
    pub model_boxed: usize,
    pub model: BoxScores,
    pub baseline: BoxScores,
    /// Reference boxes of findings asked a side and zone; the model's side and zone accuracy
    /// there (an unstated side or zone counts as wrong), and how often it stated one.
    pub zoned: usize,
    pub side_accuracy: Option<f64>,
    pub zone_accuracy: Option<f64>,
    pub side_stated: usize,
    pub zone_stated: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct LocationEval {
    pub against: String,
    pub thresholds: [f64; 3],
    pub zone_bounds: [f64; 2],
    pub per_finding: Vec<FindingLocation>,
    pub overall: FindingLocation,
    /// Reference boxes of findings the release has no boxed row for (NIH does not assert the
    /// finding on that image, or the image is not in the release).
    pub reference_boxes_without_row: usize,
    /// (finding, model IoU, baseline IoU) per evaluated reference box, for the IoU figure.
    #[serde(skip)]
    pub ious: Vec<(String, f64, f64)>,
}

/// One evaluated reference box.
struct Case<'a> {
    finding: &'a str,
    reference: ImageBox,
    model: Option<&'a ImageBox>,
    baseline: ImageBox,
    zoned: bool,
    side: (Option<&'a str>, &'static str),
    zone: (Option<&'a str>, &'static str),
}

/// Evaluates `rows` against `reference`; `sizes` gives the (width, height) of each referenced
/// image's PNG (the boxes' frame). Boxes of images without a size are left out.
pub fn evaluate(
    rows: &[LocatedRow],
    reference: &[BoundingBox],
    sizes: &HashMap<String, (u32, u32)>,
    zone_bounds: [f64; 2],
    against: &str,
) -> LocationEval {
    let mean_boxes = mean_boxes(reference, sizes);
    let by_key: HashMap<(&str, &str), &LocatedRow> = rows.iter().map(|r| ((r.image_index.as_str(), r.label.as_str()), r)).collect();
    let mut cases = Vec::new();
    let mut without_row = 0;
    for b in reference {
        let (Some(row), Some(&(w, h))) = (by_key.get(&(b.image_index.as_str(), b.label.as_str())), sizes.get(b.image_index.as_str()))
        else {
            without_row += 1;
            continue;
        };
        let m = mean_boxes[b.label.as_str()];
        let (fw, fh) = (f64::from(w), f64::from(h));
        cases.push(Case {
            finding: &row.label,
            reference: as_image_box(b),
            model: row.model_box.as_ref(),
            baseline: ImageBox { label: None, x1: m[0] * fw, y1: m[1] * fh, x2: m[2] * fw, y2: m[3] * fh },
            zoned: row.zoned,
            side: (row.side.as_deref(), implied_side(b, w)),
            zone: (row.zone.as_deref(), implied_zone(b, h, zone_bounds)),
        });
    }
    let per_finding = LABELS
        .iter()
        .filter_map(|l| {
            let of: Vec<&Case> = cases.iter().filter(|c| c.finding == *l).collect();
            (!of.is_empty()).then(|| summarise(l, &of))
        })
        .collect();
    let all: Vec<&Case> = cases.iter().collect();
    let ious =
        cases.iter().map(|c| (c.finding.to_string(), c.model.map_or(0.0, |m| m.iou(&c.reference)), c.baseline.iou(&c.reference))).collect();
    LocationEval {
        against: against.to_string(),
        thresholds: THRESHOLDS,
        zone_bounds,
        per_finding,
        overall: summarise("all findings", &all),
        reference_boxes_without_row: without_row,
        ious,
    }
}

/// S2: the rows with a grounding answer, as the location evaluation reads them.
fn read_located(dir: &Path) -> Result<Vec<LocatedRow>, EvalError> {
    let (_, files) = release_rows::pair_files(dir, None)?;
    let mut rows = Vec::new();
    release_rows::batches(dir, &files, |path, batch| {
        let column = |name: &str| release_rows::column(path, batch, name);
        let (images, labels, status) = (column("image_index")?, column("label")?, column("box_status")?);
        let (images, labels, status) = (images.as_string::<i32>(), labels.as_string::<i32>(), status.as_string::<i32>());
        let corner = |name: &str| column(name).map(|c| c.as_primitive::<Float64Type>().clone());
        let (x1, y1, x2, y2) = (corner("box_x1")?, corner("box_y1")?, corner("box_x2")?, corner("box_y2")?);
        let (side_p, side, zone) = (column("side_p_right")?, column("location_side")?, column("location_zone")?);
        let (side, zone) = (side.as_string::<i32>(), zone.as_string::<i32>());
        let text = |a: &arrow_array::StringArray, i: usize| (!a.is_null(i)).then(|| a.value(i).to_string());
        for i in (0..batch.num_rows()).filter(|&i| !status.is_null(i)) {
            let model_box =
                (!x1.is_null(i)).then(|| ImageBox { label: None, x1: x1.value(i), y1: y1.value(i), x2: x2.value(i), y2: y2.value(i) });
            rows.push(LocatedRow {
                image_index: images.value(i).to_string(),
                label: labels.value(i).to_string(),
                model_box,
                zoned: !side_p.is_null(i),
                side: text(side, i),
                zone: text(zone, i),
            });
        }
        Ok(())
    })?;
    Ok(rows)
}

/// NIH's PNGs are 1024x1024; the reference boxes are in their pixels.
pub const NIH_PNG_SIZE: (u32, u32) = (1024, 1024);

/// `eval DIR --boxes FILE`: a built S2 release's boxes and zones against reference boxes (in
/// `BBox_List_2017.csv`'s layout). Image sizes come from the PNG headers in `images` when given,
/// else every image is taken as NIH's 1024x1024.
pub fn evaluate_release(dir: &Path, boxes: &Path, images: Option<&Path>) -> Result<LocationEval, EvalError> {
    let lock = crate::manifest::BuildLock::read(dir)?;
    let bounds = lock.spec["prompts"]["location"]["zone_bounds"].as_array().and_then(|b| Some([b.first()?.as_f64()?, b.get(1)?.as_f64()?]));
    let release = lock.spec["release"]["id"].as_str().unwrap_or_default().to_string();
    let zone_bounds = bounds.ok_or_else(|| EvalError::NotDiagnosed { dir: dir.to_path_buf(), release })?;
    let reference = crate::source::read_bbox_list(boxes, None).map_err(|source| EvalError::Boxes { path: boxes.to_path_buf(), source })?;
    let sizes = match images {
        Some(folder) => {
            crate::source::image_sizes(folder, &reference).map_err(|source| EvalError::ImageSizes { dir: folder.to_path_buf(), source })?
        }
        None => reference.iter().map(|b| (b.image_index.clone(), NIH_PNG_SIZE)).collect(),
    };
    let rows = read_located(dir)?;
    let name = boxes.file_name().map_or_else(|| boxes.display().to_string(), |n| n.to_string_lossy().into_owned());
    Ok(evaluate(&rows, &reference, &sizes, zone_bounds, &format!("`{name}`")))
}

/// Per finding, the mean reference box as fractions of the image: [x1, y1, x2, y2].
fn mean_boxes<'a>(reference: &'a [BoundingBox], sizes: &HashMap<String, (u32, u32)>) -> BTreeMap<&'a str, [f64; 4]> {
    let mut sums: BTreeMap<&str, ([f64; 4], f64)> = BTreeMap::new();
    for b in reference {
        let Some(&(w, h)) = sizes.get(b.image_index.as_str()) else { continue };
        let (w, h) = (f64::from(w), f64::from(h));
        let s = sums.entry(b.label.as_str()).or_insert(([0.0; 4], 0.0));
        for (acc, v) in s.0.iter_mut().zip([b.x / w, b.y / h, (b.x + b.w) / w, (b.y + b.h) / h]) {
            *acc += v;
        }
        s.1 += 1.0;
    }
    sums.into_iter().map(|(label, (s, n))| (label, s.map(|v| v / n))).collect()
}

fn summarise(finding: &str, cases: &[&Case<'_>]) -> FindingLocation {
    let n = cases.len();
    let scores = |pick: &dyn Fn(&Case<'_>) -> Option<ImageBox>| -> BoxScores {
        let mut s = BoxScores::default();
        for c in cases {
            let Some(p) = pick(c) else { continue };
            let iou = p.iou(&c.reference);
            let iobb = if p.area() > 0.0 { p.intersection(&c.reference) / p.area() } else { 0.0 };
            for (k, t) in THRESHOLDS.iter().enumerate() {
                s.iou_above[k] += f64::from(u8::from(iou > *t));
                s.iobb_above[k] += f64::from(u8::from(iobb > *t));
            }
            let (cx, cy) = ((p.x1 + p.x2) / 2.0, (p.y1 + p.y2) / 2.0);
            let r = &c.reference;
            s.centre_inside += f64::from(u8::from(r.x1 <= cx && cx <= r.x2 && r.y1 <= cy && cy <= r.y2));
            s.mean_iou += iou;
        }
        let share = |v: f64| if n > 0 { v / n as f64 } else { 0.0 };
        BoxScores {
            iou_above: s.iou_above.map(share),
            iobb_above: s.iobb_above.map(share),
            centre_inside: share(s.centre_inside),
            mean_iou: share(s.mean_iou),
        }
    };
    let zoned: Vec<&&Case> = cases.iter().filter(|c| c.zoned).collect();
    let rate = |hits: usize| (!zoned.is_empty()).then(|| hits as f64 / zoned.len() as f64);
    FindingLocation {
        finding: finding.to_string(),
        boxes: n,
        model_boxed: cases.iter().filter(|c| c.model.is_some()).count(),
        model: scores(&|c| c.model.cloned()),
        baseline: scores(&|c| Some(c.baseline.clone())),
        zoned: zoned.len(),
        side_accuracy: rate(zoned.iter().filter(|c| c.side.0 == Some(c.side.1)).count()),
        zone_accuracy: rate(zoned.iter().filter(|c| c.zone.0 == Some(c.zone.1)).count()),
        side_stated: zoned.iter().filter(|c| c.side.0.is_some()).count(),
        zone_stated: zoned.iter().filter(|c| c.zone.0.is_some()).count(),
    }
}

/// The card's table: model and baseline side by side per finding.
pub fn to_markdown(e: &LocationEval) -> String {
    let pct = |v: f64| format!("{:.0}%", v * 100.0);
    let opt = |v: Option<f64>| v.map_or("n/a".into(), pct);
    let mut md = format!(
        "Against {}: {} reference boxes on boxed rows ({} more belong to findings the release has no boxed row for). \
         Accuracy is the share of reference boxes the box matches with IoU, or IoBB (intersection over the predicted box), \
         above 0.1 / 0.25 / 0.5; a missing or unparseable box counts as a miss. *Baseline* is the finding's mean reference \
         box. Side and zone: the model's stated side and zone against those the reference box's centre implies.\n\n\
         | finding | boxes | boxed | box | IoU>0.1 | IoU>0.25 | IoU>0.5 | IoBB>0.1 | IoBB>0.25 | IoBB>0.5 | centre inside | mean IoU | side acc. | zone acc. |\n\
         |---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        e.against, e.overall.boxes, e.reference_boxes_without_row
    );
    for f in e.per_finding.iter().chain(std::iter::once(&e.overall)) {
        for (which, s) in [("model", &f.model), ("baseline", &f.baseline)] {
            let (name, boxes, boxed, side, zone) = if which == "model" {
                (f.finding.clone(), f.boxes.to_string(), f.model_boxed.to_string(), opt(f.side_accuracy), opt(f.zone_accuracy))
            } else {
                (String::new(), String::new(), String::new(), String::new(), String::new())
            };
            md.push_str(&format!(
                "| {name} | {boxes} | {boxed} | {which} | {} | {} | {} | {} | {} | {} | {} | {:.2} | {side} | {zone} |\n",
                pct(s.iou_above[0]),
                pct(s.iou_above[1]),
                pct(s.iou_above[2]),
                pct(s.iobb_above[0]),
                pct(s.iobb_above[1]),
                pct(s.iobb_above[2]),
                pct(s.centre_inside),
                s.mean_iou
            ));
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nih(image: &str, label: &str, x: f64, y: f64, w: f64, h: f64) -> BoundingBox {
        BoundingBox { image_index: image.into(), label: label.into(), x, y, w, h }
    }

    #[test]
    fn scores_follow_the_wang_rule_and_the_baseline_is_the_mean_box() {
        let reference = [nih("a.png", "Nodule", 100.0, 100.0, 100.0, 100.0), nih("b.png", "Nodule", 500.0, 500.0, 100.0, 100.0)];
        let sizes: HashMap<String, (u32, u32)> = [("a.png".to_string(), (1000, 1000)), ("b.png".to_string(), (1000, 1000))].into();
        let row = |image: &str, b: Option<ImageBox>| LocatedRow {
            image_index: image.into(),
            label: "Nodule".into(),
            model_box: b,
            zoned: true,
            side: Some("right".into()),
            zone: Some("upper".into()),
        };
        // a: a box inside the reference, a quarter of its area (IoU 0.25, IoBB 1); b: no box.
        let inside = ImageBox { label: None, x1: 125.0, y1: 125.0, x2: 175.0, y2: 175.0 };
        let e = evaluate(&[row("a.png", Some(inside)), row("b.png", None)], &reference, &sizes, [0.375, 0.5625], "test");
        let f = &e.per_finding[0];
        assert_eq!((f.boxes, f.model_boxed), (2, 1));
        assert_eq!(f.model.iou_above, [0.5, 0.0, 0.0], "IoU 0.25 is not above 0.25");
        assert_eq!(f.model.iobb_above, [0.5, 0.5, 0.5]);
        assert_eq!(f.model.centre_inside, 0.5);
        // The mean box (300,300)-(400,400) touches neither reference box.
        assert_eq!(f.baseline.iou_above, [0.0, 0.0, 0.0]);
        // a: right upper, as stated; b: centre (550, 550) is the patient's left, middle zone.
        assert_eq!((f.side_accuracy, f.zone_accuracy), (Some(0.5), Some(0.5)));
        assert!(to_markdown(&e).contains("| Nodule | 2 | 1 | model | 50% | 0% | 0% | 50% | 50% | 50% | 50% |"), "{}", to_markdown(&e));
    }
}
