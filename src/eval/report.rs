//! The Markdown section an evaluation adds to a card.

use super::{ArmYield, EvalReport, ReviewLift};

fn num(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.3}"))
}

fn ci(v: Option<(f64, f64)>) -> String {
    v.map_or(String::new(), |(lo, hi)| format!(" [{lo:.3}, {hi:.3}]"))
}

pub fn to_markdown(r: &EvalReport) -> String {
    let mut md = String::new();
    md.push_str(&format!(
        "## Evaluation against {}\n\nGold file `{}`: {} judgements, {} matched to rows of the `{}` split of release {}; \
         the gold judges {} of the split's {} images. \
         Intervals are 95% percentile bootstraps ({} resamples, seed {}); ECE uses {} equal-width bins.\n\n",
        r.against,
        r.gold_file,
        r.gold_judgements,
        r.matched,
        r.split,
        r.release_id,
        r.coverage.gold_images_in_release,
        r.coverage.release_images,
        r.options.bootstrap_resamples,
        r.options.seed,
        r.options.ece_bins
    ));
    md.push_str(&label_mapping(r));
    md.push_str("| label | n | prevalence | AUROC [95% CI] | AUPRC [95% CI] | Brier | ECE |\n|---|---:|---:|---|---|---:|---:|\n");
    for (label, m) in &r.per_label {
        md.push_str(&format!(
            "| {label} | {} | {:.3} | {}{} | {}{} | {} | {} |\n",
            m.n,
            m.prevalence,
            num(m.auroc),
            ci(m.auroc_ci95),
            num(m.auprc),
            ci(m.auprc_ci95),
            num(m.brier),
            num(m.ece)
        ));
    }
    let d = &r.mislabel_detection;
    md.push_str(&format!(
        "\n**Mislabel detection** (NIH label contradicted by the gold, ranked by 1 - agreement): {} of {} rows mislabeled, \
         AP {}{}.\n\n| K | precision@K | Lift@K |\n|---:|---:|---:|\n",
        d.mislabeled,
        d.n,
        num(d.ap),
        ci(d.ap_ci95)
    ));
    for (k, p, l) in &d.at_k {
        md.push_str(&format!("| {k} | {} | {} |\n", num(*p), num(*l)));
    }
    md.push_str("\nThe flagging trust classes read as a verdict \"mislabeled\":\n\n| trust class | rows | precision | recall |\n|---|---:|---:|---:|\n");
    for c in &d.by_class {
        md.push_str(&format!("| `{}` | {} | {} | {} |\n", c.classes, c.flagged, num(c.precision), num(c.recall)));
    }
    if let Some(f) = &r.families {
        md.push_str(&families_table(f));
        md.push_str(&family_details(f, r.joint_rule.as_ref()));
    }
    if let Some(v) = &r.views {
        md.push_str(&views_table(v));
    }
    md.push_str(&format!(
        "\n**Calibration** of `confidence` against the gold, pooled over labels: ECE {}, Brier {}",
        num(r.calibration.ece),
        num(r.calibration.brier)
    ));
    match &r.calibration.after_calibration {
        Some(a) => md.push_str(&format!(
            "; after {:?} scaling fitted on {}: ECE {:.3}, Brier {:.3} (in-sample if fitted on this gold).\n\n",
            a.method, a.fitted_on, a.ece, a.brier
        )),
        None => md.push_str(" (no calibration applied).\n\n"),
    }
    md.push_str("| stratum | n | AUROC | mislabel AP |\n|---|---:|---:|---:|\n");
    for (name, s) in &r.strata {
        md.push_str(&format!("| {name} | {} | {} | {} |\n", s.n, num(s.auroc), num(s.mislabel.ap)));
    }
    if let Some(review) = &r.review {
        md.push_str(&review_section(review));
    }
    md
}

/// What the expert review found in the rows the signal chose, against random rows.
fn review_section(r: &ReviewLift) -> String {
    let per_100 = |a: &ArmYield| {
        let ci = a.errors_per_100_ci95.map_or(String::new(), |(lo, hi)| format!(" [{lo:.1}, {hi:.1}]"));
        a.errors_per_100.map_or("n/a".into(), |v| format!("{v:.1}{ci}"))
    };
    let times = |v: Option<f64>, ci: Option<(f64, Option<f64>)>| {
        let ci = ci.map_or(String::new(), |(lo, hi)| format!(" [{lo:.1}, {}]", hi.map_or("unbounded".into(), |hi| format!("{hi:.1}"))));
        v.map_or("not measured (no error among the rows compared against)".into(), |v| format!("{v:.1}x{ci}"))
    };
    let mut md = format!(
        "\n**Expert review** of the rows in review plan `{}`: label errors found per 100 reviews, in the rows the \
         signal chose and in the rows drawn at random as the plan's control.\n\n\
         | rows | planned | reviewed | label errors | per 100 reviews [95% CI] |\n|---|---:|---:|---:|---|\n",
        r.plan_file
    );
    let mut line =
        |name: &str, a: &ArmYield| md.push_str(&format!("| {name} | {} | {} | {} | {} |\n", a.planned, a.reviewed, a.errors, per_100(a)));
    line("chosen by the signal", &r.targeted);
    line("random control", &r.control);
    if let Some(split) = &r.split {
        line("every judged row of the split", split);
    }
    md.push_str(&format!("\nRelabel efficiency (chosen against random): {} against the control", times(r.lift, r.lift_ci95)));
    if r.split.is_some() {
        md.push_str(&format!(", {} against every judged row of the split", times(r.lift_over_split, r.lift_over_split_ci95)));
    }
    md.push_str(". Each arm is resampled on its own for the intervals.\n");
    md
}

/// How the gold's vocabulary maps onto NIH's, and what it could not map; said only when the gold
/// uses a vocabulary of its own.
fn label_mapping(r: &EvalReport) -> String {
    let g = &r.gold;
    let mut md = format!("Gold format: {} ({}).", g.format.name(), g.variant);
    if g.uncertain > 0 {
        md.push_str(&format!(" {} cells had no verdict (HEDGE or a tied reader vote) and are left out.", g.uncertain));
    }
    if let Some(r) = &g.repeated {
        md.push_str(&format!(
            " {} times a reader judged an image again; {}. Their repeats disagreed on {} label cells.",
            r.repeated_pairs, r.policy, r.conflicting_cells
        ));
    }
    md.push_str("\n\n");
    if g.mapping.iter().all(|m| !m.is_composite() && !m.negated && m.nih[0] == m.gold) && g.unmapped.is_empty() {
        return md;
    }
    md.push_str("| gold label | scored as | note |\n|---|---|---|\n");
    for m in &g.mapping {
        let scored = match (m.is_composite(), m.negated) {
            (true, _) => format!("any of {}", m.nih.join(", ")),
            (false, true) => format!("not {}", m.nih[0]),
            (false, false) => m.nih[0].clone(),
        };
        md.push_str(&format!("| {} | {scored} | {} |\n", m.gold, m.note.as_deref().unwrap_or("")));
    }
    for u in &g.unmapped {
        md.push_str(&format!("| {} | not evaluated ({} judgements) | {} |\n", u.column, u.judgements, u.reason));
    }
    md.push_str(
        "\nA composite label is scored on a derived row per image: NIH asserts it when it asserts any member label, \
and its confidence is the highest member confidence. Images without a row for every member are left out.\n\n",
    );
    md
}

/// A two-family release: each family alone and the joint signal, on the same judgements and at
/// the same review budgets.
fn families_table(f: &super::FamilyComparison) -> String {
    let mut md = String::from(
        "\n**Each family alone and both together**, on the same gold judgements: AUROC of `confidence`, mislabel AP, the \
         `likely_mislabeled` class as a verdict, and the lift of reviewing the 10% of rows each view doubts most.\n\n\
         | view | AUROC | mislabel AP | `likely_mislabeled` rows | precision | recall | Lift@10% |\n|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for (name, m) in [("primary model", &f.primary), ("second opinion", &f.second), ("both (the release)", &f.joint)] {
        let d = &m.mislabel;
        let likely = d.by_class.iter().find(|c| c.classes == "likely_mislabeled");
        let tenth = d.n.div_ceil(10);
        let lift = d.at_k.iter().find(|(k, _, _)| *k == tenth).and_then(|(_, _, l)| *l);
        md.push_str(&format!(
            "| {name} | {} | {} | {} | {} | {} | {} |\n",
            num(m.auroc),
            num(d.ap),
            likely.map_or(0, |c| c.flagged),
            num(likely.and_then(|c| c.precision)),
            num(likely.and_then(|c| c.recall)),
            num(lift)
        ));
    }
    md
}

/// What a two-family evaluation adds beyond the headline table: how a fitted joint rule was kept
/// from judging its own reads, each family per label, and the label errors where the families
/// disagree.
fn family_details(f: &super::FamilyComparison, joint_rule: Option<&super::JointRuleEval>) -> String {
    let mut md = String::new();
    if let Some(j) = joint_rule {
        md.push_str(&format!(
            "
The release combines its families by a joint rule fitted on expert labels ({}). The {} judged rows of images \
             the rule was fitted on are judged by their out-of-fold confidence ({} folds by image: the rule refitted \
             without the row's fold), never by a rule that saw their own read; the other {} rows are held out from the fit.\n",
            j.fitted_on, j.cross_fitted_rows, j.folds, j.held_out_rows
        ));
    }
    if let Some(per_label) = &f.per_label_auroc {
        md.push_str("\n| label | AUROC, primary model | AUROC, second opinion | AUROC, both (the release) |\n|---|---:|---:|---:|\n");
        for (label, [a, b, joint]) in per_label {
            md.push_str(&format!("| {label} | {} | {} | {} |\n", num(*a), num(*b), num(*joint)));
        }
    }
    if let Some(d) = &f.disagreement {
        let rate = |wrong: usize, n: usize| if n == 0 { "n/a".to_string() } else { format!("{:.1}%", wrong as f64 * 100.0 / n as f64) };
        md.push_str(&format!(
            "\n**Where the families disagree** (`families_disagree`): {} of {} judged rows ({}) are mislabeled, against {} of \
             {} ({}) where they agree; a rate ratio of {}.\n",
            d.disagree_mislabeled,
            d.disagree_rows,
            rate(d.disagree_mislabeled, d.disagree_rows),
            d.agree_mislabeled,
            d.agree_rows,
            rate(d.agree_mislabeled, d.agree_rows),
            d.rate_ratio.map_or("n/a".into(), |r| format!("{r:.2}"))
        ));
    }
    md
}

/// A release with confident learning: each view alone, both as the release classes them, and
/// both stacked by a rule cross-fitted on the gold.
fn views_table(v: &super::ViewComparison) -> String {
    let mut md = format!(
        "\n**The model's answers and confident learning**, on the {} judged rows of findings with a probe: AUROC of each \
         view's probability, mislabel AP, each view's verdict \"mislabeled\" and the lift of reviewing the 10% of rows it \
         doubts most. The answers' verdict is `likely_mislabeled` by the thresholds alone; confident learning's is \
         `cl_label_issue`; the release's is its `trust_class` (both views must doubt), ranked by the mean of the two \
         probabilities; the stacked rule is fitted on these judgements, each row's confidence from the rule fitted \
         without its fold ({} folds by image).\n\n\
         | view | AUROC | mislabel AP | verdict | rows | precision | recall | Lift@10% |\n|---|---:|---:|---|---:|---:|---:|---:|\n",
        v.answers.mislabel.n, v.folds
    );
    let rows = [
        ("the model's answers", &v.answers, "likely_mislabeled"),
        ("confident learning", &v.confident_learning, super::views::LABEL_ISSUE),
        ("both (the release)", &v.both, "likely_mislabeled"),
        ("both, stacked on the gold", &v.stacked, "likely_mislabeled"),
    ];
    for (name, m, verdict) in rows {
        let d = &m.mislabel;
        let found = d.by_class.iter().find(|c| c.classes == verdict);
        let tenth = d.n.div_ceil(10);
        let lift = d.at_k.iter().find(|(k, _, _)| *k == tenth).and_then(|(_, _, l)| *l);
        md.push_str(&format!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} |\n",
            num(m.auroc),
            num(d.ap),
            found.map_or("n/a".to_string(), |c| format!("`{}`", c.classes)),
            found.map_or("n/a".to_string(), |c| c.flagged.to_string()),
            num(found.and_then(|c| c.precision)),
            num(found.and_then(|c| c.recall)),
            num(lift)
        ));
    }
    md.push_str("\nMislabel AP per finding:\n\n| finding | rows | mislabeled | answers | confident learning | mean | stacked |\n|---|---:|---:|---:|---:|---:|---:|\n");
    for (label, l) in &v.per_label {
        let [a, b, c, d] = l.ap;
        md.push_str(&format!("| {label} | {} | {} | {} | {} | {} | {} |\n", l.n, l.mislabeled, num(a), num(b), num(c), num(d)));
    }
    md
}
