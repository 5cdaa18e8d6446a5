//! `access report`: the ledger's totals per period and currency, and the pledge they owe.

use std::collections::BTreeMap;
use std::fmt;

use rust_decimal::Decimal;
use serde::Serialize;

use super::ledger::{Entry, Ledger};

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

pub fn report(ledger: &Ledger, period: Period) -> LedgerReport {
    LedgerReport {
        ledger: ledger.path.clone(),
        entries: ledger.entries.len(),
        head: ledger.head().to_string(),
        totals: totals(&ledger.entries, period),
    }
}

pub fn totals(entries: &[Entry], period: Period) -> Vec<Totals> {
    let mut by: BTreeMap<(String, String), Totals> = BTreeMap::new();
    for e in entries {
        let key = (period.of(&e.date), e.currency.clone());
        let t = by.entry(key.clone()).or_insert_with(|| Totals { period: key.0, currency: key.1, ..Default::default() });
        let amount = e.amount();
        if e.is_refund() {
            t.refunds += 1;
            t.refunded -= amount;
        } else {
            t.sales += 1;
            t.gross += amount;
        }
        t.net += amount;
        t.pledge += e.pledge();
    }
    let mut out: Vec<Totals> = by.into_values().collect();
    for t in &mut out {
        for d in [&mut t.gross, &mut t.refunded, &mut t.net, &mut t.pledge] {
            d.rescale(2);
        }
    }
    out
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
}
