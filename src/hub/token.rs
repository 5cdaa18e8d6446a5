//! Where the Hub token comes from, said without ever saying what it is.
//!
//! hf-hub reads the token itself (HF_TOKEN, then the file at HF_TOKEN_PATH, then
//! $HF_HOME/token, unless HF_HUB_DISABLE_IMPLICIT_TOKEN is set). This module follows the same
//! order only to name the source for the user, and to know the value so that [`redact`] can
//! strip it from any text this tool prints.

use std::path::PathBuf;

/// The name of the source hf-hub will take the token from, if any.
pub fn source() -> Option<String> {
    resolve().map(|(source, _)| source)
}

/// Replaces the token, wherever it appears in `text`, with a fixed marker.
pub fn redact(text: &str) -> String {
    match resolve() {
        Some((_, token)) if token.len() >= 4 => text.replace(&token, "[token redacted]"),
        _ => text.to_string(),
    }
}

/// The token itself, for a request this tool sends without hf-hub. Never print it.
pub(super) fn value() -> Option<String> {
    resolve().map(|(_, token)| token)
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
        if !token.is_empty() {
            return Some(("HF_TOKEN".into(), token));
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
