//! Sentences and words, as the labeler matches them.

/// Splits a report into sentences at `.`, `?` and `!` followed by white space (or the end), and
/// at line breaks; a full stop between digits ("1.5 cm") does not end one. Empty pieces go.
pub fn sentences(report: &str) -> Vec<String> {
    let chars: Vec<char> = report.chars().collect();
    let mut out = Vec::new();
    let mut current = String::new();
    for (i, &c) in chars.iter().enumerate() {
        let next = chars.get(i + 1).copied();
        let ends = match c {
            '\n' | '\r' => true,
            '.' | '?' | '!' => next.is_none_or(char::is_whitespace),
            _ => false,
        };
        if c != '\n' && c != '\r' {
            current.push(c);
        }
        if ends {
            push_sentence(&mut out, &mut current);
        }
    }
    push_sentence(&mut out, &mut current);
    out
}

fn push_sentence(out: &mut Vec<String>, current: &mut String) {
    let trimmed = current.trim();
    if trimmed.chars().any(char::is_alphanumeric) {
        out.push(trimmed.to_string());
    }
    current.clear();
}

/// Lower-case words; `;` and `:` (they end a cue's scope) and `,` (it ends a side's reach) are
/// kept as words of their own, other punctuation separates words. "left-sided" is two words, as
/// its phrase is.
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if c.is_alphanumeric() {
            word.extend(c.to_lowercase());
            continue;
        }
        if !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
        if c == ';' || c == ':' || c == ',' {
            out.push(c.to_string());
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// Whether a report's word matches a phrase's word: equal, or the phrase's word plus a plural
/// "s" or "es".
pub fn word_matches(word: &str, phrase_word: &str) -> bool {
    word == phrase_word || word.strip_prefix(phrase_word).is_some_and(|rest| rest == "s" || rest == "es")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_split_at_stops_not_decimals() {
        assert_eq!(sentences("A 1.5 cm nodule. No effusion!\nHeart normal?  "), ["A 1.5 cm nodule.", "No effusion!", "Heart normal?"]);
        assert_eq!(sentences(" . \n"), Vec::<String>::new());
    }

    #[test]
    fn words_are_lower_case_and_keep_semicolons() {
        assert_eq!(words("Left-sided Effusion; no PTX, ok."), ["left", "sided", "effusion", ";", "no", "ptx", ",", "ok"]);
        assert!(word_matches("effusions", "effusion") && word_matches("masses", "mass") && !word_matches("effused", "effusion"));
    }
}
