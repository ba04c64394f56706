//! Few-row products of half-precision operands, `(m, k) @ (k, n)` with `m <= MAX_ROWS` (a
//! decode step's `x @ W.T`). The general path (`matmul::widened`) widens all of B to float32
//! in memory and hands it to faer: 2 bytes read, 4 written and 4 read again a weight where
//! the product needs 2, so a bfloat16 (1, 2048) @ (2048, 8192) ran at 7 GB/s against
//! float32's 43 on the same CPU. Here B is widened a run at a time into a buffer that stays
//! in L1, and each weight leaves memory once.
//!
//! Two forms, by B's layout:
//! - `W.T` (B's k axis has unit stride, as `nn.Linear` hands it): each output is a dot
//!   product of two contiguous runs, summed in `LANES` float32 lanes, then pairwise;
//! - row-major B (n has unit stride): `x[r, i] * B[i, :]` is added into float32 rows, one
//!   `i` after another.
//!
//! Either way every output is a float32 sum in a fixed order (whatever the threads or the
//! SIMD level: lanes are plain fused multiply-adds), rounded once to the half type.

use crate::halfmap::Half;
use crate::matmul::batch_offsets;
use crate::simd::pairwise;
use crate::strided::output_full;
use crate::walk::PARALLEL_ELEMENTS;
use kiln_base::{ArrayData, Layout, Result};
use rayon::prelude::*;

/// Most rows of A this path takes: beyond, a product is compute bound and faer's blocked
/// kernel pays for the widened copy.
pub(crate) const MAX_ROWS: usize = 8;
/// float32 lanes a dot product keeps: four AVX-512 vectors (eight AVX2 ones), so a row's
/// multiply-adds form independent chains (two vectors ran at the FMA latency).
const LANES: usize = 64;
/// Values of B widened at a time (2 KB of float32, in L1).
const RUN: usize = 512;
/// Outputs (features of `W.T`, columns of a row-major B) a task takes at least.
const OUTPUTS_PER_TASK: usize = 16;

/// `a @ b` for half-precision `a` of at most `MAX_ROWS` rows (per batch element) where each
/// of `b`'s matrices has one unit stride and no negative one; `None` for other products.
pub(crate) fn product<H: Half>(
    a: &ArrayData,
    b: &ArrayData,
    shape: &[usize],
) -> Result<Option<ArrayData>> {
    let (la, lb) = (&a.layout, &b.layout);
    let nd = la.ndim();
    if nd < 2 || lb.ndim() != nd || la.shape[nd - 2] > MAX_ROWS {
        return Ok(None);
    }
    let (rs, cs) = (lb.strides[nd - 2], lb.strides[nd - 1]);
    let form = match (rs, cs) {
        (1, c) if c >= 0 => Form::Dot,
        (r, 1) if r >= 0 => Form::Axpy,
        _ => return Ok(None),
    };
    let (m, k, n) = (la.shape[nd - 2], la.shape[nd - 1], lb.shape[nd - 1]);
    let (src_a, src_b) = (a.buffer.host_slice::<H>(), b.buffer.host_slice::<H>());
    let (offsets_a, offsets_b) = (batch_offsets(la), batch_offsets(lb));
    let out = output_full::<H>("matmul", shape, |out| {
        let mut xs = vec![0f32; m * k];
        let mut acc = vec![0f32; m * n];
        for ((dst, &oa), &ob) in out.chunks_mut((m * n).max(1)).zip(&offsets_a).zip(&offsets_b) {
            if m * n == 0 {
                break;
            }
            rows_of(src_a, la, oa, &mut xs);
            let b =
                Matrix { src: src_b, offset: ob, stride: if form == Form::Dot { cs } else { rs } };
            match form {
                Form::Dot => dots(&xs, m, k, n, &b, &mut acc),
                Form::Axpy => axpys(&xs, m, k, n, &b, &mut acc),
            }
            if kiln_base::interrupt::requested() {
                return Ok(()); // eval discards the output
            }
            H::narrow(&acc, dst);
        }
        Ok(())
    })?;
    Ok(Some(out))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    Dot,
    Axpy,
}

/// One of B's matrices: element `(i, j)` at `offset + i + j * stride` (`Dot`) or
/// `offset + i * stride + j` (`Axpy`).
struct Matrix<'a, H> {
    src: &'a [H],
    offset: usize,
    stride: isize,
}

impl<H> Matrix<'_, H> {
    /// The `len` values from `start` along the unit stride.
    fn run(&self, line: usize, start: usize, len: usize) -> &[H] {
        let at = self.offset + line * self.stride as usize + start;
        &self.src[at..at + len]
    }
}

/// A's rows of one batch element (its matrix at `offset`), widened row-major into `xs`.
fn rows_of<H: Half>(src: &[H], l: &Layout, offset: usize, xs: &mut [f32]) {
    let nd = l.ndim();
    let (m, k) = (l.shape[nd - 2], l.shape[nd - 1]);
    let (rs, cs) = (l.strides[nd - 2], l.strides[nd - 1]);
    if k == 0 {
        return; // no elements: the offsets may point past an empty buffer
    }
    for r in 0..m {
        let row = &mut xs[r * k..(r + 1) * k];
        let start = (offset as isize).wrapping_add((r as isize).wrapping_mul(rs));
        if cs == 1 {
            H::widen(&src[start as usize..start as usize + k], row);
        } else {
            for (i, x) in row.iter_mut().enumerate() {
                *x = src[start.wrapping_add((i as isize).wrapping_mul(cs)) as usize].to_acc();
            }
        }
    }
}

/// Splits `n` outputs of `per_output` values each (`out`'s chunks) over threads, at least
/// `min_per_task` outputs a task, when the product is big enough: `task(first_output, chunk)`.
fn spread(
    out: &mut [f32],
    (per_output, n, min_per_task): (usize, usize, usize),
    work: usize,
    task: impl Fn(usize, &mut [f32]) + Sync,
) {
    if work < 2 * PARALLEL_ELEMENTS || n < 2 * min_per_task {
        task(0, out);
        return;
    }
    let per_task = min_per_task.max(n / (4 * rayon::current_num_threads()));
    out.par_chunks_mut(per_output * per_task)
        .enumerate()
        .for_each(|(t, chunk)| task(t * per_task, chunk));
}

/// `acc[r * n + j] = x[r] . B[:, j]` for B of unit stride along k.
fn dots<H: Half>(xs: &[f32], m: usize, k: usize, n: usize, b: &Matrix<H>, acc: &mut [f32]) {
    // Computed feature-major (each task owns whole features), then stored row-major.
    let mut by_feature = vec![0f32; n * m];
    spread(&mut by_feature, (m, n, OUTPUTS_PER_TASK), m * n * k, |first, chunk| {
        crate::simd::run(
            #[inline(always)]
            || {
                let mut w = [0f32; RUN];
                for (i, column) in chunk.chunks_mut(m).enumerate() {
                    let mut lanes = [[0f32; LANES]; MAX_ROWS];
                    for k0 in (0..k).step_by(RUN) {
                        let len = RUN.min(k - k0);
                        H::widen(b.run(first + i, k0, len), &mut w[..len]);
                        for (r, l) in lanes[..m].iter_mut().enumerate() {
                            dot_row(l, &xs[r * k + k0..][..len], &w[..len]);
                        }
                    }
                    for (o, l) in column.iter_mut().zip(&lanes) {
                        *o = pairwise(l);
                    }
                }
            },
        )
    });
    for (j, column) in by_feature.chunks_exact(m).enumerate() {
        for (r, &v) in column.iter().enumerate() {
            acc[r * n + j] = v;
        }
    }
}

/// `acc[r, :] = Σ_i x[r, i] B[i, :]` for B of unit stride along n.
fn axpys<H: Half>(xs: &[f32], m: usize, k: usize, n: usize, b: &Matrix<H>, acc: &mut [f32]) {
    // Computed column-block-major (each task owns `RUN`-column blocks of every row), then
    // stored row-major.
    let blocks = n.div_ceil(RUN);
    let mut by_block = vec![0f32; blocks * m * RUN];
    spread(&mut by_block, (m * RUN, blocks, 1), m * n * k, |first, chunk| {
        crate::simd::run(
            #[inline(always)]
            || {
                let mut w = [0f32; RUN];
                for (i, block) in chunk.chunks_mut(m * RUN).enumerate() {
                    let j0 = (first + i) * RUN;
                    let len = RUN.min(n - j0);
                    block.fill(0.0);
                    for t in 0..k {
                        H::widen(b.run(t, j0, len), &mut w[..len]);
                        for (r, row) in block.chunks_exact_mut(RUN).enumerate() {
                            let x = xs[r * k + t];
                            for (o, &v) in row[..len].iter_mut().zip(&w[..len]) {
                                *o = x.mul_add(v, *o);
                            }
                        }
                    }
                }
            },
        )
    });
    for (bi, block) in by_block.chunks_exact(m * RUN).enumerate() {
        let j0 = bi * RUN;
        let len = RUN.min(n - j0);
        for (r, row) in block.chunks_exact(RUN).enumerate() {
            acc[r * n + j0..r * n + j0 + len].copy_from_slice(&row[..len]);
        }
    }
}

/// `lanes[t % LANES] += x[t] * w[t]`, lane by lane. (Several rows a pass, to read each
/// run of B once for all, kept LLVM from vectorising the lanes; B's run is in L1 anyway.)
#[inline(always)]
fn dot_row(lanes: &mut [f32; LANES], x: &[f32], w: &[f32]) {
    let mut acc = *lanes;
    let whole = w.len() / LANES * LANES;
    for (xc, wc) in x[..whole].chunks_exact(LANES).zip(w[..whole].chunks_exact(LANES)) {
        let (xc, wc): (&[f32; LANES], &[f32; LANES]) =
            (xc.try_into().unwrap(), wc.try_into().unwrap());
        for l in 0..LANES {
            acc[l] = xc[l].mul_add(wc[l], acc[l]);
        }
    }
    for (l, t) in (whole..w.len()).enumerate() {
        acc[l] = x[t].mul_add(w[t], acc[l]);
    }
    *lanes = acc;
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};
    use kiln_base::{DType, HOST};

    fn data<H: Half>(values: &[f32], layout: Layout) -> ArrayData {
        let halves: Vec<H> = values.iter().map(|&v| H::from_f32(v)).collect();
        ArrayData { buffer: HOST.from_slice(&halves).unwrap(), layout, dtype: H::DTYPE }
    }

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| (((i * 37 + seed * 11) % 101) as f32 - 50.0) * 0.031).collect()
    }

    /// `a @ b` through this path, as float32, against a float64 sum of the same half values:
    /// within the float32 sum's error and the one rounding to `H`.
    fn check<H: Half>(m: usize, k: usize, n: usize, batch: usize, transposed: bool, poison: bool) {
        let mut xv = values(batch * m * k, 1);
        if poison && !xv.is_empty() {
            xv[0] = f32::INFINITY;
            let last = xv.len() - 1;
            xv[last] = f32::NAN;
        }
        let wv = values(n * k, 2);
        let a = data::<H>(&xv, Layout::contiguous(&[batch, m, k]));
        // B: one (k, n) matrix shared by the batch (stride 0), stored as W (n, k) viewed
        // transposed, or row-major.
        let lb = if transposed {
            Layout::new(vec![batch, k, n].into(), vec![0, 1, k as isize].into(), 0)
        } else {
            Layout::new(vec![batch, k, n].into(), vec![0, n as isize, 1].into(), 0)
        };
        let b = data::<H>(&wv, lb);
        let out = product::<H>(&a, &b, &[batch, m, n]).unwrap().expect("takes the product");
        let got = out.buffer.host_slice::<H>();
        let (x, w) = (a.buffer.host_slice::<H>(), b.buffer.host_slice::<H>());
        let w_at = |i: usize, j: usize| if transposed { w[j * k + i] } else { w[i * n + j] };
        let eps = if H::DTYPE == DType::BF16 { 2f64.powi(-7) } else { 2f64.powi(-10) };
        for e in 0..batch {
            for r in 0..m {
                for j in 0..n {
                    let (mut sum, mut size) = (0f64, 0f64);
                    for i in 0..k {
                        let p = x[(e * m + r) * k + i].to_acc() as f64 * w_at(i, j).to_acc() as f64;
                        sum += p;
                        size += p.abs();
                    }
                    let g = got[(e * m + r) * n + j].to_acc() as f64;
                    let at = format!("{:?} m {m} k {k} n {n} at ({e}, {r}, {j})", H::DTYPE);
                    if sum.is_nan() {
                        assert!(g.is_nan(), "{at}: {g} for NaN");
                    } else if sum.is_infinite() {
                        assert_eq!(g, sum, "{at}");
                    } else {
                        let tol = sum.abs() * eps + size * 1e-6 + 1e-30;
                        assert!((g - sum).abs() <= tol, "{at}: {g} against {sum}");
                    }
                }
            }
        }
    }

    #[test]
    fn products_match_a_float64_sum() {
        for transposed in [true, false] {
            for (m, k, n) in [(1, 1, 1), (1, 37, 17), (3, 64, 5), (8, 1100, 9), (2, 513, 600)] {
                check::<bf16>(m, k, n, 2, transposed, false);
                check::<f16>(m, k, n, 1, transposed, false);
            }
            check::<bf16>(2, 70, 3, 1, transposed, true);
        }
    }

    #[test]
    fn empty_products() {
        for transposed in [true, false] {
            // k = 0 gives zeros; m or n = 0 an empty output.
            check::<bf16>(2, 0, 3, 1, transposed, false);
            check::<bf16>(0, 4, 3, 1, transposed, false);
            check::<bf16>(2, 4, 0, 1, transposed, false);
        }
    }

    /// An output's bits do not depend on how many outputs the product has (so neither on the
    /// threads' split): each column alone gives the bits it gets among 600.
    #[test]
    fn an_output_does_not_depend_on_the_split() {
        let (m, k, n) = (2, 900, 600);
        let xv = values(m * k, 3);
        let wv = values(n * k, 4);
        let a = data::<bf16>(&xv, Layout::contiguous(&[m, k]));
        let whole =
            data::<bf16>(&wv, Layout::new(vec![k, n].into(), vec![1, k as isize].into(), 0));
        let all = product::<bf16>(&a, &whole, &[m, n]).unwrap().unwrap();
        let all = all.buffer.host_slice::<bf16>();
        for j in [0, 17, 599] {
            let column = Layout::new(vec![k, 1].into(), vec![1, k as isize].into(), j * k);
            let b = ArrayData { layout: column, ..whole.clone() };
            let one = product::<bf16>(&a, &b, &[m, 1]).unwrap().unwrap();
            let one = one.buffer.host_slice::<bf16>();
            for r in 0..m {
                assert_eq!(one[r].to_bits(), all[r * n + j].to_bits(), "column {j} row {r}");
            }
        }
    }

    #[test]
    fn other_layouts_are_left_to_the_general_path() {
        let a = data::<bf16>(&values(9 * 4, 5), Layout::contiguous(&[9, 4]));
        let b = data::<bf16>(&values(12, 6), Layout::contiguous(&[4, 3]));
        assert!(product::<bf16>(&a, &b, &[9, 3]).unwrap().is_none(), "more rows than MAX_ROWS");
        let a = data::<bf16>(&values(8, 5), Layout::contiguous(&[2, 4]));
        let b = data::<bf16>(&values(24, 6), Layout::new(vec![4, 3].into(), vec![6, 2].into(), 0));
        assert!(product::<bf16>(&a, &b, &[2, 3]).unwrap().is_none(), "no unit stride");
    }
}
