//! From the ledger to each buyer's standing on a date: licensed, expired or refunded.
//!
//! The rules, stated once:
//! - A Standard sale licenses its buyer for one year from its payment date (to the day before
//!   the anniversary; a sale on Feb 29 ends on Feb 28). A sale made while a license still runs
//!   adds its year to the end of that license, so renewing early loses nothing.
//! - An Enterprise sale licenses its buyer for good (its license is perpetual).
//! - A refund voids the sale it refunds, in full, from the refund's date.
//! - Lines dated after the day judged are not in force yet.

use std::collections::BTreeMap;

use chrono::{Months, NaiveDate};

use super::ledger::Entry;
use crate::release_spec::Tier;

/// A buyer's standing on the day judged.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "standing", rename_all = "snake_case")]
pub enum Standing {
    /// Licensed through the day before `until` (None: perpetual), by `order` (the latest sale).
    Licensed { tier: Tier, until: Option<NaiveDate>, order: String },
    /// The last license ended on `ended`.
    Expired { ended: NaiveDate, order: String },
    /// Every sale was refunded; `refund` undid the last.
    Refunded { order: String, refund: String },
}

impl Standing {
    pub fn is_licensed(&self) -> bool {
        matches!(self, Standing::Licensed { .. })
    }
}

/// One buyer: the name as the latest sale spelt it, and the standing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buyer {
    pub name: String,
    pub standing: Standing,
}

fn date(text: &str) -> Option<NaiveDate> {
    NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()
}

/// Every buyer of a tier `covers` accepts, keyed by the lower-cased username (Hub usernames are
/// case-insensitive), judged on `today`.
pub fn standings(entries: &[Entry], covers: impl Fn(Tier) -> bool, today: NaiveDate) -> BTreeMap<String, Buyer> {
    let in_force = |e: &&Entry| date(&e.date).is_some_and(|d| d <= today);
    let refunds: BTreeMap<&str, &Entry> = entries.iter().filter(in_force).filter_map(|e| Some((e.refunds.as_deref()?, e))).collect();
    let refund_of = |order: &str| refunds.get(order).copied();
    let mut by_buyer: BTreeMap<String, Vec<&Entry>> = BTreeMap::new();
    for e in entries.iter().filter(in_force).filter(|e| !e.is_refund() && covers(e.tier)) {
        by_buyer.entry(e.buyer.to_ascii_lowercase()).or_default().push(e);
    }
    let mut out = BTreeMap::new();
    for (key, mut sales) in by_buyer {
        sales.sort_by(|a, b| a.date.cmp(&b.date).then(a.seq.cmp(&b.seq)));
        let name = sales.last().expect("a buyer has a sale").buyer.clone();
        let mut end: Option<NaiveDate> = None;
        let mut perpetual: Option<&Entry> = None;
        let mut last_valid: Option<&Entry> = None;
        let mut last_refunded: Option<(&Entry, &Entry)> = None;
        for sale in sales {
            if let Some(refund) = refund_of(&sale.order_id) {
                last_refunded = Some((sale, refund));
                continue;
            }
            last_valid = Some(sale);
            let paid = date(&sale.date).expect("ledger dates parse");
            match sale.tier {
                Tier::Enterprise => perpetual = Some(sale),
                _ => {
                    let start = end.filter(|e| *e > paid).unwrap_or(paid);
                    end = start.checked_add_months(Months::new(12));
                }
            }
        }
        let standing = match (perpetual, last_valid, end) {
            (Some(sale), _, _) => Standing::Licensed { tier: sale.tier, until: None, order: sale.order_id.clone() },
            (None, Some(sale), Some(end)) if end > today => {
                Standing::Licensed { tier: sale.tier, until: Some(end), order: sale.order_id.clone() }
            }
            (None, Some(sale), Some(end)) => Standing::Expired { ended: end, order: sale.order_id.clone() },
            _ => match last_refunded {
                Some((sale, refund)) => Standing::Refunded { order: sale.order_id.clone(), refund: refund.order_id.clone() },
                None => continue,
            },
        };
        out.insert(key, Buyer { name, standing });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sale(seq: u64, order: &str, buyer: &str, tier: Tier, date: &str, refunds: Option<&str>) -> Entry {
        Entry {
            seq,
            order_id: order.into(),
            buyer: buyer.into(),
            tier,
            amount: if refunds.is_some() { "-10.00" } else { "10.00" }.into(),
            currency: "USD".into(),
            date: date.into(),
            refunds: refunds.map(str::to_string),
            pledge_percent: "1".into(),
            pledge: "0.10".into(),
            prev: String::new(),
            hash: String::new(),
        }
    }

    fn day(s: &str) -> NaiveDate {
        date(s).unwrap()
    }

    #[test]
    fn standard_lasts_a_year_renewals_extend_and_refunds_void() {
        let entries = [
            sale(1, "A1", "alice", Tier::Standard, "2025-03-01", None),
            sale(2, "A2", "alice", Tier::Standard, "2026-01-01", None),
            sale(3, "B1", "Bob", Tier::Standard, "2024-02-29", None),
            sale(4, "C1", "carol", Tier::Standard, "2026-05-01", None),
            sale(5, "C1R", "carol", Tier::Standard, "2026-06-01", Some("C1")),
            sale(6, "D1", "dave", Tier::Enterprise, "2020-01-01", None),
            sale(7, "F1", "future", Tier::Standard, "2027-01-01", None),
        ];
        let all = standings(&entries, |_| true, day("2026-05-15"));
        // alice renewed early: her second year starts where the first ends.
        assert_eq!(all["alice"].standing, Standing::Licensed { tier: Tier::Standard, until: Some(day("2027-03-01")), order: "A2".into() });
        assert_eq!(all["bob"].standing, Standing::Expired { ended: day("2025-02-28"), order: "B1".into() });
        assert_eq!(all["bob"].name, "Bob");
        // carol's refund is not in force yet on 2026-05-15, then it is.
        assert!(all["carol"].standing.is_licensed());
        let later = standings(&entries, |_| true, day("2026-06-01"));
        assert_eq!(later["carol"].standing, Standing::Refunded { order: "C1".into(), refund: "C1R".into() });
        assert_eq!(all["dave"].standing, Standing::Licensed { tier: Tier::Enterprise, until: None, order: "D1".into() });
        assert!(!all.contains_key("future"));
        // The anniversary itself is the first day without a license.
        let on_anniversary = standings(&entries[..1], |_| true, day("2026-03-01"));
        assert!(!on_anniversary["alice"].standing.is_licensed());
        let only_enterprise = standings(&entries, |t| t == Tier::Enterprise, day("2026-05-15"));
        assert_eq!(only_enterprise.keys().collect::<Vec<_>>(), ["dave"]);
    }
}
