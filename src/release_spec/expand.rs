//! `${VAR}` and `${VAR:-default}` expansion, applied only to the keys the schema allows
//! (source paths), so a spec cannot pick up the environment by accident.

/// Why an expansion failed; the caller adds the file and key.
#[derive(Debug, PartialEq)]
pub enum ExpandError {
    Unset(String),
    Malformed(String),
}

pub fn expand(value: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(|| ExpandError::Malformed(value.to_string()))?;
        let body = &after[..end];
        let (name, default) = match body.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (body, None),
        };
        let valid = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit());
        if !valid {
            return Err(ExpandError::Malformed(value.to_string()));
        }
        match (lookup(name).filter(|v| !v.is_empty()), default) {
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => return Err(ExpandError::Unset(name.to_string())),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "NIH").then(|| "/data/nih".to_string())
    }

    #[test]
    fn expands_set_unset_and_defaults() {
        assert_eq!(expand("${NIH}/x", env).unwrap(), "/data/nih/x");
        assert_eq!(expand("${OTHER:-../fixtures}", env).unwrap(), "../fixtures");
        assert_eq!(expand("${NIH:-unused}", env).unwrap(), "/data/nih");
        assert_eq!(expand("plain", env).unwrap(), "plain");
        assert_eq!(expand("${OTHER}", env), Err(ExpandError::Unset("OTHER".into())));
        assert!(matches!(expand("${lower}", env), Err(ExpandError::Malformed(_))));
        assert!(matches!(expand("${NIH", env), Err(ExpandError::Malformed(_))));
    }
}
