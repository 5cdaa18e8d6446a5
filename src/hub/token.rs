//! Where the Hub token comes from, said without ever saying what it is.
//!
//! hf-hub reads the token itself (HF_TOKEN, then the file at HF_TOKEN_PATH, then
//! $HF_HOME/token, unless HF_HUB_DISABLE_IMPLICIT_TOKEN is set). This module follows the same
//! order to name the source for the user, to hand hf-hub the token trimmed (it reads HF_TOKEN
//! raw), and to know the value so that [`redact`] can strip it from any text this tool prints.

use std::path::PathBuf;

use super::HubError;

/// The name of the source hf-hub will take the token from, if any.
pub fn source() -> Option<String> {
    resolve().map(|(source, _)| source)
}

/// Replaces the token, wherever it appears in `text`, with a fixed marker: the value as it was
/// set (spaces or a newline around it included) and as it is sent, which a server may echo
/// back (`Bearer` and all).
pub fn redact(text: &str) -> String {
    let mut out = text.to_string();
    for form in forms() {
        if form.len() >= 4 {
            out = out.replace(&form, "[token redacted]");
        }
    }
    out
}

/// Every spelling of the configured token that could reach a message, longest first.
fn forms() -> Vec<String> {
    let mut forms: Vec<String> = std::env::var("HF_TOKEN").into_iter().filter(|t| !t.trim().is_empty()).collect();
    forms.extend(resolve().map(|(_, token)| token));
    forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
    forms.dedup();
    forms
}

/// The token itself, trimmed as it is sent, for a request this tool makes (and for hf-hub,
/// which is given it rather than reading HF_TOKEN raw: a trailing newline there made it send
/// no Authorization header at all). A token with whitespace inside is refused, naming where it
/// came from and never what it is. Never print it.
pub(super) fn value() -> Result<Option<String>, HubError> {
    match resolve() {
        Some((source, token)) if token.chars().any(char::is_whitespace) => Err(HubError::Protocol(format!(
            "the Hub token from {source} has whitespace inside it (after its ends are trimmed): set it to the token alone"
        ))),
        found => Ok(found.map(|(_, token)| token)),
    }
}

fn hf_home() -> PathBuf {
    if let Some(home) = std::env::var_os("HF_HOME") {
        return PathBuf::from(home);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    cache.join("huggingface")
}

fn resolve() -> Option<(String, String)> {
    if std::env::var("HF_HUB_DISABLE_IMPLICIT_TOKEN").is_ok_and(|v| !v.is_empty()) {
        return None;
    }
    if let Ok(token) = std::env::var("HF_TOKEN") {
        if !token.trim().is_empty() {
            return Some(("HF_TOKEN".into(), token.trim().to_string()));
        }
    }
    let from_file = |path: PathBuf, name: String| {
        std::fs::read_to_string(&path).ok().map(|t| t.trim().to_string()).filter(|t| !t.is_empty()).map(|t| (name, t))
    };
    if let Some(path) = std::env::var_os("HF_TOKEN_PATH") {
        if let Some(found) = from_file(PathBuf::from(&path), format!("the file at HF_TOKEN_PATH ({})", PathBuf::from(&path).display())) {
            return Some(found);
        }
    }
    let stored = hf_home().join("token");
    from_file(stored.clone(), format!("the stored token file {}", stored.display()))
}
