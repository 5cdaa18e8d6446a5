//! What to change on the Hub: each buyer's standing against where their access request stands.
//!
//! | standing \ request | none  | pending | accepted | rejected |
//! |--------------------|-------|---------|----------|----------|
//! | licensed           | grant | accept  | -        | accept   |
//! | expired, refunded  | -     | -       | revoke   | -        |
//! | no payment on file | n/a   | -       | - (said) | -        |
//!
//! "Revoke" rejects the request, which takes access away; an expired buyer's new request stays
//! pending until they pay again. Accepted users with no payment on file were let in by hand (the
//! team, a contract) and are left alone, but listed.

use std::collections::BTreeMap;

use serde::Serialize;

use super::licenses::{Buyer, Standing};
use crate::hub::access::RequestStatus;

/// A change to make on the Hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Accept a pending or rejected request.
    Accept,
    /// Give access to a buyer who has not asked.
    Grant,
    /// Reject an accepted request: access ends.
    Revoke,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Accept => "accept",
            Action::Grant => "grant",
            Action::Revoke => "revoke",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// The username as the Hub spells it (as the payment does, for a grant).
    pub user: String,
    pub action: Action,
    pub reason: String,
}

/// A user the run leaves as they are, and why (only the cases a publisher should see).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Left {
    pub user: String,
    pub status: RequestStatus,
    pub reason: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct AccessPlan {
    pub changes: Vec<Change>,
    pub left: Vec<Left>,
}

/// Where requests stand on the Hub: lower-cased username -> (name as the Hub spells it, status).
pub type HubRequests = BTreeMap<String, (String, RequestStatus)>;

pub fn standing_text(standing: &Standing) -> String {
    match standing {
        Standing::Licensed { tier, until: Some(until), order } => format!("{} license, access ends {until} (order {order})", tier.name()),
        Standing::Licensed { tier, until: None, order } => format!("{} license, perpetual (order {order})", tier.name()),
        Standing::Expired { ended, order } => format!("license ended {ended} (order {order})"),
        Standing::Refunded { order, refund } => format!("order {order} refunded ({refund})"),
    }
}

pub fn plan(buyers: &BTreeMap<String, Buyer>, requests: &HubRequests) -> AccessPlan {
    use RequestStatus::*;
    let mut out = AccessPlan::default();
    for (key, buyer) in buyers {
        let request = requests.get(key);
        let user = request.map_or(buyer.name.clone(), |(name, _)| name.clone());
        let reason = standing_text(&buyer.standing);
        let action = match (buyer.standing.is_licensed(), request.map(|(_, s)| *s)) {
            (true, None) => Some(Action::Grant),
            (true, Some(Pending | Rejected)) => Some(Action::Accept),
            (false, Some(Accepted)) => Some(Action::Revoke),
            (false, Some(Pending)) => {
                out.left.push(Left { user: user.clone(), status: Pending, reason: format!("left pending: {reason}") });
                None
            }
            _ => None,
        };
        if let Some(action) = action {
            out.changes.push(Change { user, action, reason });
        }
    }
    for (key, (user, status)) in requests {
        if buyers.contains_key(key) {
            continue;
        }
        let reason = match status {
            Pending => "left pending: no payment on file",
            Accepted => "left accepted: no payment on file (access given outside this tool)",
            Rejected => continue,
        };
        out.left.push(Left { user: user.clone(), status: *status, reason: reason.into() });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release_spec::Tier;
    use chrono::NaiveDate;

    fn buyer(name: &str, licensed: bool) -> (String, Buyer) {
        let standing = if licensed {
            Standing::Licensed { tier: Tier::Standard, until: NaiveDate::from_ymd_opt(2027, 1, 1), order: format!("{name}-1") }
        } else {
            Standing::Expired { ended: NaiveDate::from_ymd_opt(2026, 1, 1).unwrap(), order: format!("{name}-1") }
        };
        (name.to_ascii_lowercase(), Buyer { name: name.into(), standing })
    }

    #[test]
    fn the_table_in_the_module_docs() {
        use RequestStatus::*;
        let buyers: BTreeMap<_, _> = [
            buyer("New", true),
            buyer("asker", true),
            buyer("back", true),
            buyer("holder", true),
            buyer("lapsed", false),
            buyer("gone", false),
            buyer("renewing", false),
        ]
        .into();
        let requests: HubRequests = [
            ("asker", Pending),
            ("back", Rejected),
            ("holder", Accepted),
            ("lapsed", Accepted),
            ("gone", Rejected),
            ("renewing", Pending),
            ("stranger", Pending),
            ("staff", Accepted),
            ("spammer", Rejected),
        ]
        .into_iter()
        .map(|(u, s)| (u.to_string(), (u.to_string(), s)))
        .collect();
        let plan = plan(&buyers, &requests);
        let changes: Vec<_> = plan.changes.iter().map(|c| (c.user.as_str(), c.action)).collect();
        assert_eq!(changes, [("asker", Action::Accept), ("back", Action::Accept), ("lapsed", Action::Revoke), ("New", Action::Grant)]);
        let left: Vec<_> = plan.left.iter().map(|l| l.user.as_str()).collect();
        assert_eq!(left, ["renewing", "staff", "stranger"]);
    }
}
