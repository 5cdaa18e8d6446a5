//! What the card's S3 (Reason) and S4 (Report) sections show: how much of the generated text
//! parses, how it agrees with the scores and with NIH, the consistency traces' distributions, and
//! a few example rows.

use serde::Serialize;

use crate::paraphrase::ImageReport;
use crate::reason::Reasoning;
use crate::release_spec::narrative::Conditioning;
use crate::select::Selection;
use crate::signal::text_trace::TextTrace;
use crate::signal::Signal;
use crate::vocab::LABELS;

/// Examples each section shows.
const EXAMPLES: usize = 3;

#[derive(Debug, Clone, Serialize)]
pub struct NarrativeCard {
    pub reasoning: Option<ReasoningCard>,
    pub report: Option<ReportCard>,
}

/// A consistency trace's distribution over a split's images.
#[derive(Debug, Clone, Serialize)]
pub struct TraceSummary {
    pub images: usize,
    pub mean_score: f64,
    /// Images with no tuple.
    pub clean_images: usize,
    /// Tuples per category: false finding, omission, location.
    pub false_findings: u32,
    pub omissions: u32,
    pub locations: u32,
    /// Tuples per anatomy region (chest2err's nine), by name.
    pub per_anatomy: Vec<(String, u32)>,
}

impl TraceSummary {
    fn of<'a>(traces: impl Iterator<Item = &'a TextTrace>) -> TraceSummary {
        let (mut images, mut sum, mut clean, mut cat, mut anat) = (0, 0.0, 0, [0u32; 5], [0u32; 9]);
        for t in traces {
            images += 1;
            sum += t.score;
            clean += usize::from(t.k_total == 0);
            cat.iter_mut().zip(t.per_category).for_each(|(a, b)| *a += b);
            anat.iter_mut().zip(t.per_anatomy).for_each(|(a, b)| *a += b);
        }
        let names = crate::signal::trace::ANATOMY;
        TraceSummary {
            images,
            mean_score: if images == 0 { 1.0 } else { sum / images as f64 },
            clean_images: clean,
            false_findings: cat[0],
            omissions: cat[1],
            locations: cat[2],
            per_anatomy: names.iter().zip(anat).filter(|(_, n)| *n > 0).map(|(name, n)| (name.to_string(), n)).collect(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ReasoningExample {
    pub image_index: String,
    pub label: String,
    pub nih_label: bool,
    pub confidence: f64,
    pub reasoning: String,
    pub answer: Option<String>,
    pub agrees: Option<bool>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReasoningCard {
    pub split: String,
    pub rows: usize,
    pub parsed: usize,
    pub parse_rate: f64,
    /// Rows whose answer says yes or no of the label.
    pub readable: usize,
    pub agrees: usize,
    pub disagrees: usize,
    pub truncated: usize,
    pub mean_tokens: f64,
    pub trace: TraceSummary,
    pub examples: Vec<ReasoningExample>,
}

fn shorten(text: &str, chars: usize) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= chars {
        one_line
    } else {
        format!("{}…", one_line.chars().take(chars).collect::<String>())
    }
}

impl ReasoningCard {
    pub fn summarise(
        selection: &Selection,
        signal: &Signal,
        r: &Reasoning,
        split: &str,
        rows: &[usize],
        images: &[usize],
    ) -> ReasoningCard {
        let of = |f: &dyn Fn(&crate::reason::RowReasoning) -> bool| rows.iter().filter(|&&i| f(&r.rows[i])).count();
        let parsed = of(&|x| x.parsed);
        // Examples: the first rows, in split order, where the reasoning agrees and where it does not.
        let mut examples: Vec<usize> = rows.iter().copied().filter(|&i| r.rows[i].agrees == Some(false)).take(1).collect();
        examples.extend(rows.iter().copied().filter(|&i| r.rows[i].agrees == Some(true)).take(EXAMPLES - examples.len()));
        if examples.is_empty() {
            examples.extend(rows.iter().copied().take(EXAMPLES));
        }
        ReasoningCard {
            split: split.to_string(),
            rows: rows.len(),
            parsed,
            parse_rate: if rows.is_empty() { 0.0 } else { parsed as f64 / rows.len() as f64 },
            readable: of(&|x| x.says.is_some()),
            agrees: of(&|x| x.agrees == Some(true)),
            disagrees: of(&|x| x.disagrees()),
            truncated: of(&|x| x.truncated),
            mean_tokens: if rows.is_empty() {
                0.0
            } else {
                rows.iter().map(|&i| r.rows[i].new_tokens).sum::<usize>() as f64 / rows.len() as f64
            },
            trace: TraceSummary::of(images.iter().map(|&i| &r.traces[i])),
            examples: examples
                .into_iter()
                .map(|i| {
                    let row = &selection.rows[i];
                    ReasoningExample {
                        image_index: selection.images[row.image].image_index.clone(),
                        label: LABELS[row.label].to_string(),
                        nih_label: row.nih_label,
                        confidence: signal.pairs[i].confidence,
                        reasoning: shorten(&r.rows[i].text, 300),
                        answer: r.rows[i].answer.as_deref().map(|a| shorten(a, 120)),
                        agrees: r.rows[i].agrees,
                    }
                })
                .collect(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ReportExample {
    pub image_index: String,
    pub nih_findings: Vec<&'static str>,
    pub model_findings: Vec<&'static str>,
    pub text: String,
    pub report_findings: Vec<&'static str>,
    pub nih_score: f64,
    pub model_score: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReportCard {
    pub split: String,
    pub images: usize,
    pub conditioning: Option<Conditioning>,
    pub mean_sentences: f64,
    pub mean_tokens: f64,
    pub truncated: usize,
    /// Images whose report asserts at least one finding.
    pub with_findings: usize,
    pub against_nih: TraceSummary,
    pub against_model: TraceSummary,
    pub examples: Vec<ReportExample>,
}

impl ReportCard {
    pub fn summarise(
        selection: &Selection,
        signal: &Signal,
        reports: &[ImageReport],
        conditioning: Option<Conditioning>,
        split: &str,
        images: &[usize],
    ) -> ReportCard {
        let n = images.len().max(1) as f64;
        ReportCard {
            split: split.to_string(),
            images: images.len(),
            conditioning,
            mean_sentences: images.iter().map(|&i| reports[i].sentences).sum::<usize>() as f64 / n,
            mean_tokens: images.iter().map(|&i| reports[i].new_tokens).sum::<usize>() as f64 / n,
            truncated: images.iter().filter(|&&i| reports[i].truncated).count(),
            with_findings: images.iter().filter(|&&i| !reports[i].present.is_empty()).count(),
            against_nih: TraceSummary::of(images.iter().map(|&i| &reports[i].against_nih)),
            against_model: TraceSummary::of(images.iter().map(|&i| &reports[i].against_model)),
            examples: images
                .iter()
                .take(EXAMPLES)
                .map(|&i| ReportExample {
                    image_index: selection.images[i].image_index.clone(),
                    nih_findings: signal.traces[i].nih_findings.clone(),
                    model_findings: signal.traces[i].model_findings.clone(),
                    text: shorten(&reports[i].text, 400),
                    report_findings: reports[i].present.clone(),
                    nih_score: reports[i].against_nih.score,
                    model_score: reports[i].against_model.score,
                })
                .collect(),
        }
    }
}
