//! Who to cite: the release itself and NIH's ChestX-ray14, as one set of facts that the card
//! and `croissant.json` both render (plain text, BibTeX).

use serde::Serialize;

/// A work to cite.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Citation {
    /// The BibTeX entry type and key.
    pub kind: &'static str,
    pub key: &'static str,
    /// Authors as BibTeX writes them (`A and B`); an organisation in braces.
    pub author: &'static str,
    pub title: &'static str,
    pub year: u32,
    /// `howpublished` for a `@misc`, `booktitle` for an `@inproceedings`.
    pub venue: &'static str,
    pub pages: Option<&'static str>,
    /// The reference as a reader sees it, in the card.
    pub text: &'static str,
}

/// The release: the publisher's citation.
pub const RELEASE: Citation = Citation {
    kind: "misc",
    key: "o5i2026cxr14bpals",
    author: "{O5I}",
    title: "CXR14-BPALS: An Independent Label-Quality Signal for NIH ChestX-ray14",
    year: 2026,
    venue: "Hugging Face Datasets",
    pages: None,
    text: "O5I (2026). *CXR14-BPALS: An Independent Label-Quality Signal for NIH ChestX-ray14.* Hugging Face Datasets.",
};

/// NIH ChestX-ray14's paper, which NIH's terms ask every user to cite.
pub const NIH: Citation = Citation {
    kind: "inproceedings",
    key: "wang2017chestxray8",
    author: "Wang, X. and Peng, Y. and Lu, L. and Lu, Z. and Bagheri, M. and Summers, R. M.",
    title: "ChestX-ray8: Hospital-scale Chest X-ray Database and Benchmarks on Weakly-Supervised Classification and Localization of Common Thorax Diseases",
    year: 2017,
    venue: "IEEE Conference on Computer Vision and Pattern Recognition (CVPR)",
    pages: Some("3462--3471"),
    text: "Wang X, Peng Y, Lu L, Lu Z, Bagheri M, Summers RM. ChestX-ray8: Hospital-scale Chest X-ray Database and Benchmarks on Weakly-Supervised Classification and Localization of Common Thorax Diseases. IEEE CVPR 2017, pp. 3462-3471.",
};

/// Where NIH shares ChestX-ray14.
pub const NIH_SOURCE: &str = "https://nihcc.app.box.com/v/ChestXray-NIHCC";

/// The organisation that publishes the release (the release citation's author).
pub const PUBLISHER: &str = "O5I";

impl Citation {
    /// The BibTeX entry, fields aligned.
    pub fn bibtex(&self) -> String {
        let venue = if self.kind == "misc" { "howpublished" } else { "booktitle" };
        let mut fields = vec![("author", self.author.to_string()), ("title", self.title.to_string()), ("year", self.year.to_string())];
        fields.push((venue, self.venue.to_string()));
        if let Some(pages) = self.pages {
            fields.push(("pages", pages.to_string()));
        }
        let mut out = format!("@{}{{{},\n", self.kind, self.key);
        for (name, value) in fields {
            out.push_str(&format!("  {name:<12} = {{{value}}},\n"));
        }
        out.push('}');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bibtex_entries_carry_every_field() {
        assert_eq!(
            RELEASE.bibtex(),
            "@misc{o5i2026cxr14bpals,\n  author       = {{O5I}},\n  title        = {CXR14-BPALS: An Independent Label-Quality Signal for NIH ChestX-ray14},\n  year         = {2026},\n  howpublished = {Hugging Face Datasets},\n}"
        );
        assert!(
            NIH.bibtex().starts_with("@inproceedings{wang2017chestxray8,\n") && NIH.bibtex().contains("  pages        = {3462--3471},\n")
        );
    }
}
