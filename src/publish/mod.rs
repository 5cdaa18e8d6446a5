//! `bpals-release publish`: one verified release, one commit on the Hub, one tag.
//!
//! The sequence is built so that a failure at any point leaves either the old main branch or the
//! complete release, and a rerun finishes the job: the plan is computed against the branch head,
//! the commit names that head as its parent (so a retried or concurrent commit cannot land
//! twice), and the tag is created last, only once main holds exactly the release's files.

mod main_branch;
pub mod plan;

use std::path::Path;

use serde::Deserialize;

use crate::hub::{self, token, Hub, HubError, RepoRef};
use crate::manifest::{self, BuildLock, Manifest, LOCK_FILE};
use crate::release_spec::Visibility;
pub use plan::{FileStatus, PublishPlan, TagState};

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("refusing to publish: {0}")]
    Refused(String),
    #[error(transparent)]
    Release(#[from] manifest::ManifestError),
    #[error("{}: key `spec.publish` is not what this version of the tool writes", path.display())]
    LockedPublish {
        path: std::path::PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(transparent)]
    Hub(#[from] HubError),
    #[error(transparent)]
    Signing(#[from] crate::signing::SigningError),
}

#[derive(Debug, Clone)]
pub struct PublishOptions {
    /// ORG/NAME; the spec's `publish.repo` when None.
    pub repo: Option<String>,
    pub endpoint: Option<String>,
    pub dry_run: bool,
    /// Let a demo build through, to an endpoint other than the public Hub only.
    pub allow_demo: bool,
    /// The retries, the stall that fails a request and the deadline that fails a call.
    pub patience: hub::Patience,
    /// The publisher's public key: a signed release is checked with it before any upload.
    pub public_key: Option<crate::signing::PublicKey>,
    /// Let the release commit delete files on main that are not a bpals release's.
    pub replace_foreign_files: bool,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct PublishOutcome {
    /// The release directory published.
    pub dir: std::path::PathBuf,
    pub dry_run: bool,
    pub plan: PublishPlan,
    /// The commit made, if one was needed.
    pub commit: Option<String>,
    /// The commit the tag names.
    pub tagged: Option<String>,
}

impl std::fmt::Display for PublishOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plan = &self.plan;
        if self.dry_run {
            return writeln!(f, "dry run: nothing was changed on {}", plan.endpoint);
        }
        let commit = self.commit.as_deref().map_or("no new commit".to_string(), |c| format!("commit {}", crate::hub::short(c)));
        let tagged = self.tagged.as_deref().map(crate::hub::short).unwrap_or("-");
        writeln!(f, "published {} to {} ({commit}); tag {} names {tagged}", self.dir.display(), plan.repo, plan.tag)
    }
}

/// What the release's spec says about publishing, read back from build.lock.
#[derive(Deserialize)]
struct LockedPublish {
    repo: String,
    visibility: Visibility,
    tag: String,
}

pub fn publish(dir: &Path, options: &PublishOptions, log: &dyn Fn(&str)) -> Result<PublishOutcome, PublishError> {
    let manifest = Manifest::read(dir)?;
    let lock = BuildLock::read(dir)?;
    let locked: LockedPublish = serde_json::from_value(lock.spec["publish"].clone())
        .map_err(|source| PublishError::LockedPublish { path: dir.join(LOCK_FILE), source })?;

    // Only a release that verifies goes out.
    let verified = manifest::verify(dir)?;
    if !verified.ok() {
        let problems: Vec<String> = verified.problems.iter().map(|p| format!("  {p}")).collect();
        return Err(PublishError::Refused(format!("{} does not verify against its manifest:\n{}", dir.display(), problems.join("\n"))));
    }
    // The spec's publisher key, carried by the release, stands in when no --public-key is given;
    // a release whose spec names one must be signed by it.
    let named_key = if lock.spec["publish"]["public_key"].is_object() {
        let path = dir.join(crate::signing::PUBLISHER_KEY_FILE);
        Some(crate::signing::PublicKey::load(&path)?)
    } else {
        None
    };
    if named_key.is_some() && !crate::signing::is_signed(dir) {
        return Err(PublishError::Refused(format!(
            "its spec names a publisher key (publish.public_key) but {} is not signed: `bpals-release sign {} --key KEY.pem`",
            dir.display(),
            dir.display()
        )));
    }
    check_signature(dir, options.public_key.as_ref().or(named_key.as_ref()), log)?;

    let hub = Hub::connect(options.endpoint.as_deref(), options.patience)?;
    if manifest.is_demo() {
        let reasons = manifest.demo_reasons.iter().map(|r| format!("  - {r}")).collect::<Vec<_>>().join("\n");
        if !options.allow_demo {
            return Err(PublishError::Refused(format!(
                "this is a demo build:\n{reasons}\nBuild from real inputs with a real model, or pass --allow-demo with a staging --endpoint."
            )));
        }
        if hub.is_public_hub() {
            return Err(PublishError::Refused(format!(
                "--allow-demo needs an --endpoint other than the public Hub ({}); demo builds never go to it:\n{reasons}",
                hub.endpoint
            )));
        }
        log(&format!("DEMO BUILD: publishing to {} because --allow-demo was given", hub.endpoint));
    }
    if manifest.tier != "trial" && locked.visibility == Visibility::Public {
        return Err(PublishError::Refused(format!(
            "tier {} is commercial; its spec must set publish.visibility to gated or private, not public",
            manifest.tier
        )));
    }
    let repo = RepoRef::parse(options.repo.as_deref().unwrap_or(&locked.repo))?;
    if repo.revision.is_some() {
        return Err(PublishError::Refused(format!("--repo {}: publish always commits to main; give ORG/NAME only", repo.id())));
    }
    let tag = locked.tag.replace("{id}", &manifest.release_id).replace("{version}", &manifest.version);
    let visibility = match locked.visibility {
        Visibility::Public => "public",
        Visibility::Gated => "gated (manual approval)",
        Visibility::Private => "private",
    };
    match token::source() {
        Some(source) => log(&format!("token: from {source}")),
        None if options.dry_run => log("token: none configured (a dry run reads public repos only)"),
        None => {
            return Err(PublishError::Refused(
                "no Hub token: set HF_TOKEN, or HF_TOKEN_PATH, or store one in $HF_HOME/token (`hf auth login`)".into(),
            ))
        }
    }

    let remote = hub.repo(&repo)?;
    let remote_files = match &remote {
        Some(r) => Some(hub.files(&repo, &r.head)?),
        None => None,
    };
    let tags = if remote.is_some() { hub.tags(&repo)? } else { Default::default() };
    let (files, removed) = plan::compute(&hub, &repo, dir, &manifest, remote.as_ref().map(|r| r.head.as_str()).zip(remote_files.as_ref()))?;
    let mut plan = PublishPlan {
        repo: repo.id(),
        endpoint: hub.endpoint.clone(),
        visibility: visibility.into(),
        create_repo: remote.is_none(),
        parent: remote.as_ref().map(|r| r.head.clone()),
        files,
        removed,
        tag: tag.clone(),
        tag_state: tags.get(&tag).map_or(TagState::Missing, |c| TagState::Exists { commit: c.clone() }),
    };
    log(&plan.render());
    if let (Some(remote), Some(files)) = (&remote, &remote_files) {
        let foreign = main_branch::foreign_files(&hub, &repo, &remote.head, files, &plan.removed)?;
        if !foreign.is_empty() {
            if !options.replace_foreign_files {
                return Err(main_branch::refuse_foreign(&repo, &foreign));
            }
            log(&format!(
                "--replace-foreign-files: the release commit deletes {} that no bpals release lists",
                main_branch::files(foreign.len())
            ));
        }
    }

    // A published version is immutable: its tag may only ever name these exact files.
    if let TagState::Exists { commit } = &plan.tag_state {
        if Some(commit) != plan.parent.as_ref() || plan.changes() {
            let at_tag = hub.files(&repo, commit)?;
            let (tagged_files, tagged_removed) = plan::compute(&hub, &repo, dir, &manifest, Some((commit.as_str(), &at_tag)))?;
            if !tagged_removed.is_empty() || tagged_files.iter().any(|f| f.status != FileStatus::Unchanged) {
                return Err(PublishError::Refused(format!(
                    "tag {tag} already names commit {} with different files; a published version never changes: bump release.version",
                    hub::short(commit)
                )));
            }
        }
    }
    if options.dry_run {
        return Ok(PublishOutcome { dir: dir.to_path_buf(), dry_run: true, plan, commit: None, tagged: None });
    }

    let private = locked.visibility == Visibility::Private;
    let gated = locked.visibility == Visibility::Gated;
    let parent = match &remote {
        Some(r) => {
            if (private && !r.private) || (gated && !r.gated && !r.private) {
                log(&format!("settings: making {} {visibility} as its spec requires", repo.id()));
                hub.restrict(&repo, private, gated)?;
            } else if locked.visibility == Visibility::Public && (r.private || r.gated) {
                log(&format!(
                    "note: {} is {} on the Hub; the spec says public; left as it is",
                    repo.id(),
                    if r.private { "private" } else { "gated" }
                ));
            }
            r.head.clone()
        }
        None => {
            log(&format!("creating dataset repo {} ({visibility})", repo.id()));
            hub.create_repo(&repo, private)?;
            if gated {
                hub.restrict(&repo, false, true)?;
            }
            let created =
                hub.repo(&repo)?.ok_or_else(|| HubError::Protocol(format!("{} was created but cannot be read back", repo.id())))?;
            // A new repo starts with the Hub's own commit (.gitattributes): plan against it.
            let initial = hub.files(&repo, &created.head)?;
            let (files, removed) = plan::compute(&hub, &repo, dir, &manifest, Some((created.head.as_str(), &initial)))?;
            plan.files = files;
            plan.removed = removed;
            plan.parent = Some(created.head.clone());
            created.head
        }
    };

    let changed = plan.files.iter().any(|f| f.status != FileStatus::Unchanged) || !plan.removed.is_empty();
    let head = if changed {
        let mut operations: Vec<hf_hub::repository::CommitOperation> = plan
            .files
            .iter()
            .filter(|f| f.status != FileStatus::Unchanged)
            .map(|f| hf_hub::repository::CommitOperation::add_file(f.path.clone(), dir.join(&f.path)))
            .collect();
        operations.extend(plan.removed.iter().map(|p| hf_hub::repository::CommitOperation::Delete { path_in_repo: p.clone() }));
        let (count, bytes) = plan.files.iter().filter(|f| f.status != FileStatus::Unchanged).fold((0, 0), |(n, b), f| (n + 1, b + f.bytes));
        log(&format!("uploading {count} files ({bytes} bytes) and {} removals in one commit", plan.removed.len()));
        let lock_sha = crate::hashing::sha256_hex(&std::fs::read(dir.join(LOCK_FILE)).unwrap_or_default());
        let message = format!("Release {} {}", manifest.release_id, manifest.version);
        let description =
            format!("Built by {} {} ({}); build.lock sha256 {lock_sha}.", lock.tool.name, lock.tool.version, lock.tool.commit);
        let commit = hub.commit(&repo, operations, &message, &description, &parent, bytes).map_err(|e| {
            // Where main stands now says what happened (read once; a failure to read leaves the
            // explanation for both cases).
            let now = hub.repo(&repo).ok().flatten().map(|r| r.head);
            explain_commit_failure(e, &parent, now.as_deref())
        })?;
        let commit = match commit {
            Some(c) => c,
            None => hub.repo(&repo)?.map(|r| r.head).ok_or_else(|| HubError::Protocol("the repo vanished after the commit".into()))?,
        };
        log(&format!("committed {}", hub::short(&commit)));
        Some(commit)
    } else {
        log("main already holds these exact files: no commit");
        None
    };
    let release_commit = head.clone().unwrap_or(parent);
    main_branch::check_release_commit(&hub, &repo, dir, &manifest, &release_commit)?;

    let tagged = match &plan.tag_state {
        TagState::Exists { commit } => commit.clone(),
        TagState::Missing => {
            hub.create_tag(&repo, &tag, &release_commit, &format!("Release {} {}", manifest.release_id, manifest.version))?;
            log(&format!("tagged {} as {tag}", hub::short(&release_commit)));
            release_commit
        }
    };
    Ok(PublishOutcome { dir: dir.to_path_buf(), dry_run: false, plan, commit: head, tagged: Some(tagged) })
}

/// A signed release goes out only with a signature that holds for these exact files.
fn check_signature(dir: &Path, key: Option<&crate::signing::PublicKey>, log: &dyn Fn(&str)) -> Result<(), PublishError> {
    if !crate::signing::is_signed(dir) {
        if key.is_some() {
            return Err(PublishError::Refused(format!(
                "--public-key was given but {} is not signed: sign it first (`bpals-release sign {} --key KEY.pem`)",
                dir.display(),
                dir.display()
            )));
        }
        return Ok(());
    }
    let Some(key) = key else {
        return Err(PublishError::Refused(format!(
            "{} is signed: pass --public-key KEY.pub.pem so that its signature is checked before anything is uploaded",
            dir.display()
        )));
    };
    let report = crate::signing::check_dir(dir, key)?;
    if !report.ok() {
        return Err(PublishError::Refused(format!("its signature does not hold for these files:\n{}", report.problems.join("\n"))));
    }
    log(&format!("signature: {} files signed by key {}", report.files_signed, report.fingerprint));
    Ok(())
}

/// A refused commit usually means main moved: another push, or an earlier attempt of this very
/// commit that was applied although its answer was lost. `now`, main's head read after the
/// refusal, says which case this is; a rerun sorts out both.
fn explain_commit_failure(error: HubError, parent: &str, now: Option<&str>) -> HubError {
    match error {
        HubError::Call { action, source } => {
            let parent = hub::short(parent);
            let what = match now {
                Some(head) if head == parent || hub::short(head) == parent => {
                    format!("main is still at {parent}: nothing of this commit landed (a commit lands whole or not at all)")
                }
                Some(head) => format!(
                    "main has moved from {parent} to {}: an earlier attempt of this commit whose answer was lost, or another \
                     push, landed there",
                    hub::short(head)
                ),
                None => format!("a commit lands whole or not at all; if main moved past {parent}, an earlier attempt may have landed"),
            };
            HubError::Call {
                action: format!("{action} ({what}; run publish again: it compares main's files with the release's and only tags them)"),
                source,
            }
        }
        other => other,
    }
}
