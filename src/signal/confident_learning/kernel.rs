//! The probes' hot loop: the value and gradient of several findings' objectives on the same rows
//! in one pass over the features. At NIH's scale (112,120 images of 4,096 numbers, 1.8 GB in
//! f32) a pass per finding per step would be bound by memory; here each feature loaded serves
//! [`GROUP`] findings, and each block of [`BLOCK`] rows updates the gradient sums once.
//!
//! Every sum runs in a fixed order (eight interleaved lanes along a row, rows in their order), and
//! each finding's arithmetic is the same whichever findings share its pass, so a probe's bits do
//! not depend on the others, on threads or on the CPU. Products are fused (`mul_add`, exactly
//! rounded everywhere): with AVX2 and FMA the loops run four lanes an instruction, and the
//! portable loops give the same bits elsewhere, only slower. (An AVX-512 version of the same
//! loops was 14% slower on this project's Xeon: the conversions and loads, not the multiply-adds,
//! bound them.)

/// Findings whose sums share each load of a feature.
const GROUP: usize = 4;
/// Rows whose residuals update the gradient sums together.
const BLOCK: usize = 32;
/// Interleaved partial sums along a row.
const LANES: usize = 8;

/// One finding's objective at one point: its weights folded onto the raw features
/// (`w_k / scale_k`), the offset that folding moves into the intercept, and its labels.
pub struct Request<'a> {
    pub folded: &'a [f64],
    pub offset: f64,
    pub labels: &'a [bool],
}

/// What one pass gives each finding: the summed log loss, the summed residuals
/// (`sigmoid(z) - y`) and, per feature, the residuals' sums weighted by the raw feature.
pub struct Sums {
    pub loss: f64,
    pub residual: f64,
    pub weighted: Vec<f64>,
}

/// The sums of every request over `rows` of `features` (row-major f32, `dims` per row).
pub fn pass(features: &[f32], dims: usize, rows: &[usize], requests: &[Request<'_>]) -> Vec<Sums> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has both features, checked just above.
            return unsafe { avx2::pass(features, dims, rows, requests) };
        }
    }
    pass_with::<Portable>(features, dims, rows, requests)
}

/// The two inner loops, written once portably and once with AVX2 and FMA: the same operations
/// in the same order, so the same bits.
trait Lanes {
    /// `w[g] . x` for each finding g of a group, summed in [`LANES`] interleaved lanes.
    fn dots(x: &[f32], w: [&[f64]; GROUP]) -> [f64; GROUP];
    /// `sums[g * dims + k] += r[b][g] * xs[b][k]` over the block's rows in order, for each
    /// finding g of a group.
    fn accumulate(xs: &[&[f32]], r: &[[f64; GROUP]], sums: &mut [f64], dims: usize);
}

#[inline(always)]
fn pass_with<L: Lanes>(features: &[f32], dims: usize, rows: &[usize], requests: &[Request<'_>]) -> Vec<Sums> {
    let m = requests.len();
    let groups = m.div_ceil(GROUP);
    for q in requests {
        assert_eq!(q.folded.len(), dims, "a weight per feature");
    }
    // Padded to whole groups by repeating the last request; the copies' sums are dropped.
    let request = |a: usize| &requests[a.min(m - 1)];
    let mut weighted = vec![0.0; groups * GROUP * dims];
    let (mut loss, mut residual) = (vec![0.0; m], vec![0.0; m]);
    let mut r = vec![[0.0f64; GROUP]; BLOCK];
    for block in rows.chunks(BLOCK) {
        let xs: Vec<&[f32]> = block.iter().map(|&i| &features[i * dims..(i + 1) * dims]).collect();
        for (group, sums) in weighted.chunks_exact_mut(GROUP * dims).enumerate() {
            let members: [&Request<'_>; GROUP] = std::array::from_fn(|g| request(group * GROUP + g));
            for (b, (&i, x)) in block.iter().zip(&xs).enumerate() {
                let z = L::dots(x, members.map(|q| q.folded));
                for g in 0..GROUP {
                    let a = group * GROUP + g;
                    let zg = z[g] + members[g].offset;
                    let y = if members[g].labels[i] { 1.0 } else { 0.0 };
                    let (p, softplus) = sigmoid_and_softplus(zg);
                    r[b][g] = p - y;
                    if a < m {
                        loss[a] += softplus - y * zg;
                        residual[a] += r[b][g];
                    }
                }
            }
            L::accumulate(&xs, &r[..block.len()], sums, dims);
        }
    }
    (0..m)
        .map(|a| {
            let at = a * dims;
            Sums { loss: loss[a], residual: residual[a], weighted: weighted[at..at + dims].to_vec() }
        })
        .collect()
}

/// Plain Rust, for any CPU.
struct Portable;

impl Lanes for Portable {
    #[inline(always)]
    fn dots(x: &[f32], w: [&[f64]; GROUP]) -> [f64; GROUP] {
        let body = x.len() - x.len() % LANES;
        let mut acc = [[0.0f64; LANES]; GROUP];
        for k in (0..body).step_by(LANES) {
            for g in 0..GROUP {
                for l in 0..LANES {
                    acc[g][l] = w[g][k + l].mul_add(f64::from(x[k + l]), acc[g][l]);
                }
            }
        }
        std::array::from_fn(|g| {
            let a = &acc[g];
            dot_tail(((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7])), w[g], x, body)
        })
    }

    #[inline(always)]
    fn accumulate(xs: &[&[f32]], r: &[[f64; GROUP]], sums: &mut [f64], dims: usize) {
        let body = dims - dims % LANES;
        for k in (0..body).step_by(LANES) {
            for (x, rb) in xs.iter().zip(r) {
                for g in 0..GROUP {
                    for l in 0..LANES {
                        let s = &mut sums[g * dims + k + l];
                        *s = rb[g].mul_add(f64::from(x[k + l]), *s);
                    }
                }
            }
        }
        tail(xs, r, sums, dims, body);
    }
}

/// A dot product's lanes summed into `sum`, and the features past the last whole chunk of
/// [`LANES`] added one at a time.
#[inline(always)]
fn dot_tail(mut sum: f64, w: &[f64], x: &[f32], body: usize) -> f64 {
    for k in body..x.len() {
        sum = w[k].mul_add(f64::from(x[k]), sum);
    }
    sum
}

/// The features past the last whole chunk of [`LANES`], one at a time.
#[inline(always)]
fn tail(xs: &[&[f32]], r: &[[f64; GROUP]], sums: &mut [f64], dims: usize, body: usize) {
    for k in body..dims {
        for (x, rb) in xs.iter().zip(r) {
            for g in 0..GROUP {
                sums[g * dims + k] = rb[g].mul_add(f64::from(x[k]), sums[g * dims + k]);
            }
        }
    }
}

/// The loops with AVX2's four-wide registers: a chunk of [`LANES`] is two registers, lanes 0-3
/// and 4-7, and every lane is one fused multiply-add as in [`Portable`].
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{dot_tail, pass_with, tail, Lanes, Request, Sums, GROUP, LANES};

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn pass(features: &[f32], dims: usize, rows: &[usize], requests: &[Request<'_>]) -> Vec<Sums> {
        pass_with::<Avx2>(features, dims, rows, requests)
    }

    struct Avx2;

    /// Eight f32 at `p` as two registers of four f64.
    #[inline(always)]
    unsafe fn widened(p: *const f32) -> [__m256d; 2] {
        let x = _mm256_loadu_ps(p);
        [_mm256_cvtps_pd(_mm256_castps256_ps128(x)), _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))]
    }

    impl Lanes for Avx2 {
        #[inline(always)]
        fn dots(x: &[f32], w: [&[f64]; GROUP]) -> [f64; GROUP] {
            let body = x.len() - x.len() % LANES;
            // SAFETY: only reached from `pass` above, on a CPU with AVX2 and FMA; every load is
            // of a whole chunk below `body`, and each w[g] is as long as x (pass_with checks).
            unsafe {
                let mut acc = [[_mm256_setzero_pd(); 2]; GROUP];
                for k in (0..body).step_by(LANES) {
                    let [x0, x1] = widened(x.as_ptr().add(k));
                    for g in 0..GROUP {
                        let wp = w[g].as_ptr().add(k);
                        acc[g][0] = _mm256_fmadd_pd(_mm256_loadu_pd(wp), x0, acc[g][0]);
                        acc[g][1] = _mm256_fmadd_pd(_mm256_loadu_pd(wp.add(4)), x1, acc[g][1]);
                    }
                }
                std::array::from_fn(|g| {
                    // Lane l + lane l + 4, then ((0 + 1) + (2 + 3)): the portable order.
                    let mut s = [0.0f64; 4];
                    _mm256_storeu_pd(s.as_mut_ptr(), _mm256_add_pd(acc[g][0], acc[g][1]));
                    dot_tail((s[0] + s[1]) + (s[2] + s[3]), w[g], x, body)
                })
            }
        }

        #[inline(always)]
        fn accumulate(xs: &[&[f32]], r: &[[f64; GROUP]], sums: &mut [f64], dims: usize) {
            let body = dims - dims % LANES;
            assert!(sums.len() >= GROUP * dims && xs.iter().all(|x| x.len() == dims));
            // SAFETY: as in `dots`; sums holds GROUP rows of dims (asserted above).
            unsafe {
                let out = sums.as_mut_ptr();
                for k in (0..body).step_by(LANES) {
                    let mut acc: [[__m256d; 2]; GROUP] = std::array::from_fn(|g| {
                        let p = out.add(g * dims + k);
                        [_mm256_loadu_pd(p), _mm256_loadu_pd(p.add(4))]
                    });
                    for (x, rb) in xs.iter().zip(r) {
                        let [x0, x1] = widened(x.as_ptr().add(k));
                        for g in 0..GROUP {
                            let rg = _mm256_set1_pd(rb[g]);
                            acc[g][0] = _mm256_fmadd_pd(rg, x0, acc[g][0]);
                            acc[g][1] = _mm256_fmadd_pd(rg, x1, acc[g][1]);
                        }
                    }
                    for (g, a) in acc.iter().enumerate() {
                        let p = out.add(g * dims + k);
                        _mm256_storeu_pd(p, a[0]);
                        _mm256_storeu_pd(p.add(4), a[1]);
                    }
                }
            }
            tail(xs, r, sums, dims, body);
        }
    }
}

/// `sigmoid(z)` and `log(1 + e^z)` from one exponential, without overflow.
#[inline(always)]
fn sigmoid_and_softplus(z: f64) -> (f64, f64) {
    let e = (-z.abs()).exp();
    if z >= 0.0 {
        (1.0 / (1.0 + e), z + e.ln_1p())
    } else {
        (e / (1.0 + e), e.ln_1p())
    }
}

pub fn sigmoid(z: f64) -> f64 {
    if z >= 0.0 {
        1.0 / (1.0 + (-z).exp())
    } else {
        let e = z.exp();
        e / (1.0 + e)
    }
}

/// log(1 + e^z) without overflow.
#[cfg(test)]
fn softplus(z: f64) -> f64 {
    if z > 0.0 {
        z + (-z).exp().ln_1p()
    } else {
        z.exp().ln_1p()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 70 rows of 13 features: neither a whole block nor whole lanes.
    type Data = (Vec<f32>, usize, Vec<usize>, Vec<Vec<bool>>, Vec<Vec<f64>>);

    fn data() -> Data {
        let dims = 13;
        let features: Vec<f32> = (0..70 * dims).map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0).collect();
        let rows: Vec<usize> = (0..70).filter(|i| i % 5 != 2).collect();
        let labels: Vec<Vec<bool>> = (0..6).map(|f| (0..70).map(|i| (i * (f + 3)) % 7 < 3).collect()).collect();
        let weights: Vec<Vec<f64>> = (0..6).map(|f| (0..dims).map(|k| ((k + f) % 5) as f64 * 0.1 - 0.2).collect()).collect();
        (features, dims, rows, labels, weights)
    }

    #[test]
    fn a_findings_sums_are_the_plain_sums_whoever_shares_its_pass() {
        let (features, dims, rows, labels, weights) = data();
        let request = |f: usize| Request { folded: &weights[f], offset: 0.1 * f as f64, labels: &labels[f] };
        let all: Vec<Request<'_>> = (0..6).map(request).collect();
        let together = pass(&features, dims, &rows, &all);
        for f in 0..6 {
            let alone = pass(&features, dims, &rows, &[request(f)]);
            assert_eq!(alone[0].loss.to_bits(), together[f].loss.to_bits(), "finding {f}");
            assert_eq!(alone[0].weighted, together[f].weighted, "finding {f}");
            // Against the textbook sums.
            let (mut loss, mut weighted) = (0.0, vec![0.0; dims]);
            for &i in &rows {
                let x = &features[i * dims..(i + 1) * dims];
                let z: f64 = weights[f].iter().zip(x).map(|(w, &v)| w * f64::from(v)).sum::<f64>() + 0.1 * f as f64;
                let y = if labels[f][i] { 1.0 } else { 0.0 };
                loss += softplus(z) - y * z;
                for (acc, &v) in weighted.iter_mut().zip(x) {
                    *acc += (sigmoid(z) - y) * f64::from(v);
                }
            }
            assert!((loss - together[f].loss).abs() < 1e-9 * loss.abs(), "finding {f}");
            for (a, b) in weighted.iter().zip(&together[f].weighted) {
                assert!((a - b).abs() < 1e-9 * a.abs().max(1.0), "finding {f}: {a} {b}");
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_vector_path_gives_the_portable_paths_bits() {
        let (features, dims, rows, labels, weights) = data();
        let all: Vec<Request<'_>> = (0..6).map(|f| Request { folded: &weights[f], offset: -0.3, labels: &labels[f] }).collect();
        let portable = pass_with::<Portable>(&features, dims, &rows, &all);
        let same = |fast: Vec<Sums>| {
            for (a, b) in fast.iter().zip(&portable) {
                assert_eq!((a.loss.to_bits(), a.residual.to_bits()), (b.loss.to_bits(), b.residual.to_bits()));
                assert_eq!(a.weighted, b.weighted);
            }
        };
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: checked just above.
            same(unsafe { avx2::pass(&features, dims, &rows, &all) });
        }
    }
}
