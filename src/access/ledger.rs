//! The sales ledger: one JSON line per sale or refund, append-only, hash-chained.
//!
//! Each line records the order, the buyer, the tier, the amount, the pledge rate in force on its
//! date and the pledge it owes, then `prev` (the hash of the line before, 64 zeros for the first)
//! and `hash` (sha256 of the line's JSON without `hash`). Editing, removing or reordering a line
//! breaks the chain at that line, and [`Ledger::open`] says which. The ledger, not the payments
//! file, is what licenses are judged from: each payout export only adds to it.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use rust_decimal::{Decimal, RoundingStrategy};
use serde::{Deserialize, Serialize};

use super::payments::Payment;
use crate::release_spec::{PledgeSpec, Tier};

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("reading ledger {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing ledger {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("ledger {} line {line}: {message}", path.display())]
    Broken { path: PathBuf, line: usize, message: String },
    #[error("line {line}: {message}")]
    Payment { line: u64, message: String },
    #[error("ledger {}: another bpals-release (pid {pid}) is adding to it; run again when it has finished (its sales and yours are both kept)", path.display())]
    Busy { path: PathBuf, pid: String },
    #[error("ledger {}: {why}", path.display())]
    Refused { path: PathBuf, why: String },
    #[error("locking ledger {}", path.display())]
    Lock {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// One line of the ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// 1 for the first line, and one more per line.
    pub seq: u64,
    pub order_id: String,
    /// The buyer's Hub username, as the payment gave it.
    pub buyer: String,
    pub tier: Tier,
    /// Decimal, two places; negative for a refund.
    pub amount: String,
    pub currency: String,
    /// The payment date (YYYY-MM-DD).
    pub date: String,
    /// For a refund: the order it refunds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refunds: Option<String>,
    /// The pledge rate in force on the sale's date ("1" is 1%); a refund takes its sale's.
    pub pledge_percent: String,
    /// What the line adds to the pledge owed: amount x rate, to the cent (half away from zero).
    pub pledge: String,
    pub prev: String,
    pub hash: String,
}

/// The right to add to the ledger at `path`: one process at a time, from reading the ledger to
/// renaming the new one into place, so two syncs cannot each append to the same old ledger and
/// keep only the last one's sales. A lock file beside it (`.NAME.lock`); a second writer is
/// refused at once, naming the first's pid.
///
/// A ledger path that is a symbolic link is refused: the ledger is replaced whole by a rename,
/// which would put a new file in the link's place, and two names for one ledger would take two
/// locks. The lock file itself is never followed ([`FileLock`]).
pub fn lock(path: &Path) -> Result<crate::files::lock::FileLock, LedgerError> {
    use crate::files::lock::{FileLock, LockError};
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(path).map_or_else(|_| "?".into(), |t| t.display().to_string());
            let why = format!("is a symbolic link (to {target}); name the ledger file itself with --ledger");
            return Err(LedgerError::Refused { path: path.to_path_buf(), why });
        }
        if !meta.is_file() {
            let why = format!("is {}, not a ledger file", crate::files::regular::kind_of(&meta));
            return Err(LedgerError::Refused { path: path.to_path_buf(), why });
        }
    }
    let name = path.file_name().map_or_else(|| "ledger".into(), |n| n.to_string_lossy().into_owned());
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|source| LedgerError::Lock { path: path.to_path_buf(), source })?;
    FileLock::take(&dir.join(format!(".{name}.lock"))).map_err(|e| match e {
        LockError::Held(pid) => LedgerError::Busy { path: path.to_path_buf(), pid },
        e @ LockError::NotALock { .. } => LedgerError::Refused { path: path.to_path_buf(), why: e.to_string() },
        LockError::Io(source) => LedgerError::Lock { path: path.to_path_buf(), source },
    })
}

impl Entry {
    pub fn amount(&self) -> Decimal {
        Decimal::from_str(&self.amount).unwrap_or_default()
    }
    pub fn pledge(&self) -> Decimal {
        Decimal::from_str(&self.pledge).unwrap_or_default()
    }
    pub fn is_refund(&self) -> bool {
        self.refunds.is_some()
    }

    /// sha256 of the line's JSON without its `hash` field.
    fn digest(&self) -> String {
        let mut value = serde_json::to_value(self).expect("an entry serializes");
        value.as_object_mut().expect("an entry is an object").remove("hash");
        crate::hashing::sha256_hex(value.to_string().as_bytes())
    }

    /// What the payment says, to compare with a line already recorded for its order.
    fn same_sale(&self, p: &Payment) -> bool {
        self.buyer.eq_ignore_ascii_case(&p.username)
            && self.tier == p.tier
            && self.amount == p.amount.to_string()
            && self.currency == p.currency
            && self.date == p.paid.to_string()
    }
}

/// The ledger file, read and verified.
#[derive(Debug, Clone)]
pub struct Ledger {
    pub path: PathBuf,
    pub entries: Vec<Entry>,
}

impl Ledger {
    /// Reads the ledger and checks its chain; a file that does not exist yet is an empty ledger.
    pub fn open(path: &Path) -> Result<Ledger, LedgerError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(source) => return Err(LedgerError::Read { path: path.to_path_buf(), source }),
        };
        let broken = |line: usize, message: String| LedgerError::Broken { path: path.to_path_buf(), line, message };
        let mut entries: Vec<Entry> = Vec::new();
        let mut orders: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let entry: Entry = serde_json::from_str(line).map_err(|e| broken(n, format!("not a ledger entry: {e}")))?;
            let prev = entries.last().map_or(GENESIS, |e| e.hash.as_str());
            if entry.seq != n as u64 {
                return Err(broken(n, format!("seq is {} where {n} was expected: a line was removed or moved", entry.seq)));
            }
            if entry.prev != prev {
                return Err(broken(n, "prev does not name the hash of the line before: a line was removed, moved or edited".into()));
            }
            if entry.hash != entry.digest() {
                return Err(broken(n, "hash does not match the line's content: the line was edited after it was written".into()));
            }
            if let Some(first) = orders.insert(entry.order_id.clone(), n) {
                return Err(broken(n, format!("order {} is already on line {first}", entry.order_id)));
            }
            entries.push(entry);
        }
        Ok(Ledger { path: path.to_path_buf(), entries })
    }

    /// The hash of the last line (the chain's head), or the genesis value.
    pub fn head(&self) -> &str {
        self.entries.last().map_or(GENESIS, |e| e.hash.as_str())
    }

    /// Appends a line for every payment not yet recorded, in date order. A payment whose order is
    /// already recorded must say the same as the line: the ledger is never rewritten. Returns
    /// the new lines.
    pub fn record(&mut self, payments: &[Payment], pledge: Option<&PledgeSpec>) -> Result<Vec<Entry>, LedgerError> {
        let recorded: std::collections::HashMap<&str, &Entry> = self.entries.iter().map(|e| (e.order_id.as_str(), e)).collect();
        let mut new: Vec<&Payment> = Vec::new();
        for p in payments {
            match recorded.get(p.order_id.as_str()) {
                Some(e) if e.same_sale(p) => {}
                Some(e) => {
                    return Err(LedgerError::Payment {
                        line: p.line,
                        message: format!(
                            "order {} is in the ledger (line {}) as {} {} {} to {} on {}, but the payments file says {} {} {} to {} on {}; \
                             the ledger is append-only: record a refund instead of changing a sale",
                            p.order_id, e.seq, e.amount, e.currency, e.tier.name(), e.buyer, e.date,
                            p.amount, p.currency, p.tier.name(), p.username, p.paid,
                        ),
                    })
                }
                None => new.push(p),
            }
        }
        new.sort_by_key(|p| (p.paid, p.line));
        let first_new = self.entries.len();
        for p in new {
            let (refunds, percent) = if p.is_refund() {
                let sale = self.refunded_sale(p)?;
                (Some(sale.order_id.clone()), Decimal::from_str(&sale.pledge_percent).unwrap_or_default())
            } else {
                let percent = pledge.and_then(|s| s.step_on(&p.paid.to_string())).map_or(0.0, |s| s.percent);
                (None, Decimal::from_str(&percent.to_string()).unwrap_or_default())
            };
            let mut owed = (p.amount * percent / Decimal::ONE_HUNDRED).round_dp_with_strategy(2, RoundingStrategy::MidpointAwayFromZero);
            owed.rescale(2);
            let mut entry = Entry {
                seq: self.entries.len() as u64 + 1,
                order_id: p.order_id.clone(),
                buyer: p.username.clone(),
                tier: p.tier,
                amount: p.amount.to_string(),
                currency: p.currency.clone(),
                date: p.paid.to_string(),
                refunds,
                pledge_percent: percent.normalize().to_string(),
                pledge: owed.to_string(),
                prev: self.head().to_string(),
                hash: String::new(),
            };
            entry.hash = entry.digest();
            self.entries.push(entry);
        }
        Ok(self.entries[first_new..].to_vec())
    }

    /// The sale a refund undoes: the buyer's latest sale of that tier and currency on or before
    /// the refund's date that no refund has undone yet, of at least the refunded amount.
    fn refunded_sale(&self, refund: &Payment) -> Result<&Entry, LedgerError> {
        let date = refund.paid.to_string();
        let undone = |order: &str| self.entries.iter().any(|e| e.refunds.as_deref() == Some(order));
        let sale = self
            .entries
            .iter()
            .rev()
            .filter(|e| !e.is_refund() && e.buyer.eq_ignore_ascii_case(&refund.username) && e.tier == refund.tier)
            .find(|e| e.currency == refund.currency && e.date <= date && !undone(&e.order_id))
            .ok_or_else(|| LedgerError::Payment {
                line: refund.line,
                message: format!(
                    "refund {} ({} {}) matches no earlier {} sale to {} in {} that is not refunded already",
                    refund.order_id,
                    refund.amount,
                    refund.currency,
                    refund.tier.name(),
                    refund.username,
                    refund.currency
                ),
            })?;
        if -refund.amount > sale.amount() {
            return Err(LedgerError::Payment {
                line: refund.line,
                message: format!(
                    "refund {} of {} {} is more than the sale it refunds ({}: {})",
                    refund.order_id, -refund.amount, refund.currency, sale.order_id, sale.amount
                ),
            });
        }
        Ok(sale)
    }

    /// Writes the whole ledger to a temporary file beside it, then renames it into place: a
    /// reader never sees half a line.
    pub fn write(&self) -> Result<(), LedgerError> {
        let err = |source| LedgerError::Write { path: self.path.clone(), source };
        let dir = self.path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(err)?;
        let mut text = String::new();
        for e in &self.entries {
            text.push_str(&serde_json::to_string(e).expect("an entry serializes"));
            text.push('\n');
        }
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(err)?;
        std::io::Write::write_all(&mut tmp, text.as_bytes()).map_err(err)?;
        tmp.as_file().sync_all().map_err(err)?;
        tmp.persist(&self.path).map_err(|e| err(e.error))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release_spec::PledgeStep;
    use chrono::NaiveDate;

    fn pay(order: &str, user: &str, amount: &str, date: &str, line: u64) -> Payment {
        Payment {
            order_id: order.into(),
            username: user.into(),
            tier: Tier::Standard,
            amount: {
                let mut d = Decimal::from_str(amount).unwrap();
                d.rescale(2);
                d
            },
            currency: "USD".into(),
            paid: NaiveDate::parse_from_str(date, "%Y-%m-%d").unwrap(),
            line,
        }
    }

    fn pledge() -> PledgeSpec {
        PledgeSpec {
            schedule: vec![PledgeStep { from: "2026-07-15".into(), percent: 1.0 }, PledgeStep { from: "2027-01-01".into(), percent: 2.5 }],
            goal_percent: Some(10.0),
        }
    }

    #[test]
    fn sales_take_their_dates_rate_and_refunds_their_sales() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(&dir.path().join("ledger.jsonl")).unwrap();
        let payments = [
            pay("B", "bob", "1234.50", "2027-02-01", 3),
            pay("A", "alice", "1000", "2026-07-20", 2),
            pay("R", "Alice", "-400", "2027-03-01", 4),
            pay("E", "early", "100", "2026-07-01", 5),
        ];
        let new = ledger.record(&payments, Some(&pledge())).unwrap();
        let summary: Vec<_> =
            new.iter().map(|e| (e.order_id.as_str(), e.pledge_percent.as_str(), e.pledge.as_str(), e.refunds.as_deref())).collect();
        assert_eq!(
            summary,
            [("E", "0", "0.00", None), ("A", "1", "10.00", None), ("B", "2.5", "30.86", None), ("R", "1", "-4.00", Some("A"))]
        );
        ledger.write().unwrap();
        let mut again = Ledger::open(&ledger.path).unwrap();
        assert_eq!(again.entries, ledger.entries);
        assert!(again.record(&payments, Some(&pledge())).unwrap().is_empty(), "recording twice adds nothing");

        let changed = pay("A", "alice", "900", "2026-07-20", 9);
        let err = again.record(&[changed], Some(&pledge())).unwrap_err().to_string();
        assert!(err.contains("line 9") && err.contains("append-only"), "{err}");
        let err = again.record(&[pay("R2", "alice", "-1", "2027-03-02", 7)], Some(&pledge())).unwrap_err().to_string();
        assert!(err.contains("matches no earlier standard sale to alice"), "{err}");
        let err = again.record(&[pay("R3", "bob", "-2000", "2027-03-02", 8)], Some(&pledge())).unwrap_err().to_string();
        assert!(err.contains("more than the sale it refunds"), "{err}");
    }

    #[test]
    fn an_edited_removed_or_moved_line_breaks_the_chain_there() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.jsonl");
        let mut ledger = Ledger::open(&path).unwrap();
        ledger
            .record(
                &[pay("A", "a", "10", "2026-08-01", 2), pay("B", "b", "20", "2026-08-02", 3), pay("C", "c", "30", "2026-08-03", 4)],
                Some(&pledge()),
            )
            .unwrap();
        ledger.write().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let check = |text: String, expected: &str| {
            std::fs::write(&path, text).unwrap();
            let err = Ledger::open(&path).unwrap_err().to_string();
            assert!(err.contains(expected), "{err}");
        };
        check(text.replace("\"amount\":\"20.00\"", "\"amount\":\"2.00\""), "line 2: hash does not match");
        check(format!("{}\n{}\n", lines[0], lines[2]), "line 2: seq is 3");
        check(format!("{}\n{}\n{}\n", lines[1], lines[0], lines[2]), "line 1: seq is 2");
        check(format!("{}\nnot json\n", lines[0]), "line 2: not a ledger entry");
    }
}
