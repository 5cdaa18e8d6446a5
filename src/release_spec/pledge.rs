//! The giving pledge: the share of every sale given away, as a schedule of rates by date.
//!
//! ```yaml
//! pledge:
//!   schedule:
//!     - { from: 2026-07-15, percent: 1 }
//!   goal_percent: 10
//! ```
//!
//! A sale takes the rate in force on its paid date; `access sync` writes that rate into the
//! ledger line, so a later change of schedule never rewrites what past sales owed.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PledgeLayer {
    pub schedule: Option<Vec<PledgeStep>>,
    pub goal_percent: Option<f64>,
}

/// From `from` on (inclusive), `percent` of every sale.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PledgeStep {
    pub from: String,
    pub percent: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PledgeSpec {
    /// Steps in date order; the first one starts the pledge.
    pub schedule: Vec<PledgeStep>,
    /// Where the schedule is heading, said in the card.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goal_percent: Option<f64>,
}

impl PledgeSpec {
    /// The step in force on `date` (YYYY-MM-DD), or None before the pledge began.
    pub fn step_on(&self, date: &str) -> Option<&PledgeStep> {
        // ISO dates order as strings.
        self.schedule.iter().rev().find(|s| s.from.as_str() <= date)
    }

    /// Checks the schedule; the message names the step at fault.
    pub fn check(&self, is_date: impl Fn(&str) -> bool) -> Result<(), String> {
        if self.schedule.is_empty() {
            return Err("schedule: expected at least one step `{ from: YYYY-MM-DD, percent: N }`".into());
        }
        let ceiling = self.goal_percent.unwrap_or(100.0);
        if !(ceiling > 0.0 && ceiling <= 100.0) {
            return Err(format!("goal_percent: expected a percentage in (0, 100], got {ceiling}"));
        }
        for (i, step) in self.schedule.iter().enumerate() {
            if !is_date(&step.from) {
                return Err(format!("schedule[{i}].from: {:?} is not a date as YYYY-MM-DD", step.from));
            }
            if !(step.percent > 0.0 && step.percent <= ceiling) {
                return Err(format!("schedule[{i}].percent: expected a percentage in (0, {ceiling}], got {}", step.percent));
            }
            if i > 0 && step.from <= self.schedule[i - 1].from {
                return Err(format!(
                    "schedule[{i}].from: {} does not come after the step before it ({})",
                    step.from,
                    self.schedule[i - 1].from
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(steps: &[(&str, f64)]) -> PledgeSpec {
        PledgeSpec {
            schedule: steps.iter().map(|(from, percent)| PledgeStep { from: from.to_string(), percent: *percent }).collect(),
            goal_percent: Some(10.0),
        }
    }

    #[test]
    fn a_sale_takes_the_step_in_force_on_its_date() {
        let s = spec(&[("2026-07-15", 1.0), ("2027-07-15", 2.0)]);
        assert_eq!(s.step_on("2026-07-14"), None);
        assert_eq!(s.step_on("2026-07-15").unwrap().percent, 1.0);
        assert_eq!(s.step_on("2027-07-14").unwrap().percent, 1.0);
        assert_eq!(s.step_on("2027-07-15").unwrap().percent, 2.0);
    }

    #[test]
    fn bad_schedules_name_the_step() {
        let ok = |_: &str| true;
        assert!(spec(&[]).check(ok).unwrap_err().contains("at least one step"));
        assert!(spec(&[("2026-07-15", 0.0)]).check(ok).unwrap_err().contains("schedule[0].percent"));
        assert!(spec(&[("2026-07-15", 11.0)]).check(ok).unwrap_err().contains("(0, 10]"));
        let err = spec(&[("2026-07-15", 1.0), ("2026-07-15", 2.0)]).check(ok).unwrap_err();
        assert!(err.contains("schedule[1].from"), "{err}");
        assert!(spec(&[("2026-7-15", 1.0)]).check(|d| d.len() == 10).unwrap_err().contains("schedule[0].from"));
    }
}
