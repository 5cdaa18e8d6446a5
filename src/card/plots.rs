//! The card's plots, as PNG files in the release: the confidence distribution per label, a
//! reliability diagram and the flag rates per label.
//!
//! Every pixel is a function of the data: plotters draws into a buffer with DejaVu Sans from the
//! `dejavu` crate (never a system font), and the PNG encoder settings are fixed, so two builds
//! give the same bytes.

use std::path::Path;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Serialize;

use crate::signal::FLAGS;
use crate::vocab::LABELS;

/// Equal-width confidence bins, for the histograms and the reliability diagram.
pub const BINS: usize = 10;

#[derive(Debug, thiserror::Error)]
#[error("plot {path}: {message}")]
pub struct PlotError {
    pub path: String,
    pub message: String,
}

/// What a plot needs from one pair row.
pub struct PlotRow<'a> {
    pub label: &'a str,
    pub confidence: f64,
    pub nih_label: bool,
    pub flags: &'a [&'static str],
    /// The expert verdict, when the build evaluated against a gold file that judged this row.
    pub gold: Option<bool>,
}

/// A written plot, as the card references it.
#[derive(Debug, Clone, Serialize)]
pub struct PlotFile {
    /// Relative to the release root.
    pub path: String,
    pub title: String,
    pub caption: String,
}

pub(super) const FONT: &str = "sans-serif";
const POSITIVE: RGBColor = RGBColor(200, 60, 40);
const NEGATIVE: RGBColor = RGBColor(40, 90, 170);
const GOLD: RGBColor = RGBColor(230, 150, 20);
const FLAG_COLORS: [RGBColor; 3] = [RGBColor(200, 60, 40), RGBColor(40, 90, 170), RGBColor(90, 150, 60)];

pub(super) fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_err() {
            panic!("the embedded DejaVu Sans does not parse");
        }
    });
}

/// Draws every plot for `split` into `dir/plots/`. `gold_name` says what the rows' gold
/// verdicts are ("expert labels", "the synthetic sample's planted truth").
pub fn render(dir: &Path, split: &str, rows: &[PlotRow<'_>], gold_name: &str) -> Result<Vec<PlotFile>, PlotError> {
    register_font();
    std::fs::create_dir_all(dir.join("plots")).map_err(|e| PlotError { path: "plots".into(), message: e.to_string() })?;
    let labels: Vec<&str> = LABELS.iter().copied().filter(|l| rows.iter().any(|r| r.label == *l)).collect();
    let with_gold = rows.iter().filter(|r| r.gold.is_some()).count();
    let plots = [
        (
            PlotFile {
                path: format!("plots/{split}-confidence-by-label.png"),
                title: "Confidence by label".into(),
                caption: format!(
                    "Share of rows per confidence bin ({BINS} bins of width 0.1), per label, for rows NIH asserts (red) and \
                     rows it does not (blue); `{split}` split."
                ),
            },
            (1400, 1000),
            Plot::Confidence(&labels),
        ),
        (
            PlotFile {
                path: format!("plots/{split}-reliability.png"),
                title: "Reliability diagram".into(),
                caption: if with_gold > 0 {
                    format!(
                        "Mean confidence against the observed positive rate per bin, pooled over labels: against NIH's labels \
                         (blue) and against {gold_name} ({with_gold} judgements, orange); the diagonal is perfect calibration."
                    )
                } else if rows.iter().all(|r| r.nih_label) {
                    "Mean confidence against the rate at which NIH asserts the label, per bin, pooled over labels. Every row \
                     here is one NIH asserts (row policy nih_asserted), so that rate is 1 in every bin: the points show where \
                     confidence falls, not calibration. An evaluation against expert labels adds the gold curve."
                        .into()
                } else {
                    "Mean confidence against the rate at which NIH asserts the label, per bin, pooled over labels; the diagonal \
                     is perfect agreement. NIH's labels are noisy, so this is agreement, not accuracy."
                        .into()
                },
            },
            (900, 800),
            Plot::Reliability,
        ),
        (
            PlotFile {
                path: format!("plots/{split}-flag-rates.png"),
                title: "Flag rates by label".into(),
                caption: format!("Share of each label's rows carrying each flag; `{split}` split."),
            },
            (1200, 900),
            Plot::FlagRates(&labels),
        ),
    ];
    let mut written = Vec::new();
    for (file, size, plot) in plots {
        let err = |message: String| PlotError { path: file.path.clone(), message };
        let mut buffer = vec![0u8; size.0 as usize * size.1 as usize * 3];
        {
            let root = BitMapBackend::with_buffer(&mut buffer, size).into_drawing_area();
            root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
            let area = root.titled(&file.title, (FONT, 28)).map_err(|e| err(e.to_string()))?;
            match plot {
                Plot::Confidence(labels) => confidence_panels(&area, labels, rows),
                Plot::Reliability => reliability(&area, rows),
                Plot::FlagRates(labels) => flag_rates(&area, labels, rows),
            }
            .map_err(err)?;
            root.present().map_err(|e| err(e.to_string()))?;
        }
        write_png(&dir.join(&file.path), &buffer, size).map_err(err)?;
        written.push(file);
    }
    Ok(written)
}

enum Plot<'a> {
    Confidence(&'a [&'a str]),
    Reliability,
    FlagRates(&'a [&'a str]),
}

pub(super) type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

fn bin_of(confidence: f64) -> usize {
    ((confidence * BINS as f64) as usize).min(BINS - 1)
}

/// Shares per bin, summing to 1 (all zero when there are no values).
pub(super) fn histogram(values: impl Iterator<Item = f64>) -> [f64; BINS] {
    let mut counts = [0f64; BINS];
    for v in values {
        counts[bin_of(v)] += 1.0;
    }
    let total: f64 = counts.iter().sum();
    if total > 0.0 {
        counts.iter_mut().for_each(|c| *c /= total);
    }
    counts
}

fn confidence_panels(area: &Area<'_>, labels: &[&str], rows: &[PlotRow<'_>]) -> Result<(), String> {
    let columns = 4;
    let panels = area.split_evenly((labels.len().div_ceil(columns).max(1), columns));
    for (panel, label) in panels.iter().zip(labels) {
        let of = |asserted: bool| histogram(rows.iter().filter(|r| r.label == *label && r.nih_label == asserted).map(|r| r.confidence));
        let n = rows.iter().filter(|r| r.label == *label).count();
        paired_histogram(panel, format!("{label} (n={n})"), &of(false), &of(true))?;
    }
    Ok(())
}

/// One panel of two histograms over [0, 1], bar beside bar: `blue` left, `red` right in each bin.
pub(super) fn paired_histogram(panel: &Area<'_>, caption: String, blue: &[f64; BINS], red: &[f64; BINS]) -> Result<(), String> {
    let top = red.iter().chain(blue).fold(0.05f64, |a, &b| a.max(b)) * 1.1;
    let mut chart = ChartBuilder::on(panel)
        .caption(caption, (FONT, 16))
        .margin(8)
        .x_label_area_size(22)
        .y_label_area_size(38)
        .build_cartesian_2d(0f64..1f64, 0f64..top)
        .map_err(|e| e.to_string())?;
    chart.configure_mesh().x_labels(6).y_labels(4).label_style((FONT, 11)).disable_mesh().draw().map_err(|e| e.to_string())?;
    let width = 1.0 / BINS as f64;
    for (shares, color, offset) in [(blue, NEGATIVE, 0.0), (red, POSITIVE, 0.5)] {
        chart
            .draw_series(shares.iter().enumerate().map(|(i, &s)| {
                let x0 = i as f64 * width + offset * width;
                Rectangle::new([(x0, 0.0), (x0 + width / 2.0, s)], color.filled())
            }))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// (mean confidence, positive rate) per non-empty bin.
fn reliability_points(pairs: impl Iterator<Item = (f64, bool)>) -> Vec<(f64, f64)> {
    let mut sums = [(0f64, 0f64, 0usize); BINS];
    for (c, t) in pairs {
        let s = &mut sums[bin_of(c)];
        s.0 += c;
        s.1 += f64::from(u8::from(t));
        s.2 += 1;
    }
    sums.iter().filter(|s| s.2 > 0).map(|s| (s.0 / s.2 as f64, s.1 / s.2 as f64)).collect()
}

fn reliability(area: &Area<'_>, rows: &[PlotRow<'_>]) -> Result<(), String> {
    let mut chart = ChartBuilder::on(area)
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..1f64, 0f64..1f64)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("mean confidence in bin")
        .y_desc("observed positive rate")
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 14))
        .draw()
        .map_err(|e| e.to_string())?;
    chart.draw_series(LineSeries::new([(0.0, 0.0), (1.0, 1.0)], BLACK.mix(0.4))).map_err(|e| e.to_string())?;
    let series = [
        ("NIH labels", NEGATIVE, reliability_points(rows.iter().map(|r| (r.confidence, r.nih_label)))),
        ("gold", GOLD, reliability_points(rows.iter().filter_map(|r| r.gold.map(|g| (r.confidence, g))))),
    ];
    for (name, color, points) in series {
        if points.is_empty() {
            continue;
        }
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(3)))
            .map_err(|e| e.to_string())?
            .label(name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(3)));
        chart.draw_series(points.into_iter().map(|p| Circle::new(p, 5, color.filled()))).map_err(|e| e.to_string())?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)
}

fn flag_rates(area: &Area<'_>, labels: &[&str], rows: &[PlotRow<'_>]) -> Result<(), String> {
    let rate = |label: &str, flag: &str| {
        let of_label: Vec<&PlotRow<'_>> = rows.iter().filter(|r| r.label == label).collect();
        let flagged = of_label.iter().filter(|r| r.flags.contains(&flag)).count();
        if of_label.is_empty() {
            0.0
        } else {
            flagged as f64 / of_label.len() as f64
        }
    };
    let rates: Vec<Vec<f64>> = labels.iter().map(|l| FLAGS.iter().map(|f| rate(l, f)).collect()).collect();
    let top = rates.iter().flatten().fold(0.05f64, |a, &b| a.max(b)) * 1.15;
    let n = labels.len().max(1);
    let mut chart = ChartBuilder::on(area)
        .margin(20)
        .x_label_area_size(40)
        .y_label_area_size(170)
        .build_cartesian_2d(0f64..top.min(1.0), 0f64..n as f64)
        .map_err(|e| e.to_string())?;
    let names: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n * 2 + 1)
        .y_label_formatter(&|y| {
            // Label names sit at the middle of each row band.
            let i = (n as f64 - y - 0.5).round();
            if (y.fract() - 0.5).abs() < 1e-9 && i >= 0.0 && (i as usize) < names.len() {
                names[i as usize].clone()
            } else {
                String::new()
            }
        })
        .x_desc("share of the label's rows")
        .axis_desc_style((FONT, 16))
        .label_style((FONT, 14))
        .draw()
        .map_err(|e| e.to_string())?;
    let band = 0.8 / FLAGS.len() as f64;
    for (f, flag) in FLAGS.iter().enumerate() {
        let color = FLAG_COLORS[f % FLAG_COLORS.len()];
        chart
            .draw_series(rates.iter().enumerate().map(|(i, r)| {
                let y0 = (n - 1 - i) as f64 + 0.1 + f as f64 * band;
                Rectangle::new([(0.0, y0), (r[f], y0 + band)], color.filled())
            }))
            .map_err(|e| e.to_string())?
            .label(*flag)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
    }
    legend(&mut chart, SeriesLabelPosition::LowerRight)
}

type Chart<'a, 'b> =
    ChartContext<'a, BitMapBackend<'b>, Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>>;

fn legend<'a>(chart: &mut Chart<'a, 'a>, position: SeriesLabelPosition) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(position)
        .label_font((FONT, 16))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(|e| e.to_string())
}

/// PNG with fixed settings: RGB8, best compression, adaptive filtering.
pub(super) fn write_png(path: &Path, rgb: &[u8], (w, h): (u32, u32)) -> Result<(), String> {
    use image::codecs::png::{CompressionType, FilterType, PngEncoder};
    use image::ImageEncoder;
    let mut bytes = Vec::new();
    PngEncoder::new_with_quality(&mut bytes, CompressionType::Best, FilterType::Adaptive)
        .write_image(rgb, w, h, image::ExtendedColorType::Rgb8)
        .map_err(|e| e.to_string())?;
    std::fs::write(path, bytes).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_cover_the_unit_interval() {
        assert_eq!(bin_of(0.0), 0);
        assert_eq!(bin_of(0.099), 0);
        assert_eq!(bin_of(0.1), 1);
        assert_eq!(bin_of(1.0), BINS - 1);
        let h = histogram([0.05, 0.05, 0.95, 1.0].into_iter());
        assert_eq!((h[0], h[9]), (0.5, 0.5));
    }

    #[test]
    fn reliability_points_are_bin_means() {
        let points = reliability_points([(0.1, false), (0.15, true), (0.9, true)].into_iter());
        assert_eq!(points.len(), 2);
        assert!((points[0].0 - 0.125).abs() < 1e-12 && points[0].1 == 0.5);
        assert_eq!(points[1], (0.9, 1.0));
    }
}
