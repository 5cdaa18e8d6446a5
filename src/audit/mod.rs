//! What an auditor runs against a published release: `verify --remote` checks the files on the
//! Hub against the release's own manifest there, and `rebuild --audit` rebuilds a release from
//! its build.lock and compares every byte.

pub mod rebuild;
pub mod remote;
