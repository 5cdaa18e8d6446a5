//! Text from outside the tool, set into the card's Markdown so that it reads as the text it is.
//! The card quotes a spec's words (the title, the prompts, a license name), a model's answers
//! (S3's reasoning, S4's reports) and names from a checkpoint; any of them may hold HTML, a
//! `javascript:` link or a right-to-left override. Every value the card's templates print goes
//! through [`text`] (the environment's formatter) unless the template marks it as Markdown the
//! tool wrote itself (`| safe`) or as a code span (`| code`).

// A spec holding a bidirectional control is refused when it is read; a model's answer may
// still hold one.
use crate::release_spec::is_bidi_control;

/// `value` as Markdown text: no HTML tag can open (`<` becomes `&lt;`), no inline link or link
/// reference definition can form (`](` and `]:` are escaped), bidirectional controls are
/// dropped. Text without those characters is unchanged.
pub fn text(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '<' => out.push_str("&lt;"),
            ']' if matches!(chars.peek(), Some('(' | ':')) => out.push_str("]\\"),
            c if is_bidi_control(c) => {}
            c => out.push(c),
        }
    }
    out
}

/// `value` as one inline code span: fenced by one more backtick than the longest run inside it
/// (padded with spaces when it starts or ends with one), on one line, bidirectional controls
/// dropped. Inside a code span nothing is Markdown or HTML, so nothing else needs escaping.
pub fn code(value: &str) -> String {
    let body: String = value.chars().filter(|c| !is_bidi_control(*c)).map(|c| if c == '\n' || c == '\r' { ' ' } else { c }).collect();
    let longest = body.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    let pad = if body.starts_with('`') || body.ends_with('`') { " " } else { "" };
    format!("{fence}{pad}{body}{pad}{fence}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_cannot_open_a_tag_or_a_link() {
        assert_eq!(text("<script>alert(1)</script>"), "&lt;script>alert(1)&lt;/script>");
        assert_eq!(text("[click](javascript:alert(1))"), "[click]\\(javascript:alert(1))");
        assert_eq!(text("[x]: javascript:alert(1)"), "[x]\\: javascript:alert(1)");
        assert_eq!(text("abc\u{202E}fed"), "abcfed");
        let plain = "Qwen/Qwen2-VL-2B-Instruct & friends: [0, 1] (a range)";
        assert_eq!(text(plain), plain, "ordinary text is left as it is");
    }

    #[test]
    fn code_spans_fence_around_backticks() {
        assert_eq!(code("s1a"), "`s1a`");
        assert_eq!(code("<answer>yes</answer>"), "`<answer>yes</answer>`");
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(code("`x`"), "`` `x` ``");
        assert_eq!(code("two\nlines\u{202E}"), "`two lines`");
    }
}
