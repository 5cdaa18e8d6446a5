//! `access report`: the ledger's totals per period and currency, and the pledge they owe.

use std::collections::BTreeMap;
use std::fmt;

use rust_decimal::Decimal;
use serde::Serialize;

use super::ledger::{Entry, Ledger, LedgerError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    Month,
    Quarter,
    Year,
}

impl Period {
    /// The period a YYYY-MM-DD date falls in: "2026-07", "2026-Q3" or "2026".
    fn of(self, date: &str) -> String {
        let (year, month) = (&date[..4], date[5..7].parse::<u32>().unwrap_or(1));
        match self {
            Period::Month => date[..7].to_string(),
            Period::Quarter => format!("{year}-Q{}", (month - 1) / 3 + 1),
            Period::Year => year.to_string(),
        }
    }
}

/// One period and currency.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Totals {
    pub period: String,
    pub currency: String,
    pub sales: usize,
    pub refunds: usize,
    /// Sum of sales.
    pub gross: Decimal,
    /// Sum of refunds, as a positive number.
    pub refunded: Decimal,
    pub net: Decimal,
    /// Pledge owed: the lines' pledges summed (refunds take theirs back).
    pub pledge: Decimal,
}

#[derive(Debug, Clone, Serialize)]
pub struct LedgerReport {
    pub ledger: std::path::PathBuf,
    pub entries: usize,
    /// The chain's head: note it down, and a rewritten ledger shows.
    pub head: String,
    pub totals: Vec<Totals>,
}

pub fn report(ledger: &Ledger, period: Period) -> Result<LedgerReport, LedgerError> {
    Ok(LedgerReport {
        ledger: ledger.path.clone(),
        entries: ledger.entries.len(),
        head: ledger.head().to_string(),
        totals: totals(&ledger.entries, period).map_err(|message| LedgerError::Broken {
            path: ledger.path.clone(),
            line: message.0,
            message: message.1,
        })?,
    })
}

/// The totals per period and currency, summed with checked arithmetic: a sum that overflows is
/// an error naming the line that made it (payments are bounded when read, so only a ledger
/// written by hand can get there), never a panic.
pub fn totals(entries: &[Entry], period: Period) -> Result<Vec<Totals>, (usize, String)> {
    let mut by: BTreeMap<(String, String), Totals> = BTreeMap::new();
    for (i, e) in entries.iter().enumerate() {
        let key = (period.of(&e.date), e.currency.clone());
        let t = by.entry(key.clone()).or_insert_with(|| Totals { period: key.0, currency: key.1, ..Default::default() });
        let amount = e.amount();
        let overflow = || (i + 1, format!("the {} totals of {} overflow at this line's amount {}", t.currency, t.period, e.amount));
        let add = |sum: Decimal, x: Decimal| sum.checked_add(x);
        let (gross, refunded) =
            if e.is_refund() { (Some(t.gross), add(t.refunded, -amount)) } else { (add(t.gross, amount), Some(t.refunded)) };
        let (Some(gross), Some(refunded), Some(net), Some(pledge)) = (gross, refunded, add(t.net, amount), add(t.pledge, e.pledge()))
        else {
            return Err(overflow());
        };
        if e.is_refund() {
            t.refunds += 1;
        } else {
            t.sales += 1;
        }
        (t.gross, t.refunded, t.net, t.pledge) = (gross, refunded, net, pledge);
    }
    let mut out: Vec<Totals> = by.into_values().collect();
    for t in &mut out {
        for d in [&mut t.gross, &mut t.refunded, &mut t.net, &mut t.pledge] {
            d.rescale(2);
        }
    }
    Ok(out)
}

impl fmt::Display for LedgerReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "ledger {}: {} entries, chain verified, head {}", self.ledger.display(), self.entries, self.head)?;
        if self.totals.is_empty() {
            return writeln!(f, "no sales recorded");
        }
        writeln!(
            f,
            "{:<8} {:<4} {:>5} {:>7} {:>14} {:>12} {:>14} {:>12}",
            "period", "cur", "sales", "refunds", "gross", "refunded", "net", "pledge owed"
        )?;
        for t in &self.totals {
            writeln!(
                f,
                "{:<8} {:<4} {:>5} {:>7} {:>14} {:>12} {:>14} {:>12}",
                t.period, t.currency, t.sales, t.refunds, t.gross, t.refunded, t.net, t.pledge
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_name_month_quarter_and_year() {
        assert_eq!(Period::Month.of("2026-07-20"), "2026-07");
        assert_eq!(Period::Quarter.of("2026-07-20"), "2026-Q3");
        assert_eq!(Period::Quarter.of("2026-12-31"), "2026-Q4");
        assert_eq!(Period::Year.of("2026-01-01"), "2026");
    }

    /// A ledger whose amounts sum past what a decimal holds (one written before amounts were
    /// bounded) is reported as an error naming the line, not a panic.
    #[test]
    fn totals_that_overflow_name_the_line() {
        let entry = |seq: u64, amount: &str| Entry {
            seq,
            order_id: format!("A-{seq}"),
            buyer: "alice".into(),
            tier: crate::release_spec::Tier::Standard,
            amount: amount.into(),
            currency: "USD".into(),
            date: "2026-07-20".into(),
            refunds: None,
            pledge_percent: "0".into(),
            pledge: "0.00".into(),
            prev: String::new(),
            hash: String::new(),
        };
        let huge = "79228162514264337593543950335";
        assert!(totals(&[entry(1, huge)], Period::Month).is_ok());
        let (line, message) = totals(&[entry(1, "1200.00"), entry(2, "7.00"), entry(3, huge)], Period::Month).unwrap_err();
        assert_eq!(line, 3);
        assert!(message.contains("USD totals of 2026-07 overflow"), "{message}");
    }
}
