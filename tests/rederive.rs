//! Re-deriving the signal from the raw logits a release ships reproduces its pair table exactly:
//! confidence and agreement bit for bit, consistency, trust class and flags.

mod common;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type};
use arrow_array::Array;
use bpals_release::signal::pair_signal;
use bpals_release::spec;
use common::*;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

fn strings(list: &arrow_array::ArrayRef) -> Vec<String> {
    list.as_string::<i32>().iter().map(|s| s.unwrap().to_string()).collect()
}

fn floats(list: &arrow_array::ArrayRef) -> Vec<f32> {
    list.as_primitive::<Float32Type>().values().to_vec()
}

#[test]
fn the_shipped_logits_reproduce_the_pair_table_exactly() {
    let s = Scratch::new();
    let out = s.path("s1b");
    build(&spec("s1b.yaml"), &out, &s.cache(), &[]).success();
    let resolved = spec::load_with_env(&spec("s1b.yaml"), |_| None).unwrap();
    let file = std::fs::File::open(out.join("data/full-00000-of-00001.parquet")).unwrap();
    let mut rows = 0;
    for batch in ParquetRecordBatchReaderBuilder::try_new(file).unwrap().build().unwrap() {
        let batch = batch.unwrap();
        let col = |name: &str| batch.column_by_name(name).unwrap().clone();
        let (labels, nih, confidence, agreement, consistency, classes, flags, devices, yes, no, dev_ids, dev_yes, dev_no) = (
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
            col("device_question_ids"),
            col("device_logit_yes"),
            col("device_logit_no"),
        );
        for i in 0..batch.num_rows() {
            let label = labels.as_string::<i32>().value(i);
            let p = |y: f32, n: f32| 1.0 / (1.0 + (f64::from(n) - f64::from(y)).exp());
            let ys = floats(&yes.as_list::<i32>().value(i));
            let ns = floats(&no.as_list::<i32>().value(i));
            let ps: Vec<f64> = ys.iter().zip(&ns).map(|(y, n)| p(*y, *n)).collect();
            // Devices: a device is present when the mean p_yes of its questions reaches the threshold.
            let ids = strings(&dev_ids.as_list::<i32>().value(i));
            let (dy, dn) = (floats(&dev_yes.as_list::<i32>().value(i)), floats(&dev_no.as_list::<i32>().value(i)));
            let mut seen = Vec::new();
            for device in bpals_release::labels::SUPPORT_DEVICES {
                let dp: Vec<f64> = ids.iter().zip(dy.iter().zip(&dn)).filter(|(id, _)| id.split('#').next() == Some(device)).map(|(_, (y, n))| p(*y, *n)).collect();
                if !dp.is_empty() && dp.iter().sum::<f64>() / dp.len() as f64 >= resolved.signal.device_present_min {
                    seen.push(device.to_string());
                }
            }
            assert_eq!(seen, strings(&devices.as_list::<i32>().value(i)), "row {i}: support devices");

            let sig = pair_signal(&ps, nih.as_boolean().value(i), label, !seen.is_empty(), &resolved.signal);
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
