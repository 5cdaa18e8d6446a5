//! Arrow array builders shared by the tables' batch functions.

use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, Float32Builder, Float64Builder, Int32Builder, ListBuilder, StringBuilder, UInt32Builder};
use arrow_array::ArrayRef;

pub fn strings<'a, R>(rows: &[R], f: impl Fn(&R) -> &'a str) -> ArrayRef {
    let mut b = StringBuilder::new();
    rows.iter().for_each(|r| b.append_value(f(r)));
    Arc::new(b.finish())
}

pub fn floats<R>(rows: &[R], f: impl Fn(&R) -> f64) -> ArrayRef {
    let mut b = Float64Builder::with_capacity(rows.len());
    rows.iter().for_each(|r| b.append_value(f(r)));
    Arc::new(b.finish())
}

pub fn string_lists<'r, R, S: AsRef<str> + 'r>(rows: &'r [R], f: impl Fn(&'r R) -> &'r [S]) -> ArrayRef {
    let mut b = ListBuilder::new(StringBuilder::new());
    for r in rows {
        for s in f(r) {
            b.values().append_value(s.as_ref());
        }
        b.append(true);
    }
    Arc::new(b.finish())
}

pub fn float_lists<'r, R, I: IntoIterator<Item = f32>>(rows: &'r [R], f: impl Fn(&'r R) -> I) -> ArrayRef {
    let mut b = ListBuilder::new(Float32Builder::new());
    for r in rows {
        b.values().extend(f(r).into_iter().map(Some));
        b.append(true);
    }
    Arc::new(b.finish())
}

pub fn u32s<R>(rows: &[R], f: impl Fn(&R) -> u32) -> ArrayRef {
    let mut b = UInt32Builder::with_capacity(rows.len());
    rows.iter().for_each(|r| b.append_value(f(r)));
    Arc::new(b.finish())
}

pub fn optional_strings<'a, R>(rows: &[R], f: impl Fn(&R) -> Option<&'a str>) -> ArrayRef {
    let mut b = StringBuilder::new();
    rows.iter().for_each(|r| b.append_option(f(r)));
    Arc::new(b.finish())
}

pub fn int_lists<R>(rows: &[R], f: impl Fn(&R) -> Vec<i32>) -> ArrayRef {
    let mut b = ListBuilder::new(Int32Builder::new());
    for r in rows {
        b.values().append_slice(&f(r));
        b.append(true);
    }
    Arc::new(b.finish())
}

pub fn optional_floats<R>(rows: &[R], f: impl Fn(&R) -> Option<f64>) -> ArrayRef {
    let mut b = Float64Builder::with_capacity(rows.len());
    rows.iter().for_each(|r| b.append_option(f(r)));
    Arc::new(b.finish())
}

pub fn optional_bools<R>(rows: &[R], f: impl Fn(&R) -> Option<bool>) -> ArrayRef {
    let mut b = BooleanBuilder::with_capacity(rows.len());
    rows.iter().for_each(|r| b.append_option(f(r)));
    Arc::new(b.finish())
}

pub fn bools<R>(rows: &[R], f: impl Fn(&R) -> bool) -> ArrayRef {
    let mut b = arrow_array::builder::BooleanBuilder::with_capacity(rows.len());
    rows.iter().for_each(|r| b.append_value(f(r)));
    Arc::new(b.finish())
}
