//! The S2 part of a build after the rows are derived: the location evaluation against the
//! reference boxes (`location_eval.json`), the figures, and the card's S2 section.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use super::{io_err, write, BuildError};
use crate::card::location_plots::{self, SampleBoxes};
use crate::card::{DiagnoseCard, SignSummary};
use crate::diagnose::Diagnosis;
use crate::eval::location::{self, LocatedRow, LocationEval};
use crate::manifest;
use crate::release_spec::ReleaseSpec;
use crate::select::Selection;
use crate::source::NihTable;
use crate::vocab::LABELS;

/// Sample images the card's box figure shows.
const FIGURE_IMAGES: usize = 8;

pub(super) struct DiagnoseContext<'a> {
    pub spec: &'a ReleaseSpec,
    pub sizes: &'a HashMap<String, (u32, u32)>,
    pub table: &'a NihTable,
    pub selection: &'a Selection,
    pub diagnosis: &'a Diagnosis,
    /// Location tuples on the split's images (from its trace statistics).
    pub location_tuples: u32,
    pub split: &'a str,
    pub rows: &'a [usize],
}

/// Evaluates, draws and summarises S2 over the split's rows; writes `location_eval.json` and
/// the figures into `dir`.
pub(super) fn card_section(dir: &Path, c: &DiagnoseContext<'_>, log: &dyn Fn(&str)) -> Result<DiagnoseCard, BuildError> {
    let mut status: BTreeMap<String, usize> = BTreeMap::new();
    let (mut boxed_rows, mut truncated) = (0, 0);
    let mut signs: BTreeMap<&str, SignSummary> = BTreeMap::new();
    for &i in c.rows {
        let (row, d) = (&c.selection.rows[i], &c.diagnosis.rows[i]);
        if let Some(g) = &d.grounding {
            boxed_rows += 1;
            truncated += usize::from(g.truncated);
            *status.entry(g.grounding.status.name().to_string()).or_default() += 1;
        }
        if let Some(none_seen) = d.no_sign_seen {
            let label = LABELS[row.label];
            let s = signs.entry(label).or_insert_with(|| SignSummary {
                finding: label.to_string(),
                signs: d.signs.clone(),
                asserted_rows: 0,
                no_sign_seen: 0,
            });
            s.asserted_rows += 1;
            s.no_sign_seen += usize::from(none_seen);
        }
    }

    let mut section = DiagnoseCard {
        split: c.split.to_string(),
        boxed_rows,
        box_status: status.into_iter().collect(),
        truncated,
        signs: LABELS.iter().filter_map(|l| signs.remove(l)).collect(),
        location_tuples: c.location_tuples,
        location_eval: None,
        figures: Vec::new(),
    };
    if let (Some(prompts), false) = (&c.spec.prompts.location, c.table.boxes.is_empty()) {
        let eval = evaluate(c, prompts.zone_bounds)?;
        write(&dir.join("location_eval.json"), &manifest::to_json_bytes(&eval))?;
        log(&format!(
            "eval: location on {} reference boxes; IoU > 0.5 for {:.0}% of the model's boxes, {:.0}% of the mean box's",
            eval.overall.boxes,
            eval.overall.model.iou_above[2] * 100.0,
            eval.overall.baseline.iou_above[2] * 100.0
        ));
        section.figures.push(location_plots::iou_distribution(dir, c.split, &eval.ious)?);
        // Only the synthetic sample's own pixels go into a release.
        if c.spec.source.embedded_sample {
            section.figures.push(location_plots::sample_boxes(dir, c.split, &sample_cases(c)?)?);
        }
        section.location_eval = Some(location::to_markdown(&eval));
    }
    Ok(section)
}

fn evaluate(c: &DiagnoseContext<'_>, zone_bounds: [f64; 2]) -> Result<LocationEval, BuildError> {
    let rows: Vec<LocatedRow> = c
        .rows
        .iter()
        .filter_map(|&i| {
            let (row, d) = (&c.selection.rows[i], &c.diagnosis.rows[i]);
            d.grounding.as_ref()?;
            Some(LocatedRow {
                image_index: c.selection.images[row.image].image_index.clone(),
                label: LABELS[row.label].to_string(),
                model_box: d.first_box().cloned(),
                zoned: d.side_p.is_some(),
                side: d.side().map(str::to_string),
                zone: d.zone().map(str::to_string),
            })
        })
        .collect();
    let file = c.spec.source.bbox.as_deref().unwrap_or("the reference boxes");
    let against =
        if c.spec.source.embedded_sample { format!("the sample's drawn boxes (`{file}`)") } else { format!("NIH's boxes (`{file}`)") };
    Ok(location::evaluate(&rows, &c.table.boxes, c.sizes, zone_bounds, &against))
}

/// The first boxed rows with a reference box, one per finding while findings last.
fn sample_cases(c: &DiagnoseContext<'_>) -> Result<Vec<SampleBoxes>, BuildError> {
    let mut picked: Vec<(usize, &crate::source::BoundingBox)> = Vec::new();
    for pass in 0..2 {
        for &i in c.rows {
            let row = &c.selection.rows[i];
            let (image, label) = (&c.selection.images[row.image].image_index, LABELS[row.label]);
            let Some(b) = c.table.boxes.iter().find(|b| &b.image_index == image && b.label == label) else { continue };
            let seen = picked.iter().any(|(j, _)| LABELS[c.selection.rows[*j].label] == label);
            let boxed = c.diagnosis.rows[i].grounding.is_some();
            if boxed && picked.len() < FIGURE_IMAGES && !picked.iter().any(|(j, _)| *j == i) && (pass == 1 || !seen) {
                picked.push((i, b));
            }
        }
    }
    picked.sort_by_key(|(i, _)| *i);
    let folder = c.spec.source.images_dir();
    picked
        .into_iter()
        .map(|(i, b)| {
            let image_index = c.selection.images[c.selection.rows[i].image].image_index.clone();
            let path = folder.join(&image_index);
            let bytes = std::fs::read(&path).map_err(io_err(&path))?;
            let pixels = image::load_from_memory(&bytes)
                .map_err(|e| BuildError::Io { path: path.clone(), source: std::io::Error::other(e) })?
                .to_luma8();
            Ok(SampleBoxes {
                image_index,
                pixels,
                finding: b.label.clone(),
                reference: crate::diagnose::location::as_image_box(b),
                model: c.diagnosis.rows[i].first_box().cloned(),
            })
        })
        .collect()
}
