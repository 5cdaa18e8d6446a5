//! From merged layers to a complete, validated [`ReleaseSpec`]: one function per section.

use std::path::{Component, Path, PathBuf};

use super::expand::{expand, ExpandError};
use super::layer::*;
use super::merge::{Merge, Nulls};
use super::types::*;
use super::{diagnose, narrative};
use super::{locate, LoadedLayer, SpecError};
use super::{PledgeLayer, PledgeSpec};
use crate::vocab::{LABELS, SUPPORT_DEVICES};

/// Looks up where keys were set, to build errors that point at a file and line.
struct Resolver<'a> {
    chain: &'a [LoadedLayer],
}

impl Resolver<'_> {
    fn missing(&self, key: &str) -> SpecError {
        let chain = self.chain.iter().map(|l| l.path.display().to_string()).collect::<Vec<_>>().join(" <- ");
        let at = locate(self.chain, key);
        if self.set_to_null(&at) {
            return SpecError::Invalid { at, message: "is null, but the key is required: a spec can unset only optional keys".into() };
        }
        SpecError::Missing { at, chain }
    }
    /// Whether the file `at` points to sets its key to null.
    fn set_to_null(&self, at: &super::KeyLocation) -> bool {
        self.chain.iter().find(|l| l.path == at.file).is_some_and(|l| l.nulls.contains(&at.key))
    }
    fn invalid(&self, key: &str, message: impl Into<String>) -> SpecError {
        SpecError::Invalid { at: locate(self.chain, key), message: message.into() }
    }
    fn req<T>(&self, value: Option<T>, key: &str) -> Result<T, SpecError> {
        value.ok_or_else(|| self.missing(key))
    }
    /// The folder of the file that set `key`: relative paths resolve against it.
    fn base_dir(&self, key: &str) -> PathBuf {
        locate(self.chain, key).dir()
    }
    fn expand(&self, key: &str, value: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, SpecError> {
        expand(value, env).map_err(|e| match e {
            ExpandError::Unset(var) => {
                self.invalid(key, format!("environment variable {var} is not set (write ${{{var}:-default}} to give a default)"))
            }
            ExpandError::Malformed(v) => {
                self.invalid(key, format!("malformed `${{...}}` in {v:?}: expected ${{NAME}} or ${{NAME:-default}}"))
            }
        })
    }
    fn probability(&self, value: Option<f64>, key: &str, default: f64) -> Result<f64, SpecError> {
        let v = value.unwrap_or(default);
        if !(0.0..=1.0).contains(&v) {
            return Err(self.invalid(key, format!("expected a number between 0 and 1, got {v}")));
        }
        Ok(v)
    }
    /// A path relative to its root that must stay inside it.
    fn inside_root(&self, key: &str, value: String) -> Result<String, SpecError> {
        let path = Path::new(&value);
        let escapes = path.components().any(|c| matches!(c, Component::ParentDir | Component::RootDir | Component::Prefix(_)));
        if value.is_empty() || escapes {
            return Err(self.invalid(key, format!("{value:?} must be a relative path that stays inside its root")));
        }
        Ok(value)
    }
}

fn is_slug(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') && !s.starts_with('-')
}

/// A calendar date written YYYY-MM-DD: 2026-02-30 is not one.
fn is_date(s: &str) -> bool {
    s.len() == 10 && chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok()
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
}

fn is_version(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    parts.len() == 3 && parts.iter().all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
}

pub(super) fn resolve(chain: &[LoadedLayer], env: &dyn Fn(&str) -> Option<String>) -> Result<ReleaseSpec, SpecError> {
    let mut merged = SpecLayer::default();
    for loaded in chain.iter().rev() {
        merged.merge(loaded.layer.clone(), &Nulls::new(&loaded.nulls));
    }
    let r = Resolver { chain };
    // In file order, so the first error reported is the first a reader meets.
    let release = resolve_release(&r, merged.release)?;
    let source = resolve_source(&r, merged.source, env)?;
    let selection = resolve_selection(&r, merged.selection)?;
    let model = resolve_model(&r, merged.model, "model")?;
    let second_opinion = merged.second_opinion.map(|layer| resolve_model(&r, Some(layer), "second_opinion")).transpose()?;
    let prompts = resolve_prompts(&r, merged.prompts)?;
    let signal = resolve_signal(&r, merged.signal)?;
    if signal.joint_rule.is_some() && second_opinion.is_none() && signal.confident_learning.is_none() {
        return Err(r.invalid(
            "signal.joint_rule",
            "names a joint rule, which combines two families or the answers with confident learning, but the spec asks \
             neither a second_opinion nor signal.confident_learning",
        ));
    }
    if signal.confident_learning.is_some() && model.backend == Backend::Openai {
        return Err(r.invalid(
            "signal.confident_learning",
            "needs the model's image features, and an OpenAI-compatible server gives none: use a native backend, or run \
             `label-issues` on a features file made elsewhere",
        ));
    }
    let output = resolve_output(&r, merged.output, selection.trial.is_some())?;
    let card = resolve_card(&r, merged.card)?;
    let publish = resolve_publish(&r, merged.publish)?;
    let evaluation = match merged.evaluation {
        Some(EvaluationLayer { gold: Some(gold_file), format, against, review_plan }) => Some(EvaluationSpec {
            gold_file,
            format: format.unwrap_or_default(),
            against: against.unwrap_or_else(|| EXPERT_LABELS.to_string()),
            review_plan,
        }),
        Some(EvaluationLayer { gold: None, format, against, review_plan })
            if format.is_some() || against.is_some() || review_plan.is_some() =>
        {
            let key = if format.is_some() {
                "evaluation.format"
            } else if against.is_some() {
                "evaluation.against"
            } else {
                "evaluation.review_plan"
            };
            return Err(r.invalid(key, "is set but evaluation.gold names no gold file"));
        }
        _ => None,
    };
    let pledge = resolve_pledge(&r, merged.pledge, release.tier)?;
    let additions = check_additions(&r, merged.additions.unwrap_or_default(), &prompts, pledge.is_some())?;
    let croissant = super::croissant::resolve(merged.croissant).map_err(|(key, message)| r.invalid(key, message))?;
    Ok(ReleaseSpec {
        path: chain[0].path.clone(),
        layers: chain.to_vec(),
        release,
        source,
        selection,
        model,
        second_opinion,
        prompts,
        signal,
        output,
        card,
        publish,
        evaluation,
        audit: resolve_audit(&r, merged.audit)?,
        pledge,
        croissant,
        additions,
    })
}

/// The pledge is a promise about sales: a commercial tier's, with a schedule that checks.
fn resolve_pledge(r: &Resolver<'_>, layer: Option<PledgeLayer>, tier: Tier) -> Result<Option<PledgeSpec>, SpecError> {
    let Some(layer) = layer else { return Ok(None) };
    if !tier.is_commercial() {
        return Err(r.invalid("pledge", format!("is set but release.tier is {}: only sales carry a pledge", tier.name())));
    }
    let pledge = PledgeSpec { schedule: r.req(layer.schedule, "pledge.schedule")?, goal_percent: layer.goal_percent };
    pledge.check(is_date).map_err(|message| r.invalid("pledge", message))?;
    Ok(Some(pledge))
}

/// Additions and their sections come together: one without the other is a spec error.
fn check_additions(r: &Resolver<'_>, additions: Vec<Addition>, prompts: &PromptSet, pledge: bool) -> Result<Vec<Addition>, SpecError> {
    for (addition, present, key) in [
        (Addition::LesionLocation, prompts.location.is_some(), "prompts.location"),
        (Addition::ObservableSigns, prompts.signs.is_some(), "prompts.signs"),
        (Addition::Reasoning, prompts.reasoning.is_some(), "prompts.reasoning"),
        (Addition::ReportText, prompts.report.is_some(), "prompts.report"),
        (Addition::GivingPledge, pledge, "pledge"),
    ] {
        match (additions.contains(&addition), present) {
            (true, false) => return Err(r.invalid("additions", format!("{} needs a {key} section", addition.describe()))),
            (false, true) => return Err(r.invalid(key, format!("is set but additions does not list {}", addition.describe()))),
            _ => {}
        }
    }
    Ok(additions)
}

fn resolve_release(r: &Resolver<'_>, layer: Option<ReleaseLayer>) -> Result<ReleaseInfo, SpecError> {
    let rel = r.req(layer, "release")?;
    let release = ReleaseInfo {
        id: r.req(rel.id, "release.id")?,
        name: r.req(rel.name, "release.name")?,
        title: r.req(rel.title, "release.title")?,
        version: r.req(rel.version, "release.version")?,
        date: r.req(rel.date, "release.date")?,
        status: r.req(rel.status, "release.status")?,
        tier: r.req(rel.tier, "release.tier")?,
        adds: r.req(rel.adds, "release.adds")?,
    };
    if !is_slug(&release.id) {
        return Err(r.invalid("release.id", format!("{:?}: expected lowercase letters, digits and '-'", release.id)));
    }
    if !is_version(&release.version) {
        return Err(r.invalid("release.version", format!("{:?}: expected MAJOR.MINOR.PATCH", release.version)));
    }
    if !is_date(&release.date) {
        return Err(r.invalid("release.date", format!("{:?}: expected a date as YYYY-MM-DD", release.date)));
    }
    Ok(release)
}

fn resolve_source(r: &Resolver<'_>, layer: Option<SourceLayer>, env: &dyn Fn(&str) -> Option<String>) -> Result<SourceSpec, SpecError> {
    let src = r.req(layer, "source")?;
    let root_raw = r.req(src.root, "source.root")?;
    let root_as_written = r.expand("source.root", &root_raw, env)?;
    let root = r.base_dir("source.root").join(&root_as_written);
    let root = std::path::absolute(&root).unwrap_or(root);
    let data_entry = r.inside_root("source.data_entry", r.req(src.data_entry, "source.data_entry")?)?;
    let opt_inside = |key: &str, v: Option<Option<String>>| v.flatten().map(|v| r.inside_root(key, v)).transpose();
    let bbox = opt_inside("source.bbox", src.bbox)?;
    let train_val_list = opt_inside("source.train_val_list", src.train_val_list)?;
    let test_list = opt_inside("source.test_list", src.test_list)?;
    if train_val_list.is_some() != test_list.is_some() {
        return Err(r.invalid("source.test_list", "train_val_list and test_list go together: set both or neither"));
    }
    let images_raw = r.req(src.images, "source.images")?;
    let images = r.inside_root("source.images", r.expand("source.images", &images_raw, env)?)?;
    let expected_sha256 = src.sha256.unwrap_or_default();
    for (name, digest) in &expected_sha256 {
        if digest.len() != 64 || !digest.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()) {
            return Err(r.invalid("source.sha256", format!("{name}: expected 64 lowercase hex digits, got {digest:?}")));
        }
    }
    // Whether the root is the embedded sample is a fact of the files: `inputs` looks.
    let embedded_sample = false;
    let source =
        SourceSpec { root, root_as_written, data_entry, bbox, train_val_list, test_list, images, expected_sha256, embedded_sample };
    Ok(source)
}

fn resolve_selection(r: &Resolver<'_>, layer: Option<SelectionLayer>) -> Result<SelectionSpec, SpecError> {
    let sel = r.req(layer, "selection")?;
    let views = sel.views.unwrap_or_else(|| vec!["PA".into(), "AP".into()]);
    if let Some(bad) = views.iter().find(|v| !matches!(v.as_str(), "PA" | "AP")) {
        return Err(r.invalid("selection.views", format!("unknown view position {bad:?}: expected PA or AP")));
    }
    let curated_images = r.req(sel.curated_images, "selection.curated_images")?;
    if curated_images == 0 {
        return Err(r.invalid("selection.curated_images", "must be at least 1"));
    }
    let trial = match sel.trial {
        None => None,
        Some(t) => {
            let rows = r.req(t.rows, "selection.trial.rows")?;
            if rows == 0 {
                return Err(r.invalid("selection.trial.rows", "must be at least 1 (leave out selection.trial for no trial split)"));
            }
            let quotas = r.req(t.quotas, "selection.trial.quotas")?;
            for (class, share) in &quotas {
                if crate::vocab::TrustClass::parse(class).is_none() {
                    return Err(r.invalid(
                        "selection.trial.quotas",
                        format!("unknown trust class {class:?}: expected one of {}", crate::vocab::TrustClass::NAMES.join(", ")),
                    ));
                }
                if !(0.0..=1.0).contains(share) {
                    return Err(r.invalid("selection.trial.quotas", format!("{class}: share {share} is not in [0, 1]")));
                }
            }
            let total: f64 = quotas.values().sum();
            if (total - 1.0).abs() > 1e-9 {
                return Err(r.invalid("selection.trial.quotas", format!("shares must add up to 1, they add up to {total}")));
            }
            Some(TrialSpec { rows, quotas })
        }
    };
    let images = match (sel.images, sel.images_sha256) {
        (Some(file), Some(sha256)) if is_sha256(&sha256) => Some(ImageListSpec { file, sha256 }),
        (Some(_), Some(bad)) => {
            return Err(r.invalid("selection.images_sha256", format!("{bad:?} is not a sha256 (64 lowercase hex digits)")))
        }
        (Some(_), None) => return Err(r.invalid("selection.images", "names a list but selection.images_sha256 does not pin it")),
        (None, Some(_)) => return Err(r.invalid("selection.images_sha256", "is set but selection.images names no list")),
        (None, None) => None,
    };
    let selection = SelectionSpec {
        images,
        seed: r.req(sel.seed, "selection.seed")?,
        curated_images,
        expected_rows: sel.expected_rows.flatten(),
        rows: sel.rows.unwrap_or(RowPolicy::NihAsserted),
        views,
        trial,
    };
    Ok(selection)
}

/// `model:`, or `second_opinion:` (the same keys, `section` naming which in errors).
fn resolve_model(r: &Resolver<'_>, layer: Option<ModelLayer>, section: &str) -> Result<ModelSpec, SpecError> {
    let key = |name: &str| format!("{section}.{name}");
    let m = r.req(layer, section)?;
    let backend = r.req(m.backend, &key("backend"))?;
    let id: String = r.req(m.id.clone(), &key("id"))?;
    let revision: String = r.req(m.revision.clone(), &key("revision"))?;
    // A local directory is resolved against the spec's folder; `inputs` checks that it exists
    // and looks for a Hub model in the Hugging Face cache.
    let dir = match &m.path {
        Some(path) if backend.is_native() => Some(r.base_dir(&key("path")).join(path)),
        _ => None,
    };
    let commit = None;
    let served = resolve_served(r, backend, &m, section)?;
    let images_per_pass = match m.images_per_pass {
        Some(_) if !backend.is_native() => return Err(r.invalid(&key("images_per_pass"), format!("is for {section}.backend native only"))),
        Some(n) => match super::types::images_per_pass_problem(n) {
            Some(problem) => return Err(r.invalid(&key("images_per_pass"), problem)),
            None => n,
        },
        None => 1,
    };
    let model = ModelSpec {
        backend,
        path: m.path.clone(),
        dir,
        commit,
        id,
        revision,
        weight_license: r.req(m.weight_license, &key("weight_license"))?,
        demo_weights: m.demo_weights,
        dtype: m.dtype.unwrap_or(Dtype::Auto),
        device: m.device.unwrap_or(DevicePolicy::Auto),
        max_pixels: m.max_pixels,
        min_pixels: m.min_pixels,
        thinking: m.thinking.unwrap_or_default(),
        served,
        images_per_pass,
    };
    Ok(model)
}

/// The `openai` backend's keys: required with it, refused without it.
fn resolve_served(r: &Resolver<'_>, backend: Backend, m: &ModelLayer, section: &str) -> Result<Option<ServedModel>, SpecError> {
    let key = |name: &str| format!("{section}.{name}");
    if backend != Backend::Openai {
        for (set, name) in [
            (m.endpoint.is_some(), key("endpoint")),
            (m.family.is_some(), key("family")),
            (m.server.is_some(), key("server")),
            (m.served_name.is_some(), key("served_name")),
            (m.answer_token_ids.is_some(), key("answer_token_ids")),
            (m.concurrency.is_some(), key("concurrency")),
            (m.timeout_s.is_some(), key("timeout_s")),
        ] {
            if set {
                return Err(r.invalid(&name, format!("is for {section}.backend openai only")));
            }
        }
        return Ok(None);
    }
    if m.path.is_some() {
        return Err(r.invalid(&key("path"), "backend openai scores through model.endpoint: the model is not loaded here"));
    }
    let endpoint = r.req(m.endpoint.clone(), &key("endpoint"))?;
    let endpoint = endpoint.trim_end_matches('/').to_string();
    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) || !endpoint.ends_with("/v1") {
        return Err(r.invalid(&key("endpoint"), format!("{endpoint:?}: expected the server's base URL, http(s)://HOST[:PORT]/v1")));
    }
    let family = r.req(m.family.clone(), &key("family"))?;
    if bpals_vlm::Family::from_name(&family).is_none() {
        return Err(r.invalid(&key("family"), format!("{family:?}: expected one of {}", bpals_vlm::Family::supported())));
    }
    let concurrency = m.concurrency.unwrap_or(16);
    if concurrency == 0 {
        return Err(r.invalid(&key("concurrency"), "must be at least 1"));
    }
    if let Some(name) = m.served_name.as_deref().filter(|n| n.trim().is_empty() || n.trim() != *n) {
        return Err(r.invalid(&key("served_name"), format!("{name:?}: expected the served model's name, without surrounding spaces")));
    }
    Ok(Some(ServedModel {
        endpoint,
        family,
        server: m.server.unwrap_or_default(),
        served_name: m.served_name.clone(),
        answer_token_ids: m.answer_token_ids,
        concurrency,
        timeout_s: m.timeout_s.unwrap_or(120),
    }))
}

fn resolve_prompts(r: &Resolver<'_>, layer: Option<PromptsLayer>) -> Result<PromptSet, SpecError> {
    let p = r.req(layer, "prompts")?;
    let labels = r.req(p.labels, "prompts.labels")?;
    for (label, questions) in &labels {
        if !LABELS.contains(&label.as_str()) {
            return Err(r.invalid("prompts.labels", format!("unknown label {label:?}: expected one of {}", LABELS.join(", "))));
        }
        if questions.is_empty() || questions.iter().any(|q| q.trim().is_empty()) {
            return Err(r.invalid("prompts.labels", format!("{label}: needs at least one non-empty question")));
        }
    }
    if let Some(missing) = LABELS.iter().find(|l| !labels.contains_key(**l)) {
        return Err(r.invalid("prompts.labels", format!("no questions for label {missing:?}: every label needs some")));
    }
    let support_devices = p.support_devices.unwrap_or_default();
    for (device, questions) in &support_devices {
        if !SUPPORT_DEVICES.contains(&device.as_str()) {
            return Err(
                r.invalid("prompts.support_devices", format!("unknown device {device:?}: expected one of {}", SUPPORT_DEVICES.join(", ")))
            );
        }
        if questions.is_empty() {
            return Err(r.invalid("prompts.support_devices", format!("{device}: needs at least one question")));
        }
    }
    let location = p.location.map(diagnose::resolve_location).transpose().map_err(|(key, message)| r.invalid(key, message))?;
    let signs = p.signs.map(diagnose::resolve_signs).transpose().map_err(|(key, message)| r.invalid(key, message))?;
    let reasoning = p.reasoning.map(narrative::resolve_reasoning).transpose().map_err(|(key, message)| r.invalid(key, message))?;
    let report = p.report.map(narrative::resolve_report).transpose().map_err(|(key, message)| r.invalid(key, message))?;
    let prompts = PromptSet { version: r.req(p.version, "prompts.version")?, labels, support_devices, location, signs, reasoning, report };
    Ok(prompts)
}

fn resolve_signal(r: &Resolver<'_>, layer: Option<SignalLayer>) -> Result<SignalSpec, SpecError> {
    let s = layer.unwrap_or_default();
    let signal = SignalSpec {
        trusted_min_agreement: r.probability(s.trusted_min_agreement, "signal.trusted_min_agreement", 0.7)?,
        review_min_agreement: r.probability(s.review_min_agreement, "signal.review_min_agreement", 0.45)?,
        suspect_min_agreement: r.probability(s.suspect_min_agreement, "signal.suspect_min_agreement", 0.2)?,
        hard_case_margin: r.probability(s.hard_case_margin, "signal.hard_case_margin", 0.1)?,
        low_consistency_below: r.probability(s.low_consistency_below, "signal.low_consistency_below", 0.67)?,
        device_present_min: r.probability(s.device_present_min, "signal.device_present_min", 0.5)?,
        finding_present_min: r.probability(s.finding_present_min, "signal.finding_present_min", 0.5)?,
        device_confounded_labels: s.device_confounded_labels.unwrap_or_default(),
        tau: s.tau.unwrap_or(3.0),
        calibration: s.calibration.filter(|file| file != "none"),
        joint_rule: s.joint_rule.filter(|file| file != "none"),
        confident_learning: s.confident_learning.map(|c| {
            let defaults = ConfidentLearningSpec::default();
            ConfidentLearningSpec {
                features: c.features.unwrap_or(defaults.features),
                folds: c.folds.unwrap_or(defaults.folds),
                fold_seed: c.fold_seed.unwrap_or(defaults.fold_seed),
                grid: c.grid.unwrap_or(defaults.grid),
            }
        }),
    };
    if let Some(problem) = signal.confident_learning.as_ref().and_then(|c| c.problem()) {
        return Err(r.invalid("signal.confident_learning", problem));
    }
    if !(signal.trusted_min_agreement > signal.review_min_agreement && signal.review_min_agreement > signal.suspect_min_agreement) {
        return Err(r.invalid(
            "signal.trusted_min_agreement",
            "thresholds must satisfy trusted_min_agreement > review_min_agreement > suspect_min_agreement",
        ));
    }
    if !(signal.tau.is_finite() && signal.tau > 0.0) {
        return Err(r.invalid("signal.tau", format!("expected a positive number, got {}", signal.tau)));
    }
    if let Some(bad) = signal.device_confounded_labels.iter().find(|l| !LABELS.contains(&l.as_str())) {
        return Err(r.invalid("signal.device_confounded_labels", format!("unknown label {bad:?}")));
    }
    Ok(signal)
}

fn resolve_output(r: &Resolver<'_>, layer: Option<OutputLayer>, has_trial: bool) -> Result<OutputSpec, SpecError> {
    let o = r.req(layer, "output")?;
    let splits = r.req(o.splits, "output.splits")?;
    if splits.is_empty() {
        return Err(r.invalid("output.splits", "name at least one split (full, trial)"));
    }
    if (1..splits.len()).any(|i| splits[..i].contains(&splits[i])) {
        return Err(r.invalid("output.splits", "a split is named twice"));
    }
    if splits.contains(&Split::Trial) && !has_trial {
        return Err(r.invalid("output.splits", "the trial split needs a selection.trial section"));
    }
    let compression = o.compression.unwrap_or(Compression::Zstd);
    let compression_level = match (compression, o.compression_level) {
        (Compression::Zstd, None) => Some(3),
        (Compression::Zstd, Some(l)) if (1..=22).contains(&l) => Some(l),
        (Compression::Zstd, Some(l)) => return Err(r.invalid("output.compression_level", format!("zstd levels run 1..=22, got {l}"))),
        (_, None) => None,
        (_, Some(_)) => return Err(r.invalid("output.compression_level", "only zstd takes a level")),
    };
    let output = OutputSpec {
        splits,
        rows_per_shard: o.rows_per_shard.unwrap_or(500_000),
        row_group_rows: o.row_group_rows.unwrap_or(100_000),
        compression,
        compression_level,
    };
    for (key, value) in [("output.rows_per_shard", output.rows_per_shard), ("output.row_group_rows", output.row_group_rows)] {
        if value == 0 {
            return Err(r.invalid(key, "must be at least 1"));
        }
    }
    Ok(output)
}

fn resolve_card(r: &Resolver<'_>, layer: Option<CardLayer>) -> Result<CardSpec, SpecError> {
    let c = r.req(layer, "card")?;
    let templates_raw = r.req(c.templates, "card.templates")?;
    let templates_dir = r.base_dir("card.templates").join(templates_raw);
    let template = r.inside_root("card.template", c.template.unwrap_or_else(|| "card.md.j2".into()))?;
    let card = CardSpec { templates_dir, template, extra_sections: c.extra_sections.unwrap_or_default() };
    for section in &card.extra_sections {
        r.inside_root("card.extra_sections", section.clone())?;
    }
    Ok(card)
}

fn resolve_publish(r: &Resolver<'_>, layer: Option<PublishLayer>) -> Result<PublishSpec, SpecError> {
    let pb = r.req(layer, "publish")?;
    let repo = r.req(pb.repo, "publish.repo")?;
    let valid_repo = repo.split_once('/').is_some_and(|(org, name)| {
        let ok = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        ok(org) && ok(name)
    });
    if !valid_repo {
        return Err(r.invalid("publish.repo", format!("{repo:?}: expected ORG/NAME")));
    }
    let tag = pb.tag.unwrap_or_else(|| "{id}-v{version}".into());
    let leftover = tag.replace("{id}", "").replace("{version}", "");
    if leftover.contains(['{', '}']) {
        return Err(r.invalid("publish.tag", format!("{tag:?}: only {{id}} and {{version}} may be substituted")));
    }
    let publish = PublishSpec { repo, visibility: pb.visibility.unwrap_or(Visibility::Public), tag, public_key: pb.public_key };
    Ok(publish)
}

fn resolve_audit(r: &Resolver<'_>, layer: Option<AuditLayer>) -> Result<AuditSpec, SpecError> {
    let tolerance = layer.and_then(|a| a.logit_tolerance).unwrap_or(1e-3);
    if !(tolerance.is_finite() && tolerance >= 0.0) {
        return Err(r.invalid("audit.logit_tolerance", format!("expected a number >= 0, got {tolerance}")));
    }
    Ok(AuditSpec { logit_tolerance: tolerance })
}
