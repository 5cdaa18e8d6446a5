//! What an expert review found, per arm of its plan: label errors per 100 reviews in the rows the
//! signal chose against the seeded random control rows, and the ratio of the two (the relabel
//! efficiency, as active label cleaning measures it). [`crate::review`] makes the plans; this
//! module only needs which rows each arm holds.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::metrics::{bootstrap_interval, Resampler};
use super::{EvalOptions, GoldLabels, ReleaseRow};

/// Why a row is in a review plan: chosen by the signal, or drawn at random as the control.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReviewArm {
    Targeted,
    Control,
}

/// One (image, label) row of a review plan.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedReview {
    pub image_index: String,
    pub label: String,
    pub arm: ReviewArm,
}

/// The rows of one arm and the label errors the gold found among them.
#[derive(Debug, Clone, Serialize)]
pub struct ArmYield {
    /// Rows the plan put in this arm (or, for the split baseline, rows of the split).
    pub planned: usize,
    /// Of those, rows the gold judges.
    pub reviewed: usize,
    /// Reviewed rows whose NIH label the gold contradicts.
    pub errors: usize,
    pub errors_per_100: Option<f64>,
    pub errors_per_100_ci95: Option<(f64, f64)>,
}

/// The review's yield: the targeted arm against the control arm, and against every judged row
/// of the split when the gold judges rows outside the plan too.
#[derive(Debug, Clone, Serialize)]
pub struct ReviewLift {
    pub plan_file: String,
    pub targeted: ArmYield,
    pub control: ArmYield,
    /// Targeted errors per review over control errors per review; None when the control found
    /// no error (the ratio is unbounded, not measured).
    pub lift: Option<f64>,
    /// The upper bound is None when unbounded: in more than 2.5% of resamples the rows compared
    /// against held no error.
    pub lift_ci95: Option<(f64, Option<f64>)>,
    /// Every row of the split the gold judges: random review's expected yield, known exactly
    /// when the gold covers the whole split (as the embedded sample's truth does).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split: Option<ArmYield>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lift_over_split: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lift_over_split_ci95: Option<(f64, Option<f64>)>,
}

/// The yield of `plan` on `rows` (the split the plan was made from) as `gold` judges them.
pub fn review_lift(rows: &[ReleaseRow], gold: &GoldLabels, plan: &[PlannedReview], plan_file: &str, o: &EvalOptions) -> ReviewLift {
    let nih: BTreeMap<(&str, &str), bool> = rows.iter().map(|r| ((r.image_index.as_str(), r.label.as_str()), r.nih_label)).collect();
    // Each judged row as "the NIH label was wrong", per arm.
    let verdict = |image: &str, label: &str| -> Option<bool> {
        let nih_label = nih.get(&(image, label))?;
        gold.get(&(image.to_string(), label.to_string())).map(|g| g != nih_label)
    };
    let arm = |which: ReviewArm| -> (usize, Vec<bool>) {
        let planned: Vec<&PlannedReview> = plan.iter().filter(|p| p.arm == which).collect();
        (planned.len(), planned.iter().filter_map(|p| verdict(&p.image_index, &p.label)).collect())
    };
    let (targeted_n, targeted) = arm(ReviewArm::Targeted);
    let (control_n, control) = arm(ReviewArm::Control);
    let split: Vec<bool> = rows.iter().filter_map(|r| verdict(&r.image_index, &r.label)).collect();
    let (lift, lift_ci95) = (ratio(&targeted, &control), ratio_ci95(&targeted, &control, o));
    // The split baseline says something the control does not only when the gold judged more
    // than the plan's rows.
    let beyond_plan = split.len() > targeted.len() + control.len();
    ReviewLift {
        plan_file: plan_file.to_string(),
        targeted: arm_yield(targeted_n, &targeted, o),
        control: arm_yield(control_n, &control, o),
        lift,
        lift_ci95,
        split: beyond_plan.then(|| arm_yield(rows.len(), &split, o)),
        lift_over_split: if beyond_plan { ratio(&targeted, &split) } else { None },
        lift_over_split_ci95: if beyond_plan { ratio_ci95(&targeted, &split, o) } else { None },
    }
}

fn rate(errors: &[bool]) -> Option<f64> {
    (!errors.is_empty()).then(|| errors.iter().filter(|e| **e).count() as f64 / errors.len() as f64)
}

fn ratio(num: &[bool], den: &[bool]) -> Option<f64> {
    match (rate(num), rate(den)) {
        (Some(n), Some(d)) if d > 0.0 => Some(n / d),
        _ => None,
    }
}

fn arm_yield(planned: usize, errors: &[bool], o: &EvalOptions) -> ArmYield {
    let per_100 = |e: &[bool]| rate(e).map(|r| 100.0 * r);
    ArmYield {
        planned,
        reviewed: errors.len(),
        errors: errors.iter().filter(|e| **e).count(),
        errors_per_100: per_100(errors),
        errors_per_100_ci95: bootstrap(o, |rng| per_100(&resample(errors, rng))),
    }
}

/// The ratio's 95% interval, each arm resampled on its own (a stratified bootstrap). A resample
/// whose denominator found no error has an unbounded ratio; it counts as one, not dropped (that
/// would bias the interval low).
fn ratio_ci95(num: &[bool], den: &[bool], o: &EvalOptions) -> Option<(f64, Option<f64>)> {
    let (lo, hi) = bootstrap(o, |rng| {
        let (n, d) = (rate(&resample(num, rng))?, rate(&resample(den, rng))?);
        Some(if d > 0.0 { n / d } else { f64::INFINITY })
    })?;
    lo.is_finite().then_some((lo, hi.is_finite().then_some(hi)))
}

fn resample(values: &[bool], rng: &mut Resampler) -> Vec<bool> {
    if values.is_empty() {
        return Vec::new();
    }
    (0..values.len()).map(|_| values[rng.below(values.len())]).collect()
}

fn bootstrap(o: &EvalOptions, statistic: impl FnMut(&mut Resampler) -> Option<f64>) -> Option<(f64, f64)> {
    bootstrap_interval(o.bootstrap_resamples, o.seed, statistic)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(image: &str, nih_label: bool) -> ReleaseRow {
        ReleaseRow {
            image_index: image.into(),
            label: "Mass".into(),
            nih_label,
            confidence: 0.5,
            agreement: 0.5,
            view_position: "PA".into(),
            devices_present: false,
            trust_class: "review".into(),
            flags: Vec::new(),
            logit_yes: Vec::new(),
            logit_no: Vec::new(),
            families: None,
            confident: None,
        }
    }

    fn planned(image: &str, arm: ReviewArm) -> PlannedReview {
        PlannedReview { image_index: image.into(), label: "Mass".into(), arm }
    }

    #[test]
    fn counts_errors_per_arm_and_their_ratio() {
        // 4 targeted rows, 3 of them wrong; 4 control rows, 1 wrong; 2 rows outside the plan, both right.
        let rows: Vec<ReleaseRow> = (0..10).map(|i| row(&format!("{i}.png"), true)).collect();
        let mut gold = GoldLabels::new();
        for (i, wrong) in [true, true, true, false, true, false, false, false, false, false].iter().enumerate() {
            gold.insert((format!("{i}.png"), "Mass".into()), !wrong);
        }
        let plan: Vec<PlannedReview> =
            (0..8).map(|i| planned(&format!("{i}.png"), if i < 4 { ReviewArm::Targeted } else { ReviewArm::Control })).collect();
        let lift = review_lift(&rows, &gold, &plan, "plan.json", &EvalOptions::default());
        assert_eq!((lift.targeted.reviewed, lift.targeted.errors), (4, 3));
        assert_eq!((lift.control.reviewed, lift.control.errors), (4, 1));
        assert_eq!(lift.targeted.errors_per_100, Some(75.0));
        assert_eq!(lift.lift, Some(3.0));
        let split = lift.split.expect("the gold judges rows outside the plan");
        assert_eq!((split.reviewed, split.errors), (10, 4));
        assert!((lift.lift_over_split.unwrap() - 0.75 / 0.4).abs() < 1e-12);
        let (lo, hi) = lift.targeted.errors_per_100_ci95.unwrap();
        assert!(lo <= 75.0 && 75.0 <= hi && lo < hi);
        // One error in four control rows: a fair share of resamples hold none, so the upper bound is unbounded.
        assert_eq!(lift.lift_ci95.map(|(_, hi)| hi), Some(None));
    }

    #[test]
    fn a_control_without_errors_leaves_the_lift_unmeasured() {
        let rows = vec![row("a.png", true), row("b.png", true)];
        let gold: GoldLabels = [(("a.png".into(), "Mass".into()), false), (("b.png".into(), "Mass".into()), true)].into();
        let plan = vec![planned("a.png", ReviewArm::Targeted), planned("b.png", ReviewArm::Control)];
        let lift = review_lift(&rows, &gold, &plan, "plan.json", &EvalOptions::default());
        assert_eq!(lift.lift, None);
        assert_eq!(lift.lift_ci95, None, "every resample of the control is error-free");
        assert!(lift.split.is_none(), "the gold judges nothing outside the plan");
    }

    #[test]
    fn rows_the_gold_does_not_judge_are_planned_but_not_reviewed() {
        let rows = vec![row("a.png", true), row("b.png", true)];
        let gold: GoldLabels = [(("a.png".into(), "Mass".into()), false)].into();
        let plan = vec![planned("a.png", ReviewArm::Targeted), planned("b.png", ReviewArm::Targeted)];
        let lift = review_lift(&rows, &gold, &plan, "plan.json", &EvalOptions::default());
        assert_eq!((lift.targeted.planned, lift.targeted.reviewed, lift.targeted.errors), (2, 1, 1));
        assert_eq!(lift.control.errors_per_100, None);
    }
}
