//! `eval --format google-nih`: Google's expert-label files, their vocabulary mapped onto NIH's.

mod common;

use std::collections::BTreeMap;
use std::fmt::Write;

use common::*;

/// S1b with a row for every label of every image, so composites have all their members.
fn release(s: &Scratch) -> (std::path::PathBuf, Vec<bpals_release::eval::ReleaseRow>) {
    let all = s.write("all.yaml", &format!("extends: {}\nselection:\n  rows: all_labels\n", fixture_s1b().display()));
    let out = s.path("all");
    build(&all, &out, &s.cache(), &[]).success();
    let (_, rows) = bpals_release::eval::read_release_rows(&out).unwrap();
    (out, rows)
}

fn confidences(rows: &[bpals_release::eval::ReleaseRow]) -> BTreeMap<(String, String), f64> {
    rows.iter().map(|r| ((r.image_index.clone(), r.label.clone()), r.confidence)).collect()
}

fn yes(b: bool) -> &'static str {
    if b {
        "YES"
    } else {
        "NO"
    }
}

#[test]
fn four_findings_adjudicated_maps_composites_and_reports_fracture_as_unmapped() {
    let s = Scratch::new();
    let (out, rows) = release(&s);
    let conf = confidences(&rows);
    let c = |image: &str, label: &str| conf[&(image.to_string(), label.to_string())];
    let mut images: Vec<&str> = rows.iter().map(|r| r.image_index.as_str()).collect();
    images.dedup();
    // Experts say YES exactly where the highest member confidence is at least 0.5, so a correct
    // composite (max over members) ranks perfectly.
    let mut csv = String::from(
        "Image Index,Finding Labels,Follow-up #,Patient ID,Patient Age,Patient Gender,View Position,\
         Fracture,Pneumothorax,Airspace opacity,Nodule or mass\r\n",
    );
    for (n, image) in images.iter().enumerate() {
        let nodule_mass = c(image, "Nodule").max(c(image, "Mass")) >= 0.5;
        let opacity = ["Consolidation", "Infiltration", "Pneumonia", "Edema"].iter().map(|l| c(image, l)).fold(0.0, f64::max) >= 0.5;
        let fracture = if n % 3 == 0 { "YES" } else { "NO" };
        // Every tenth image was not adjudicated for airspace opacity: an empty cell.
        let opacity = if n % 10 == 0 { "" } else { yes(opacity) };
        writeln!(
            csv,
            "{image},No Finding,0,1,45,F,PA,{fracture},{},{opacity},{}\r",
            yes(c(image, "Pneumothorax") >= 0.5),
            yes(nodule_mass)
        )
        .unwrap();
    }
    let gold = s.write("four/test_labels.csv", &csv);
    let md = s.path("eval.md");
    let a = bin()
        .arg("eval")
        .arg(&out)
        .arg("--gold")
        .arg(&gold)
        .args(["--format", "google-nih", "--bootstrap", "50", "--markdown"])
        .arg(&md)
        .assert()
        .success();
    let report: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    assert_eq!(report["gold"]["variant"], "four-findings adjudicated");
    let per_label = report["per_label"].as_object().unwrap();
    let keys: Vec<&str> = per_label.keys().map(String::as_str).collect();
    assert_eq!(keys, ["Airspace opacity", "Nodule or mass", "Pneumothorax"]);
    for (label, m) in per_label {
        if let Some(auroc) = m["auroc"].as_f64() {
            assert_eq!(auroc, 1.0, "{label}: the experts threshold the (composite) confidence");
        }
    }
    assert_eq!(per_label["Nodule or mass"]["n"].as_u64().unwrap() as usize, images.len());
    let judged_opacity = images.len() - images.len().div_ceil(10);
    assert_eq!(per_label["Airspace opacity"]["n"].as_u64().unwrap() as usize, judged_opacity);
    let unmapped = &report["gold"]["unmapped"];
    assert_eq!(unmapped[0]["column"], "Fracture");
    assert_eq!(unmapped[0]["judgements"].as_u64().unwrap() as usize, images.len());
    let opacity = report["gold"]["mapping"].as_array().unwrap().iter().find(|m| m["gold"] == "Airspace opacity").unwrap();
    assert!(opacity["note"].as_str().unwrap().starts_with("approximate"));
    let md = std::fs::read_to_string(md).unwrap();
    assert!(md.contains("| Nodule or mass | any of Nodule, Mass |"), "{md}");
    assert!(md.contains("| Fracture | not evaluated"), "{md}");
}

#[test]
fn all_findings_individual_readers_are_reduced_by_majority_vote() {
    let s = Scratch::new();
    let (out, rows) = release(&s);
    let conf = confidences(&rows);
    let mut images: Vec<&str> = rows.iter().map(|r| r.image_index.as_str()).collect();
    images.dedup();
    let images = &images[..20];
    let findings = ["Atelectasis", "Cardiomegaly", "Effusion", "Pleural Thickening"];
    let mut csv = String::from("Image ID,Patient ID,Reader ID,Abnormal,Atelectasis,Cardiomegaly,Effusion,Pleural Thickening,Other\n");
    // Three readers: two follow the model (confidence >= 0.5), one always dissents; so the
    // majority is the model's answer.
    for image in images {
        for reader in ["r1", "r2", "r3"] {
            let cells: Vec<&str> = findings
                .iter()
                .map(|f| {
                    let model = conf[&(image.to_string(), f.replace(' ', "_"))] >= 0.5;
                    yes(if reader == "r3" { !model } else { model })
                })
                .collect();
            writeln!(csv, "{image},7,{reader},YES,{},NO", cells.join(",")).unwrap();
        }
    }
    let gold = s.write("all/test_individual_readers.csv", &csv);
    let a = bin().arg("eval").arg(&out).arg("--gold").arg(&gold).args(["--format", "google-nih", "--bootstrap", "20"]).assert().success();
    let report: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    assert_eq!(report["gold"]["variant"], "all-findings individual readers (majority vote)");
    // The four findings and No Finding (from Abnormal) on every image.
    assert_eq!(report["gold_judgements"].as_u64().unwrap() as usize, images.len() * (findings.len() + 1));
    for label in ["Atelectasis", "Cardiomegaly", "Effusion", "Pleural_Thickening"] {
        let m = &report["per_label"][label];
        assert_eq!(m["n"].as_u64().unwrap() as usize, images.len(), "{label}");
        if let Some(auroc) = m["auroc"].as_f64() {
            assert_eq!(auroc, 1.0, "{label}: the majority follows the model");
        }
    }
    let unmapped: Vec<&str> = report["gold"]["unmapped"].as_array().unwrap().iter().map(|u| u["column"].as_str().unwrap()).collect();
    assert_eq!(unmapped, ["Other"]);
    // Every reader called every image abnormal, so NIH's No Finding is judged false throughout.
    assert_eq!(report["per_label"]["No Finding"]["n"].as_u64().unwrap() as usize, images.len());
    assert_eq!(report["per_label"]["No Finding"]["prevalence"], 0.0);

    // Two readers who disagree leave the cell without a verdict.
    let tied = format!("Image ID,Reader ID,Effusion\n{a},r1,YES\n{a},r2,NO\n{b},r1,NO\n", a = images[0], b = images[1]);
    let gold = s.write("all/tied.csv", &tied);
    let a = bin().arg("eval").arg(&out).arg("--gold").arg(&gold).args(["--format", "google-nih", "--bootstrap", "20"]).assert().success();
    let report: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    assert_eq!(report["gold"]["uncertain"], 1);
    assert_eq!(report["gold_judgements"], 1);
}

/// The eval report of `gold` (written at `name`) against `out`.
fn eval(s: &Scratch, out: &std::path::Path, name: &str, gold: &[u8]) -> serde_json::Value {
    let path = s.path(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, gold).unwrap();
    let a = bin().arg("eval").arg(out).arg("--gold").arg(&path).args(["--format", "google-nih", "--bootstrap", "20"]).assert();
    let a = a.success();
    serde_json::from_str(&stdout(&a)).unwrap()
}

fn gzip(text: &str) -> Vec<u8> {
    use std::io::Write as _;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(text.as_bytes()).unwrap();
    encoder.finish().unwrap()
}

/// Each of Google's published files, written in its layout, loads and is evaluated.
#[test]
fn every_published_google_layout_loads() {
    let s = Scratch::new();
    let (out, rows) = release(&s);
    let mut images: Vec<&str> = rows.iter().map(|r| r.image_index.as_str()).collect();
    images.dedup();
    let images = &images[..24];
    let nih_findings: BTreeMap<&str, bool> =
        rows.iter().filter(|r| r.label == "No Finding").map(|r| (r.image_index.as_str(), !r.nih_label)).collect();
    let abnormal = |image: &str| nih_findings[image];
    let four = "Fracture,Pneumothorax,Airspace opacity,Nodule or mass";
    let four_row = |n: usize| {
        format!("{},{},{},{}", yes(n.is_multiple_of(5)), yes(n.is_multiple_of(3)), yes(n.is_multiple_of(2)), yes(n.is_multiple_of(4)))
    };

    // Four findings, adjudicated: test_labels.csv and validation_labels.csv (NIH's metadata first).
    for name in ["four/test_labels.csv", "four/validation_labels.csv"] {
        let mut csv = format!("Image Index,Finding Labels,Follow-up #,Patient ID,Patient Age,Patient Gender,View Position,{four}\r\n");
        for (n, image) in images.iter().enumerate() {
            writeln!(csv, "{image},No Finding,0,{n},45,F,PA,{}\r", four_row(n)).unwrap();
        }
        let report = eval(&s, &out, name, csv.as_bytes());
        assert_eq!(report["gold"]["variant"], "four-findings adjudicated", "{name}");
        assert_eq!(report["per_label"]["Pneumothorax"]["n"].as_u64().unwrap() as usize, images.len(), "{name}");
    }

    // Both splits in one gzipped file with a `Set Id` column and image sizes, as torchxrayvision
    // ships it (google2019_nih-chest-xray-labels.csv.gz).
    let mut csv = format!(
        "Image Index,Finding Labels,Follow-up #,Patient ID,Patient Age,Patient Gender,View Position,\
         OriginalImage[Width,Height],OriginalImagePixelSpacing[x,y],{four},Set Id\r\n"
    );
    for (n, image) in images.iter().enumerate() {
        let split = if n % 2 == 0 { "test" } else { "val" };
        writeln!(csv, "{image},No Finding,0,{n},45,M,AP,3056,2544,0.139,0.139,{},{split}\r", four_row(n)).unwrap();
    }
    let report = eval(&s, &out, "four/google2019_nih-chest-xray-labels.csv.gz", &gzip(&csv));
    assert_eq!(report["gold"]["variant"], "four-findings adjudicated");
    assert_eq!(report["per_label"]["Nodule or mass"]["n"].as_u64().unwrap() as usize, images.len());

    // Four findings, per reader: individual_readers.csv, where a reader judged a few images twice.
    let mut csv = format!("Image ID,Reader ID,{}\n", four.replace("Nodule or mass", "Nodule/mass"));
    for (n, image) in images.iter().enumerate() {
        for reader in ["4343882785", "4343883593", "4343883996"] {
            writeln!(csv, "{image},{reader},{}", four_row(n)).unwrap();
        }
    }
    // The first reader again on image 0, agreeing; on image 1, disagreeing on Pneumothorax.
    writeln!(csv, "{},4343882785,{}", images[0], four_row(0)).unwrap();
    writeln!(csv, "{},4343882785,{},{},{},{}", images[1], yes(false), yes(true), yes(false), yes(false)).unwrap();
    let report = eval(&s, &out, "four/individual_readers.csv", csv.as_bytes());
    assert_eq!(report["gold"]["variant"], "four-findings individual readers (majority vote)");
    let repeated = &report["gold"]["repeated"];
    assert_eq!((repeated["repeated_pairs"].as_u64(), repeated["conflicting_cells"].as_u64()), (Some(2), Some(1)), "{repeated}");
    assert!(repeated["policy"].as_str().unwrap().contains("counts once"));
    // Image 1's Pneumothorax keeps the two other readers' NO: no image lost its verdict.
    assert_eq!(report["per_label"]["Pneumothorax"]["n"].as_u64().unwrap() as usize, images.len());

    // All findings, adjudicated: test_labels.csv, one row per image, Abnormal as YES/NO.
    let all = "Atelectasis,Cardiomegaly,Consolidation,Edema,Effusion,Emphysema,Fibrosis,Hernia,Infiltration,Mass,\
               Nodule,Pleural Thickening,Pneumonia,Pneumothorax";
    let all_row = |n: usize| (0..14).map(|k| yes((n + k).is_multiple_of(3))).collect::<Vec<_>>().join(",");
    let mut csv = format!("Image ID,Patient ID,Abnormal,{all},Other\n");
    for (n, image) in images.iter().enumerate() {
        writeln!(csv, "{image},{n},{},{},NO", yes(abnormal(image)), all_row(n)).unwrap();
    }
    let report = eval(&s, &out, "all/test_labels.csv", csv.as_bytes());
    assert_eq!(report["gold"]["variant"], "all-findings");
    assert_eq!(report["per_label"].as_object().unwrap().len(), 15, "14 findings and No Finding");
    let no_finding = &report["per_label"]["No Finding"];
    assert_eq!(no_finding["n"].as_u64().unwrap() as usize, images.len());
    // The experts agree with NIH on abnormality here: no No Finding row is a mislabel.
    let mapping = report["gold"]["mapping"].as_array().unwrap().iter().find(|m| m["gold"] == "Abnormal").unwrap().clone();
    assert_eq!((mapping["nih"][0].as_str(), mapping["negated"].as_bool()), (Some("No Finding"), Some(true)), "{mapping}");

    // All findings, per reader: test_individual_readers.csv, whose Abnormal column is 0/1.
    let mut csv = format!("Image ID,Patient ID,Reader ID,Abnormal,{all},Other\n");
    for (n, image) in images.iter().enumerate() {
        for reader in 1..=5 {
            let abnormal = if reader == 5 { !abnormal(image) } else { abnormal(image) };
            writeln!(csv, "{image},{n},{reader},{},{},NO", u8::from(abnormal), all_row(n)).unwrap();
        }
    }
    let report = eval(&s, &out, "all/test_individual_readers.csv", csv.as_bytes());
    assert_eq!(report["gold"]["variant"], "all-findings individual readers (majority vote)");
    assert_eq!(report["per_label"]["No Finding"]["n"].as_u64().unwrap() as usize, images.len());
    let md = s.path("all.md");
    bin()
        .arg("eval")
        .arg(&out)
        .arg("--gold")
        .arg(s.path("all/test_individual_readers.csv"))
        .args(["--format", "google-nih", "--bootstrap", "20", "--markdown"])
        .arg(&md)
        .assert()
        .success();
    let md = std::fs::read_to_string(md).unwrap();
    assert!(md.contains("| Abnormal | not No Finding | negated:"), "{md}");
}

/// "No Finding" is an NIH label like the others in a generic gold file.
#[test]
fn a_generic_gold_file_can_judge_no_finding() {
    let s = Scratch::new();
    let (out, rows) = release(&s);
    let mut csv = String::from("image_index,label,value\n");
    let judged: Vec<_> = rows.iter().filter(|r| r.label == "No Finding").take(30).collect();
    for r in &judged {
        writeln!(csv, "{},No Finding,{}", r.image_index, u8::from(r.confidence >= 0.5)).unwrap();
    }
    let gold = s.write("gold.csv", &csv);
    let a = bin().arg("eval").arg(&out).arg("--gold").arg(&gold).args(["--bootstrap", "20"]).assert().success();
    let report: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    assert_eq!(report["per_label"]["No Finding"]["n"].as_u64().unwrap() as usize, judged.len());
}

#[test]
fn bad_google_files_name_the_line_and_column() {
    let s = Scratch::new();
    let out = s.path("none");
    std::fs::create_dir_all(&out).unwrap();
    let cases = [
        ("noimage.csv", "Patient ID,Pneumothorax\n1,YES\n", "noimage.csv:1: no `Image Index` or `Image ID` column"),
        ("nolabels.csv", "Image Index,Patient ID\nx.png,1\n", "nolabels.csv:1: no expert label column"),
        ("value.csv", "Image Index,Pneumothorax\nx.png,maybe\n", "value.csv:2: column `Pneumothorax`: \"maybe\""),
        ("ragged.csv", "Image Index,Pneumothorax\nx.png,YES,NO\n", "ragged.csv:2: 3 fields, the header has 2"),
        ("twice.csv", "Image Index,Pneumothorax\nx.png,YES\nx.png,NO\n", "twice.csv:3: x.png is judged twice (first on line 2)"),
        ("value01.csv", "Image Index,Pneumothorax\nx.png,2\n", "expected YES, NO, HEDGE, 1, 0 or empty"),
        ("empty.csv", "", "empty.csv:0: the file is empty"),
    ];
    for (name, text, expected) in cases {
        let gold = s.write(&format!("gold/{name}"), text);
        let a = bin().arg("eval").arg(&out).arg("--gold").arg(&gold).args(["--format", "google-nih"]).assert().failure();
        assert!(stderr(&a).contains(expected), "{name}: {}", stderr(&a));
    }
    // A Google file read as generic says which format to use.
    let gold = s.write("gold/google.csv", "Image Index,Pneumothorax\nx.png,YES\n");
    let a = bin().arg("eval").arg(&out).arg("--gold").arg(&gold).assert().failure();
    assert!(stderr(&a).contains("--format google-nih"), "{}", stderr(&a));
}
