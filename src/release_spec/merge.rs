//! How a child spec file is laid over its parent: a key the child sets replaces the parent's, a
//! key it sets to null drops the parent's, a key it leaves out keeps the parent's. Each layer
//! type in [`super::layer`] implements [`Merge`] with these helpers.

use std::collections::BTreeSet;

use serde::Deserialize;

/// Copies every field the child sets over the parent's value; a field the child sets to null
/// drops the parent's value (an optional key then takes its default, a required one is missing).
macro_rules! merge_options {
    ($parent:expr, $child:expr, $nulls:expr; $($field:ident),+ $(,)?) => {
        $(
            if $child.$field.is_some() {
                $parent.$field = $child.$field;
            } else if $nulls.has(stringify!($field)) {
                $parent.$field = None;
            }
        )+
    };
}
pub(super) use merge_options;

/// The dotted keys one spec file sets to null, seen from a section of it.
pub struct Nulls<'a> {
    prefix: String,
    keys: &'a BTreeSet<String>,
}

impl<'a> Nulls<'a> {
    pub fn new(keys: &'a BTreeSet<String>) -> Nulls<'a> {
        Nulls { prefix: String::new(), keys }
    }

    /// Whether the file sets `field` of this section to null.
    pub fn has(&self, field: &str) -> bool {
        self.keys.contains(&format!("{}{field}", self.prefix))
    }

    pub fn section(&self, name: &str) -> Nulls<'a> {
        Nulls { prefix: format!("{}{name}.", self.prefix), keys: self.keys }
    }
}

/// The dotted keys a spec file's YAML sets to null (`key: null`, `key: ~`, `key:`), found on
/// its plain YAML tree. Lists are values, not sections: nothing inside them counts.
pub fn null_keys(text: &str) -> BTreeSet<String> {
    fn walk(value: &serde_json::Value, prefix: &str, out: &mut BTreeSet<String>) {
        if let serde_json::Value::Object(map) = value {
            for (key, v) in map {
                let path = format!("{prefix}{key}");
                if v.is_null() {
                    out.insert(path);
                } else {
                    walk(v, &format!("{path}."), out);
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    // A file the typed parse accepted is plain YAML; if this reading fails, it sets nothing null.
    if let Ok(value) = serde_saphyr::from_str::<serde_json::Value>(text) {
        walk(&value, "", &mut out);
    }
    out
}

/// Reads a key that is present, null included, as `Some`: so a child spec can write `key: null`
/// (or `~`) to drop a file its parent names, which a missing key cannot say.
pub(super) fn explicit<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// Merges a nested section that is itself a layer; `section: null` drops the parent's.
pub(super) fn merge_section<T: Merge>(parent: &mut Option<T>, child: Option<T>, nulls: &Nulls, name: &str) {
    match (parent.as_mut(), child) {
        (Some(p), Some(c)) => p.merge(c, &nulls.section(name)),
        (None, Some(c)) => *parent = Some(c),
        (_, None) if nulls.has(name) => *parent = None,
        (_, None) => {}
    }
}

pub trait Merge {
    /// Lays `child` over `self`; `nulls` are the keys the child's file sets to null.
    fn merge(&mut self, child: Self, nulls: &Nulls);
}
