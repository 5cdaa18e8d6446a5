//! The payment processor's export, read into [`Payment`]s: this project's own CSV layout, or a
//! Stripe payments export whose metadata carries the buyer's Hub username and the tier.
//!
//! Native header: `order_id,hf_username,tier,amount,currency,paid_date` (ISO dates; a negative
//! amount is a refund). Stripe: `id`, `Created (UTC)`, `Amount`, `Currency`, and the metadata
//! columns `hf_username (metadata)` and `tier (metadata)`; `Status` and `Amount Refunded` when
//! present. Every row is checked before anything is used: one bad row stops the run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use chrono::NaiveDate;
use rust_decimal::Decimal;

use crate::release_spec::Tier;

#[derive(Debug, thiserror::Error)]
pub enum PaymentError {
    #[error("reading payments file {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: csv::Error,
    },
    #[error("payments file {}: {message}", path.display())]
    Header { path: PathBuf, message: String },
    #[error("payments file {} line {line}: {message}", path.display())]
    Row { path: PathBuf, line: u64, message: String },
}

/// One sale, or (a negative amount) one refund.
#[derive(Debug, Clone, PartialEq)]
pub struct Payment {
    pub order_id: String,
    /// The buyer's Hugging Face username, as given.
    pub username: String,
    pub tier: Tier,
    /// Two decimal places; negative for a refund.
    pub amount: Decimal,
    /// ISO 4217, upper case.
    pub currency: String,
    pub paid: NaiveDate,
    /// The line of the file it came from, for errors about it.
    pub line: u64,
}

impl Payment {
    pub fn is_refund(&self) -> bool {
        self.amount.is_sign_negative()
    }
}

/// What was read, and the rows that were no payment (a Stripe export lists failed charges too).
#[derive(Debug, Clone, Default)]
pub struct PaymentsFile {
    pub payments: Vec<Payment>,
    /// Stripe `Status` -> rows skipped with it.
    pub skipped: BTreeMap<String, usize>,
}

pub const NATIVE_HEADER: [&str; 6] = ["order_id", "hf_username", "tier", "amount", "currency", "paid_date"];
const STRIPE_REQUIRED: [&str; 6] = ["id", "Created (UTC)", "Amount", "Currency", "hf_username (metadata)", "tier (metadata)"];

/// Reads and checks every row of a payments export.
pub fn read(path: &Path) -> Result<PaymentsFile, PaymentError> {
    let read_err = |source| PaymentError::Read { path: path.to_path_buf(), source };
    let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).from_path(path).map_err(read_err)?;
    let header: Vec<String> = reader.headers().map_err(read_err)?.iter().map(str::to_string).collect();
    let column = |name: &str| header.iter().position(|h| h == name);
    let header_err = |message: String| PaymentError::Header { path: path.to_path_buf(), message };

    let stripe = if NATIVE_HEADER.iter().all(|c| column(c).is_some()) {
        false
    } else if STRIPE_REQUIRED.iter().all(|c| column(c).is_some()) {
        true
    } else {
        let missing = |set: &[&str]| set.iter().filter(|c| column(c).is_none()).copied().collect::<Vec<_>>().join(", ");
        return Err(header_err(format!(
            "the header is neither this tool's ({}; missing {}) nor a Stripe payments export's ({}; missing {})",
            NATIVE_HEADER.join(","),
            missing(&NATIVE_HEADER),
            STRIPE_REQUIRED.join(", "),
            missing(&STRIPE_REQUIRED),
        )));
    };

    let mut out = PaymentsFile::default();
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    for record in reader.records() {
        let record = record.map_err(read_err)?;
        let line = record.position().map_or(0, |p| p.line());
        let row = Row { header: &header, record: &record };
        let row_err = |message: String| PaymentError::Row { path: path.to_path_buf(), line, message };
        let rows = if stripe { stripe_row(&row, line, &mut out.skipped) } else { native_row(&row, line).map(|p| vec![p]) };
        for payment in rows.map_err(row_err)? {
            if let Some(first) = seen.insert(payment.order_id.clone(), line) {
                return Err(row_err(format!("order id {:?} was already used on line {first}: order ids must be unique", payment.order_id)));
            }
            out.payments.push(payment);
        }
    }
    Ok(out)
}

/// One record, read by column name.
struct Row<'a> {
    header: &'a [String],
    record: &'a csv::StringRecord,
}

impl<'a> Row<'a> {
    /// The named column's value, empty when the column or the value is missing.
    fn get(&self, name: &str) -> &'a str {
        self.header.iter().position(|h| h == name).and_then(|i| self.record.get(i)).unwrap_or("")
    }
}

fn native_row(row: &Row<'_>, line: u64) -> Result<Payment, String> {
    let get = |name| row.get(name);
    Ok(Payment {
        order_id: order_id(get("order_id"))?,
        username: username(get("hf_username"))?,
        tier: tier(get("tier"))?,
        amount: amount(get("amount"), get("currency"))?,
        currency: currency(get("currency"))?,
        paid: date(get("paid_date"), "paid_date")?,
        line,
    })
}

/// A Stripe row: a sale, plus a refund when `Amount Refunded` says so. Rows whose `Status` is
/// not a completed payment (Failed, Canceled, ...) are skipped and counted.
fn stripe_row(row: &Row<'_>, line: u64, skipped: &mut BTreeMap<String, usize>) -> Result<Vec<Payment>, String> {
    let get = |name| row.get(name);
    let status = get("Status");
    if !status.is_empty() && !["paid", "refunded", "partially refunded"].contains(&status.to_ascii_lowercase().as_str()) {
        *skipped.entry(status.to_string()).or_default() += 1;
        return Ok(Vec::new());
    }
    let created = get("Created (UTC)");
    let sale = Payment {
        order_id: order_id(get("id"))?,
        username: username(get("hf_username (metadata)")).map_err(|e| format!("{e} (the `hf_username` metadata of the charge)"))?,
        tier: tier(get("tier (metadata)"))?,
        amount: amount(&get("Amount").replace(',', ""), get("Currency"))?,
        currency: currency(get("Currency"))?,
        paid: date(created.get(..10).unwrap_or(created), "Created (UTC)")?,
        line,
    };
    if sale.is_refund() {
        return Err("Amount: a Stripe charge is never negative; its refund is in `Amount Refunded`".into());
    }
    let refunded = get("Amount Refunded").replace(',', "");
    let mut rows = vec![sale.clone()];
    if !refunded.is_empty() && decimal(&refunded, "Amount Refunded")? != Decimal::ZERO {
        // The export does not say when the refund was made: it counts from the sale's date.
        let refund = -decimal(&refunded, "Amount Refunded")?.abs();
        rows.push(Payment { order_id: format!("{}:refund", sale.order_id), amount: refund, ..sale });
    }
    Ok(rows)
}

fn order_id(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("order_id is empty".into());
    }
    Ok(text.to_string())
}

/// A Hub username: letters, digits, `-`, `_`, `.`, not starting with a symbol.
fn username(text: &str) -> Result<String, String> {
    let valid = text.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && text.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    match text {
        "" => Err("hf_username is empty: a payment without a Hub username cannot be granted to anyone".into()),
        _ if !valid => Err(format!("hf_username {text:?} is not a Hugging Face username (letters, digits, '-', '_', '.')")),
        _ => Ok(text.to_string()),
    }
}

fn tier(text: &str) -> Result<Tier, String> {
    match text.to_ascii_lowercase().as_str() {
        "standard" => Ok(Tier::Standard),
        "enterprise" => Ok(Tier::Enterprise),
        "trial" => Err("tier trial is free: no payment buys it (expected standard or enterprise)".into()),
        "" => Err("tier is empty (expected standard or enterprise)".into()),
        other => Err(format!("tier {other:?} is not one of the spec's tiers (expected standard or enterprise)")),
    }
}

/// The largest amount one payment may carry, in any currency: far above any sale of a license,
/// and far below what a ledger's sums can hold (about 7.9e28), so a report can never overflow.
const MAX_AMOUNT: Decimal = Decimal::from_parts(1_000_000_000, 0, 0, false, 0);

/// Money as the files write it: digits with exactly two decimal places ("1200.00", "-1200.00"),
/// no larger than [`MAX_AMOUNT`].
fn decimal(text: &str, key: &str) -> Result<Decimal, String> {
    let value = Decimal::from_str(text).map_err(|_| format!("{key} {text:?} is not a decimal number"))?;
    if value.scale() != 2 {
        return Err(format!("{key} {text:?} is not written with exactly two decimal places (as 1200.00)"));
    }
    if value.abs() > MAX_AMOUNT {
        return Err(format!("{key} {text:?} is more than {MAX_AMOUNT} for one payment"));
    }
    Ok(value)
}

fn amount(text: &str, currency: &str) -> Result<Decimal, String> {
    if text.is_empty() {
        return Err(if currency.is_empty() { "amount is empty".into() } else { format!("currency {currency} is given without an amount") });
    }
    let value = decimal(text, "amount")?;
    if value.is_zero() {
        return Err("amount is 0: a payment of nothing buys no license".into());
    }
    Ok(value)
}

fn currency(text: &str) -> Result<String, String> {
    if text.len() != 3 || !text.chars().all(|c| c.is_ascii_alphabetic()) {
        return Err(format!("currency {text:?} is not a three-letter ISO 4217 code (USD, EUR, ...)"));
    }
    Ok(text.to_ascii_uppercase())
}

/// A calendar date as YYYY-MM-DD in 2000-2099 (chrono alone reads "-2026-07-20" as the year
/// 2026 BC, and "20260-07-20" as a year of five digits).
fn date(text: &str, key: &str) -> Result<NaiveDate, String> {
    let date = NaiveDate::parse_from_str(text, "%Y-%m-%d").map_err(|_| format!("{key} {text:?} is not a date as YYYY-MM-DD"))?;
    if !(2000..=2099).contains(&chrono::Datelike::year(&date)) {
        return Err(format!("{key} {text:?} is not a date between 2000-01-01 and 2099-12-31"));
    }
    Ok(date)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_text(text: &str) -> Result<PaymentsFile, PaymentError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("payments.csv");
        std::fs::write(&path, text).unwrap();
        read(&path)
    }

    const HEADER: &str = "order_id,hf_username,tier,amount,currency,paid_date\n";

    #[test]
    fn native_rows_read_with_refunds_negative() {
        let file =
            read_text(&format!("{HEADER}A-1,alice,standard,1200.00,usd,2026-07-20\nA-2,alice,Standard,-1200.00,USD,2026-08-01\n")).unwrap();
        assert_eq!(file.payments.len(), 2);
        assert_eq!(file.payments[0].amount.to_string(), "1200.00");
        assert_eq!(file.payments[0].currency, "USD");
        assert!(file.payments[1].is_refund());
        assert_eq!(file.payments[1].amount.to_string(), "-1200.00");
        assert_eq!(file.payments[1].line, 3);
    }

    #[test]
    fn each_bad_row_is_an_error_naming_its_line() {
        for (row, expected) in [
            ("A-1,alice,gold,100.00,USD,2026-07-20", "tier \"gold\" is not one of the spec's tiers"),
            ("A-1,alice,trial,100.00,USD,2026-07-20", "tier trial is free"),
            ("A-1,,standard,100.00,USD,2026-07-20", "hf_username is empty"),
            ("A-1,al ice,standard,100.00,USD,2026-07-20", "is not a Hugging Face username"),
            ("A-1,alice,standard,,USD,2026-07-20", "currency USD is given without an amount"),
            ("A-1,alice,standard,100.00,,2026-07-20", "currency \"\" is not a three-letter"),
            ("A-1,alice,standard,abc,USD,2026-07-20", "amount \"abc\" is not a decimal"),
            ("A-1,alice,standard,1.005,USD,2026-07-20", "not written with exactly two decimal places"),
            ("A-1,alice,standard,1200,USD,2026-07-20", "not written with exactly two decimal places"),
            ("A-1,alice,standard,79228162514264337593543950335,USD,2026-07-20", "not written with exactly two decimal places"),
            ("A-1,alice,standard,79228162514264337593543950.33,USD,2026-07-20", "is more than 1000000000 for one payment"),
            ("A-1,alice,standard,0.00,USD,2026-07-20", "amount is 0"),
            ("A-1,alice,standard,100.00,USD,20/07/2026", "paid_date \"20/07/2026\" is not a date"),
            ("A-1,alice,standard,100.00,USD,-2026-07-20", "paid_date \"-2026-07-20\" is not a date between 2000-01-01 and 2099-12-31"),
            ("A-1,alice,standard,100.00,USD,1999-12-31", "is not a date between"),
            (",alice,standard,100.00,USD,2026-07-20", "order_id is empty"),
        ] {
            let err = read_text(&format!("{HEADER}{row}\n")).unwrap_err().to_string();
            assert!(err.contains("line 2") && err.contains(expected), "{row}: {err}");
        }
        let err =
            read_text(&format!("{HEADER}A-1,alice,standard,1.00,USD,2026-07-20\nA-1,bob,standard,1.00,USD,2026-07-21\n")).unwrap_err();
        assert!(err.to_string().contains("line 3: order id \"A-1\" was already used on line 2"), "{err}");
        let err = read_text("order,user\nA,b\n").unwrap_err().to_string();
        assert!(err.contains("missing order_id, hf_username") && err.contains("Stripe"), "{err}");
    }

    #[test]
    fn a_stripe_export_reads_with_its_refunds_and_skips_failed_charges() {
        let text = "id,Created (UTC),Amount,Amount Refunded,Currency,Status,hf_username (metadata),tier (metadata)\n\
                    ch_1,2026-07-20 10:11:12,\"1,200.00\",0.00,usd,Paid,alice,standard\n\
                    ch_2,2026-07-21 09:00,500.00,500.00,eur,Refunded,bob,standard\n\
                    ch_3,2026-07-22 09:00,500.00,0.00,eur,Failed,carol,standard\n";
        let file = read_text(text).unwrap();
        let ids: Vec<_> = file.payments.iter().map(|p| (p.order_id.as_str(), p.amount.to_string())).collect();
        assert_eq!(ids, [("ch_1", "1200.00".into()), ("ch_2", "500.00".into()), ("ch_2:refund", "-500.00".into())]);
        assert_eq!(file.payments[0].paid, NaiveDate::from_ymd_opt(2026, 7, 20).unwrap());
        assert_eq!(file.skipped, BTreeMap::from([("Failed".to_string(), 1)]));
        let missing_user = text.replace("Paid,alice", "Paid,");
        assert!(read_text(&missing_user).unwrap_err().to_string().contains("`hf_username` metadata"));
    }
}
