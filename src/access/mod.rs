//! `bpals-release access`: from the payment processor's export to access on the gated release,
//! with every sale kept in an append-only ledger that also totals the giving pledge.
//!
//! `sync` runs in this order, so that a failure anywhere leaves nothing a rerun cannot finish:
//! read and check every payment row; verify the ledger's chain and append the new sales (a sale
//! is recorded even if the Hub is down); judge each buyer's standing from the whole ledger
//! ([`licenses`]); read where access requests stand on the Hub; plan ([`plan`]); make the
//! changes one by one. Every change sets a state, so a second run with the same file changes
//! nothing. One sync at a time adds to a ledger ([`ledger::lock`]): a second is refused while
//! the first runs, and loses nothing by it.

pub mod ledger;
pub mod licenses;
pub mod payments;
pub mod plan;
pub mod report;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use chrono::NaiveDate;
use serde::Serialize;

use crate::hub::access::{GatedAccess, RequestStatus};
use crate::hub::{HubError, RepoRef};
use crate::release_spec::{ReleaseSpec, Tier, Visibility};
pub use ledger::{Entry, Ledger, LedgerError};
pub use licenses::Standing;
pub use payments::PaymentError;
pub use plan::{AccessPlan, Action, Change};

/// Where the ledger lives unless `--ledger` says otherwise: the publisher's audit trail.
pub const DEFAULT_LEDGER: &str = "releases/ledger.jsonl";

#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("refusing to sync access: {0}")]
    Refused(String),
    #[error(transparent)]
    Payments(#[from] PaymentError),
    #[error("payments file {}", path.display())]
    Ledger {
        path: PathBuf,
        #[source]
        source: LedgerError,
    },
    #[error(transparent)]
    LedgerFile(LedgerError),
    #[error(transparent)]
    Hub(#[from] HubError),
    #[error("{done} of {total} access changes were made before this one failed; rerun to finish (a rerun repeats none of them)")]
    Partial {
        done: usize,
        total: usize,
        #[source]
        source: HubError,
    },
}

#[derive(Debug, Clone)]
pub struct SyncOptions {
    /// The payments export (this tool's CSV or Stripe's).
    pub payments: PathBuf,
    pub ledger: PathBuf,
    /// ORG/NAME; the spec's `publish.repo` when None.
    pub repo: Option<String>,
    pub endpoint: Option<String>,
    /// The day licenses are judged on (today, in UTC, from the CLI).
    pub today: NaiveDate,
    pub dry_run: bool,
    /// The retries, the stall that fails a request and the deadline that fails a call.
    pub patience: crate::hub::Patience,
}

/// What a sync found and did.
#[derive(Debug, Clone, Serialize)]
pub struct SyncOutcome {
    pub repo: String,
    pub endpoint: String,
    pub today: NaiveDate,
    pub dry_run: bool,
    pub payments: usize,
    /// Rows of the export that were no payment, by their status.
    pub skipped: BTreeMap<String, usize>,
    pub ledger: PathBuf,
    /// Lines this run adds to the ledger (in a dry run: would add).
    pub recorded: Vec<Entry>,
    pub ledger_head: String,
    pub plan: AccessPlan,
    /// Changes made on the Hub (0 in a dry run).
    pub applied: usize,
}

/// Does a sale of `sold` license a release of `released`? Enterprise covers the standard release.
fn covers(released: Tier, sold: Tier) -> bool {
    let rank = |t: Tier| match t {
        Tier::Trial => 0,
        Tier::Standard => 1,
        Tier::Enterprise => 2,
    };
    rank(sold) >= rank(released)
}

pub fn sync(spec: &ReleaseSpec, options: &SyncOptions, log: &dyn Fn(&str)) -> Result<SyncOutcome, AccessError> {
    let tier = spec.release.tier;
    if !tier.is_commercial() {
        return Err(AccessError::Refused(format!(
            "{}: release.tier is trial, whose repo is public: there is no access to sell",
            spec.path.display()
        )));
    }
    if spec.publish.visibility != Visibility::Gated {
        return Err(AccessError::Refused(format!(
            "{}: publish.visibility is {:?}, not gated: access requests exist only on gated repos",
            spec.path.display(),
            spec.publish.visibility
        )));
    }
    let repo = RepoRef::parse(options.repo.as_deref().unwrap_or(&spec.publish.repo))?;

    let file = payments::read(&options.payments)?;
    if let Some(p) = file.payments.iter().find(|p| p.paid > options.today) {
        return Err(PaymentError::Row {
            path: options.payments.clone(),
            line: p.line,
            message: format!("paid_date {} is after the day judged ({}); pass --as-of to judge another day", p.paid, options.today),
        }
        .into());
    }
    // Held from reading the ledger to writing it back (a dry run writes nothing and reads a
    // ledger that is only ever replaced whole).
    let _writer = if options.dry_run { None } else { Some(ledger::lock(&options.ledger).map_err(AccessError::LedgerFile)?) };
    let mut ledger = Ledger::open(&options.ledger).map_err(AccessError::LedgerFile)?;
    let recorded = ledger
        .record(&file.payments, spec.pledge.as_ref())
        .map_err(|source| AccessError::Ledger { path: options.payments.clone(), source })?;
    let buyers = licenses::standings(&ledger.entries, |sold| covers(tier, sold), options.today);

    let hub = GatedAccess::connect(options.endpoint.as_deref(), options.patience)?;
    let mut requests = plan::HubRequests::new();
    for status in RequestStatus::ALL {
        for user in hub.list(&repo, status)? {
            requests.insert(user.to_ascii_lowercase(), (user, status));
        }
    }
    let plan = plan::plan(&buyers, &requests);

    let mut outcome = SyncOutcome {
        repo: repo.id(),
        endpoint: hub.endpoint().to_string(),
        today: options.today,
        dry_run: options.dry_run,
        payments: file.payments.len(),
        skipped: file.skipped,
        ledger: options.ledger.clone(),
        recorded,
        ledger_head: ledger.head().to_string(),
        plan,
        applied: 0,
    };
    if options.dry_run {
        return Ok(outcome);
    }
    // The sales first: they happened whatever the Hub says next.
    if !outcome.recorded.is_empty() {
        ledger.write().map_err(AccessError::LedgerFile)?;
    }
    let total = outcome.plan.changes.len();
    for change in &outcome.plan.changes {
        let done = match change.action {
            Action::Accept => hub.handle(&repo, &change.user, RequestStatus::Accepted, None),
            Action::Grant => hub.grant(&repo, &change.user),
            Action::Revoke => hub.handle(&repo, &change.user, RequestStatus::Rejected, Some(&change.reason)),
        };
        done.map_err(|source| AccessError::Partial { done: outcome.applied, total, source })?;
        outcome.applied += 1;
        log(&format!("done: {} {}", change.action.name(), change.user));
    }
    Ok(outcome)
}

impl fmt::Display for SyncOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let skipped = self.skipped.iter().map(|(s, n)| format!("{n} {s}")).collect::<Vec<_>>();
        let skipped = if skipped.is_empty() { String::new() } else { format!("; skipped, not payments: {}", skipped.join(", ")) };
        writeln!(f, "payments: {} read{skipped}", self.payments)?;
        let verb = if self.dry_run { "would add" } else { "added" };
        writeln!(
            f,
            "ledger {}: {verb} {} line(s); head {}",
            self.ledger.display(),
            self.recorded.len(),
            crate::hub::short(&self.ledger_head)
        )?;
        for e in &self.recorded {
            writeln!(
                f,
                "  {} {} {} {} {} {} (pledge {}% = {})",
                e.date,
                e.order_id,
                e.buyer,
                e.tier.name(),
                e.amount,
                e.currency,
                e.pledge_percent,
                e.pledge
            )?;
        }
        writeln!(f, "access to {} on {}, as of {}:", self.repo, self.endpoint, self.today)?;
        for c in &self.plan.changes {
            writeln!(f, "  {:<7} {}: {}", c.action.name(), c.user, c.reason)?;
        }
        for l in &self.plan.left {
            writeln!(f, "  {:<7} {}: {}", "-", l.user, l.reason)?;
        }
        let planned = self.plan.changes.len();
        if self.dry_run {
            writeln!(f, "dry run: {planned} change(s) planned; nothing was changed and the ledger was not written")
        } else if planned == 0 {
            writeln!(f, "nothing to change")
        } else {
            writeln!(f, "{} change(s) made", self.applied)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enterprise_covers_the_standard_release_not_the_reverse() {
        assert!(covers(Tier::Standard, Tier::Standard));
        assert!(covers(Tier::Standard, Tier::Enterprise));
        assert!(!covers(Tier::Enterprise, Tier::Standard));
    }
}
