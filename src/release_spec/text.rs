//! The characters a spec's text may hold. Its words go into the card, the Croissant file and
//! the prompts a model reads; a control character or a bidirectional override there shows one
//! thing and stores another (Trojan Source), so a spec holding one is refused, with the key.

use serde_json::Value;

use super::{ReleaseSpec, SpecError};

/// Characters that reorder text on screen without showing themselves: the bidirectional
/// embeddings, overrides and isolates, and the implicit marks.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

/// What is wrong with `c` in spec text, if anything (newlines and tabs are text).
fn refused(c: char) -> Option<&'static str> {
    if is_bidi_control(c) {
        Some("a bidirectional text control, which shows text in another order than it is stored")
    } else if c.is_control() && c != '\n' && c != '\t' {
        Some("a control character")
    } else {
        None
    }
}

/// Checks every string of the resolved spec.
pub fn check(spec: &ReleaseSpec) -> Result<(), SpecError> {
    let value = serde_json::to_value(spec).expect("the spec is plain data");
    let mut found = None;
    walk(&value, "", &mut found);
    match found {
        None => Ok(()),
        Some((key, c, why)) => {
            Err(SpecError::Invalid { at: spec.locate(&key), message: format!("holds U+{:04X}, {why}: remove it", c as u32) })
        }
    }
}

/// The first refused character under `value`, with the dotted key that holds it (a list's items
/// are named by the list's key).
fn walk(value: &Value, key: &str, found: &mut Option<(String, char, &'static str)>) {
    if found.is_some() {
        return;
    }
    match value {
        Value::String(s) => {
            if let Some((c, why)) = s.chars().find_map(|c| refused(c).map(|why| (c, why))) {
                *found = Some((key.to_string(), c, why));
            }
        }
        Value::Array(items) => items.iter().for_each(|v| walk(v, key, found)),
        Value::Object(map) => {
            for (k, v) in map {
                let child = if key.is_empty() { k.clone() } else { format!("{key}.{k}") };
                walk(v, &child, found);
            }
        }
        _ => {}
    }
}
