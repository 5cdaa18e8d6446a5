//! Re-deriving the signal from the raw logits a release ships reproduces its pair table exactly:
//! confidence and agreement bit for bit, consistency, trust class and flags.

mod common;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type};
use bpals_release::release_spec;
use bpals_release::signal::{pair_signal, Rules};
use common::*;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

fn strings(list: &arrow_array::ArrayRef) -> Vec<String> {
    list.as_string::<i32>().iter().map(|s| s.unwrap().to_string()).collect()
}

fn floats(list: &arrow_array::ArrayRef) -> Vec<f32> {
    list.as_primitive::<Float32Type>().values().to_vec()
}

fn p_yes(y: f32, n: f32) -> f64 {
    1.0 / (1.0 + (f64::from(n) - f64::from(y)).exp())
}

/// Per image, the devices its shipped device logits say are present (mean p_yes >= threshold),
/// derived here independently of the build's code.
fn image_devices(path: &std::path::Path, threshold: f64) -> std::collections::HashMap<String, Vec<String>> {
    let mut out = std::collections::HashMap::new();
    let file = std::fs::File::open(path).unwrap();
    for batch in ParquetRecordBatchReaderBuilder::try_new(file).unwrap().build().unwrap() {
        let batch = batch.unwrap();
        let col = |name: &str| batch.column_by_name(name).unwrap().clone();
        let (images, ids, yes, no) = (col("image_index"), col("device_question_ids"), col("device_logit_yes"), col("device_logit_no"));
        for i in 0..batch.num_rows() {
            let ids = strings(&ids.as_list::<i32>().value(i));
            let (dy, dn) = (floats(&yes.as_list::<i32>().value(i)), floats(&no.as_list::<i32>().value(i)));
            let mut seen = Vec::new();
            for device in bpals_release::vocab::SUPPORT_DEVICES {
                let ps: Vec<f64> = ids
                    .iter()
                    .zip(dy.iter().zip(&dn))
                    .filter(|(id, _)| id.split('#').next() == Some(device))
                    .map(|(_, (y, n))| p_yes(*y, *n))
                    .collect();
                if !ps.is_empty() && ps.iter().sum::<f64>() / ps.len() as f64 >= threshold {
                    seen.push(device.to_string());
                }
            }
            out.insert(images.as_string::<i32>().value(i).to_string(), seen);
        }
    }
    out
}

#[test]
fn the_shipped_logits_reproduce_the_pair_table_exactly() {
    let s = Scratch::new();
    let out = s.path("s1b");
    build(&fixture_s1b(), &out, &s.cache(), &[]).success();
    let resolved = bpals_release::inputs::resolve(release_spec::load_with_env(&fixture_s1b(), |_| None).unwrap()).unwrap();
    let devices_of = image_devices(&out.join("data/images/full-00000-of-00001.parquet"), resolved.signal.device_present_min);
    let file = std::fs::File::open(out.join("data/full-00000-of-00001.parquet")).unwrap();
    let mut rows = 0;
    for batch in ParquetRecordBatchReaderBuilder::try_new(file).unwrap().build().unwrap() {
        let batch = batch.unwrap();
        let col = |name: &str| batch.column_by_name(name).unwrap().clone();
        let (images, labels, nih, confidence, agreement, consistency, classes, flags, devices, yes, no) = (
            col("image_index"),
            col("label"),
            col("nih_label"),
            col("confidence"),
            col("agreement"),
            col("consistency"),
            col("trust_class"),
            col("flags"),
            col("support_devices"),
            col("question_logit_yes"),
            col("question_logit_no"),
        );
        for i in 0..batch.num_rows() {
            let label = labels.as_string::<i32>().value(i);
            let ys = floats(&yes.as_list::<i32>().value(i));
            let ns = floats(&no.as_list::<i32>().value(i));
            let ps: Vec<f64> = ys.iter().zip(&ns).map(|(y, n)| p_yes(*y, *n)).collect();
            let seen = &devices_of[images.as_string::<i32>().value(i)];
            assert_eq!(seen, &strings(&devices.as_list::<i32>().value(i)), "row {i}: support devices");

            let sig = pair_signal(
                &ps,
                nih.as_boolean().value(i),
                label,
                !seen.is_empty(),
                &Rules::new(&resolved.signal, resolved.calibration_table()),
            );
            assert_eq!(sig.confidence.to_bits(), confidence.as_primitive::<Float64Type>().value(i).to_bits(), "row {i}: confidence");
            assert_eq!(sig.agreement.to_bits(), agreement.as_primitive::<Float64Type>().value(i).to_bits(), "row {i}: agreement");
            assert_eq!(sig.consistency, consistency.as_primitive::<Float64Type>().value(i), "row {i}: consistency");
            assert_eq!(sig.trust_class.name(), classes.as_string::<i32>().value(i), "row {i}: trust class");
            assert_eq!(sig.flags, strings(&flags.as_list::<i32>().value(i)), "row {i}: flags");
            rows += 1;
        }
    }
    assert!(rows > 500, "{rows} rows checked");
}
