//! CSV cells that are safe to open in a spreadsheet. Excel, LibreOffice and Google Sheets run a
//! cell that begins with `=`, `+`, `-` or `@` as a formula (`=HYPERLINK(...)` from a reviewer's
//! export would be a live link in the gold file), and a leading tab or carriage return hides
//! such a start. Every CSV the tool writes passes its cells through [`safe_cell`].

use std::borrow::Cow;

/// The characters a spreadsheet reads a formula behind.
const FORMULA_START: [char; 6] = ['=', '+', '-', '@', '\t', '\r'];

/// `cell` as written, or, when it would start a formula, quoted as text with a leading `'` (the
/// quote spreadsheets themselves use). A plain negative number stays a number.
pub fn safe_cell(cell: &str) -> Cow<'_, str> {
    let formula = cell.starts_with(FORMULA_START);
    if !formula || is_plain_number(cell) {
        Cow::Borrowed(cell)
    } else {
        Cow::Owned(format!("'{cell}"))
    }
}

/// `-0.25`, `+3`: a sign, digits and at most one decimal point, nothing else.
fn is_plain_number(cell: &str) -> bool {
    let digits = cell.strip_prefix(['-', '+']).unwrap_or(cell);
    !digits.is_empty()
        && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
        && digits.matches('.').count() <= 1
        && digits.chars().any(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::safe_cell;

    #[test]
    fn formulas_are_quoted_and_numbers_are_not() {
        assert_eq!(safe_cell("=HYPERLINK(\"http://x\")"), "'=HYPERLINK(\"http://x\")");
        assert_eq!(safe_cell("=1+2"), "'=1+2");
        assert_eq!(safe_cell("+1+2"), "'+1+2");
        assert_eq!(safe_cell("-1+2"), "'-1+2");
        assert_eq!(safe_cell("@SUM(A1)"), "'@SUM(A1)");
        assert_eq!(safe_cell("\t=1"), "'\t=1");
        assert_eq!(safe_cell("\r=1"), "'\r=1");
        assert_eq!(safe_cell("-0.250000"), "-0.250000");
        assert_eq!(safe_cell("00000001_000.png"), "00000001_000.png");
        assert_eq!(safe_cell("Pleural_Thickening"), "Pleural_Thickening");
        assert_eq!(safe_cell("-"), "'-");
        assert_eq!(safe_cell(""), "");
    }
}
