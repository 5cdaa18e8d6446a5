//! The Markdown form of a diff.

use super::{Agreement, DiffReport};
use crate::signal::TrustClass;

fn num(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.3}"))
}

fn row(name: &str, a: &Agreement) -> String {
    format!(
        "| {name} | {} | {} | {} | {} | {} | {} |\n",
        a.n,
        a.n - a.same_class,
        num(a.agreement),
        num(a.kappa),
        num(a.confidence_pearson),
        num(a.mean_abs_confidence_change)
    )
}

pub fn to_markdown(d: &DiffReport) -> String {
    let mut md = format!(
        "## Diff: {} {} (A) against {} {} (B)\n\nA: `{}` ({} split, {} rows). B: `{}` ({} split, {} rows). \
         {} rows joined on (image, label); {} only in A, {} only in B.\n\n",
        d.a.release_id,
        d.a.version,
        d.b.release_id,
        d.b.version,
        d.a.dir,
        d.a.split,
        d.a.rows,
        d.b.dir,
        d.b.split,
        d.b.rows,
        d.overall.n,
        d.only_in_a,
        d.only_in_b
    );
    md.push_str("| label | rows | changed class | class agreement | Cohen's kappa | confidence r | mean abs confidence change |\n");
    md.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
    md.push_str(&row("**all**", &d.overall));
    for (label, a) in &d.per_label {
        md.push_str(&row(label, a));
    }
    for (side, f) in [("A", &d.families_a), ("B", &d.families_b)] {
        if let Some(f) = f {
            md.push_str(&format!(
                "\n{side} is a two-family release; its primary model against its second opinion: {} of {} rows in another class \
                 (class agreement {}, Cohen's kappa {}, confidence r {}, mean abs confidence difference {}).\n",
                f.n - f.same_class,
                f.n,
                num(f.agreement),
                num(f.kappa),
                num(f.confidence_pearson),
                num(f.mean_abs_confidence_change)
            ));
        }
    }
    let small = |v: Option<f64>| v.map_or("n/a".into(), |v| format!("{v:.2e}"));
    let second = d.overall.second_max_abs_logit_change.map_or(String::new(), |v| format!(" ({v:.2e} in one of the second model's)"));
    md.push_str(&format!(
        "\nLargest change of one question: {} in p_yes, {} in a raw logit{second}.\n",
        small(d.overall.max_abs_p_yes_change),
        small(d.overall.max_abs_logit_change)
    ));
    md.push_str("\n**Class transitions** (rows; A down, B across):\n\n| A \\ B |");
    let names: Vec<&str> = TrustClass::ALL.iter().map(|c| c.name()).collect();
    for n in &names {
        md.push_str(&format!(" {n} |"));
    }
    md.push_str(&format!("\n|---|{}\n", "---:|".repeat(names.len())));
    for a in &names {
        md.push_str(&format!("| {a} |"));
        for b in &names {
            let count = d.transitions.get(*a).and_then(|m| m.get(*b)).copied().unwrap_or(0);
            md.push_str(&format!(" {count} |"));
        }
        md.push('\n');
    }
    if d.top_changed.is_empty() {
        md.push_str("\nNo row changed trust class.\n");
    } else {
        md.push_str(&format!(
            "\n**Rows that changed class**: {} in all; the {} with the largest confidence change:\n\n\
             | image | label | A | B | confidence A | confidence B |\n|---|---|---|---|---:|---:|\n",
            d.changed_rows,
            d.top_changed.len()
        ));
        for c in &d.top_changed {
            md.push_str(&format!(
                "| {} | {} | {} | {} | {:.4} | {:.4} |\n",
                c.image_index, c.label, c.class_a, c.class_b, c.confidence_a, c.confidence_b
            ));
        }
    }
    md
}
