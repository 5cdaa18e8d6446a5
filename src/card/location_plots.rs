//! S2's figures: the IoU distribution of the model's boxes per finding (every release), and,
//! for the synthetic sample only, a few sample images with the reference box and the model's
//! box drawn on them. A real release is annotation-only and never embeds NIH pixels.

use std::path::Path;

use plotters::prelude::*;

use super::plots::{histogram, paired_histogram, register_font, write_png, Area, PlotError, PlotFile, BINS, FONT};
use bpals_vlm::grounding::ImageBox;

/// One sample image for the box figure: its pixels, the finding, and both boxes (in its pixels).
pub struct SampleBoxes {
    pub image_index: String,
    pub pixels: image::GrayImage,
    pub finding: String,
    pub reference: ImageBox,
    pub model: Option<ImageBox>,
}

const REFERENCE: RGBColor = RGBColor(40, 200, 80);
const MODEL: RGBColor = RGBColor(230, 60, 40);

fn err(path: String) -> impl Fn(String) -> PlotError {
    move |message| PlotError { path: path.clone(), message }
}

/// Histograms of the model's IoU (red) and the baseline box's (blue) per finding.
/// `ious`: (finding, model IoU, baseline IoU) per reference box.
pub fn iou_distribution(dir: &Path, split: &str, ious: &[(String, f64, f64)]) -> Result<PlotFile, PlotError> {
    register_font();
    let file = PlotFile {
        path: format!("plots/{split}-box-iou.png"),
        title: "Box IoU by finding".into(),
        caption: format!(
            "Share of reference boxes per IoU bin ({BINS} bins of width 0.1), per finding: the model's box (red) and the \
             finding's mean box (blue); a missing box counts as IoU 0. `{split}` split."
        ),
    };
    let fail = err(file.path.clone());
    let mut findings: Vec<&str> = ious.iter().map(|(f, _, _)| f.as_str()).collect();
    findings.dedup();
    let size = (1400u32, 300 * findings.len().div_ceil(4).max(1) as u32 + 60);
    let mut buffer = vec![255u8; size.0 as usize * size.1 as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut buffer, size).into_drawing_area();
        let area = root.titled(&file.title, (FONT, 28)).map_err(|e| fail(e.to_string()))?;
        iou_panels(&area, &findings, ious).map_err(&fail)?;
        root.present().map_err(|e| fail(e.to_string()))?;
    }
    write_png(&dir.join(&file.path), &buffer, size).map_err(&fail)?;
    Ok(file)
}

fn iou_panels(area: &Area<'_>, findings: &[&str], ious: &[(String, f64, f64)]) -> Result<(), String> {
    let panels = area.split_evenly((findings.len().div_ceil(4).max(1), 4));
    for (panel, finding) in panels.iter().zip(findings) {
        let of = |pick: fn(&(String, f64, f64)) -> f64| histogram(ious.iter().filter(|i| i.0 == *finding).map(pick));
        let n = ious.iter().filter(|i| i.0 == *finding).count();
        paired_histogram(panel, format!("{finding} (n={n})"), &of(|i| i.2), &of(|i| i.1))?;
    }
    Ok(())
}

/// Cell layout of the sample figure: each image scaled to `SIDE` pixels under a caption.
const SIDE: u32 = 256;
const CELL: (u32, u32) = (SIDE + 24, SIDE + 56);
const COLUMNS: u32 = 4;

/// The sample images with the reference box (green) and the model's box (red).
pub fn sample_boxes(dir: &Path, split: &str, cases: &[SampleBoxes]) -> Result<PlotFile, PlotError> {
    register_font();
    let file = PlotFile {
        path: format!("plots/{split}-sample-boxes.png"),
        title: "Boxes on sample images".into(),
        caption: "Synthetic sample images (never NIH pixels) with the drawn reference box (green) and the model's box (red), \
                  the finding and the IoU above each."
            .into(),
    };
    let fail = err(file.path.clone());
    let rows = (cases.len() as u32).div_ceil(COLUMNS).max(1);
    let size = (CELL.0 * COLUMNS, CELL.1 * rows + 50);
    let mut buffer = vec![255u8; size.0 as usize * size.1 as usize * 3];
    for (k, case) in cases.iter().enumerate() {
        let (x0, y0) = cell_origin(k);
        let scaled = image::imageops::resize(&case.pixels, SIDE, SIDE, image::imageops::FilterType::Nearest);
        for (x, y, p) in scaled.enumerate_pixels() {
            let at = (((y0 + y) * size.0 + x0 + x) * 3) as usize;
            buffer[at..at + 3].fill(p.0[0]);
        }
    }
    {
        let root = BitMapBackend::with_buffer(&mut buffer, size).into_drawing_area();
        root.draw(&Text::new(file.title.clone(), (10, 10), (FONT, 28))).map_err(|e| fail(e.to_string()))?;
        for (k, case) in cases.iter().enumerate() {
            let (x0, y0) = cell_origin(k);
            let (w, h) = case.pixels.dimensions();
            let to_px = |b: &ImageBox| {
                let sx = |v: f64| x0 as i32 + (v * f64::from(SIDE) / f64::from(w)).round() as i32;
                let sy = |v: f64| y0 as i32 + (v * f64::from(SIDE) / f64::from(h)).round() as i32;
                [(sx(b.x1), sy(b.y1)), (sx(b.x2), sy(b.y2))]
            };
            root.draw(&Rectangle::new(to_px(&case.reference), REFERENCE.stroke_width(2))).map_err(|e| fail(e.to_string()))?;
            let iou = match &case.model {
                Some(m) => {
                    root.draw(&Rectangle::new(to_px(m), MODEL.stroke_width(2))).map_err(|e| fail(e.to_string()))?;
                    format!("IoU {:.2}", m.iou(&case.reference))
                }
                None => "no box".into(),
            };
            let caption = format!("{}: {iou}", case.finding);
            root.draw(&Text::new(caption, (x0 as i32, y0 as i32 - 22), (FONT, 15))).map_err(|e| fail(e.to_string()))?;
            root.draw(&Text::new(case.image_index.clone(), (x0 as i32, (y0 + SIDE) as i32 + 4), (FONT, 12)))
                .map_err(|e| fail(e.to_string()))?;
        }
        root.present().map_err(|e| fail(e.to_string()))?;
    }
    write_png(&dir.join(&file.path), &buffer, size).map_err(&fail)?;
    Ok(file)
}

fn cell_origin(k: usize) -> (u32, u32) {
    let (col, row) = (k as u32 % COLUMNS, k as u32 / COLUMNS);
    (col * CELL.0 + 12, 50 + row * CELL.1 + 28)
}
