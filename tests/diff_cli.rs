//! `bpals-release diff A B`: a release against itself agrees fully; a known change of one
//! threshold gives the numbers it must.

mod common;

use std::collections::BTreeMap;

use common::*;

#[test]
fn a_release_against_itself_agrees_fully() {
    let s = Scratch::new();
    let a = s.path("a");
    build(&fixture_s1a(), &a, &s.cache(), &[]).success();
    let md = s.path("diff.md");
    let out = bin().arg("diff").arg(&a).arg(&a).arg("--markdown").arg(&md).assert().success();
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let overall = &report["overall"];
    assert_eq!(overall["kappa"], 1.0);
    assert_eq!(overall["agreement"], 1.0);
    assert!((overall["confidence_pearson"].as_f64().unwrap() - 1.0).abs() < 1e-12);
    assert_eq!(report["changed_rows"], 0);
    assert_eq!(report["only_in_a"], 0);
    for (label, m) in report["per_label"].as_object().unwrap() {
        assert_eq!(m["same_class"], m["n"], "{label}");
    }
    let md = std::fs::read_to_string(md).unwrap();
    assert!(md.contains("| **all** | 776 | 0 | 1.000 | 1.000 | 1.000 | 0.000 |") && md.contains("No row changed trust class."), "{md}");
}

#[test]
fn raising_the_trusted_threshold_moves_exactly_the_rows_between_the_two() {
    let s = Scratch::new();
    let a = s.path("a");
    build(&fixture_s1a(), &a, &s.cache(), &[]).success();
    // Same scores, trusted_min_agreement 0.7 -> 0.8: rows with 0.7 <= agreement < 0.8 go
    // from trusted to review; nothing else moves and the confidences are identical.
    let raised = s.write("raised.yaml", &format!("extends: {}\nsignal:\n  trusted_min_agreement: 0.8\n", fixture_s1a().display()));
    let b = s.path("b");
    build(&raised, &b, &s.cache(), &[]).success();
    let (_, rows) = bpals_release::eval::read_release_rows(&a).unwrap();
    let moved: Vec<_> = rows.iter().filter(|r| r.agreement >= 0.7 && r.agreement < 0.8).collect();
    assert!(!moved.is_empty());

    let out = bin().arg("diff").arg(&a).arg(&b).args(["--top", "5"]).assert().success();
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["changed_rows"].as_u64().unwrap() as usize, moved.len());
    assert_eq!(report["transitions"]["trusted"]["review"].as_u64().unwrap() as usize, moved.len());
    assert!((report["overall"]["confidence_pearson"].as_f64().unwrap() - 1.0).abs() < 1e-12);
    assert_eq!(report["overall"]["mean_abs_confidence_change"], 0.0);
    assert_eq!(report["top_changed"].as_array().unwrap().len(), 5.min(moved.len()));

    // Kappa from the class counts, computed here independently.
    let class_b = |r: &bpals_release::eval::ReleaseRow| {
        if r.agreement >= 0.7 && r.agreement < 0.8 {
            "review".to_string()
        } else {
            r.trust_class.clone()
        }
    };
    let n = rows.len() as f64;
    let mut count_a: BTreeMap<String, f64> = BTreeMap::new();
    let mut count_b: BTreeMap<String, f64> = BTreeMap::new();
    for r in &rows {
        *count_a.entry(r.trust_class.clone()).or_default() += 1.0;
        *count_b.entry(class_b(r)).or_default() += 1.0;
    }
    let p_o = (rows.len() - moved.len()) as f64 / n;
    let p_e: f64 = count_a.iter().map(|(c, x)| x / n * count_b.get(c).copied().unwrap_or(0.0) / n).sum();
    let kappa = (p_o - p_e) / (1.0 - p_e);
    assert!((report["overall"]["kappa"].as_f64().unwrap() - kappa).abs() < 1e-12, "{} vs {kappa}", report["overall"]["kappa"]);
    assert!(kappa < 1.0);
}
