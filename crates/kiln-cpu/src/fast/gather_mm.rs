//! `gather_mm` and `gather_qmm` without gathered copies of the picked matrices. The output's
//! matrices are grouped by the `b` matrix (a mixture of experts' expert) they use; each
//! group's rows of `a` are packed into one panel, multiplied by that matrix read in place
//! (quantized: its packed rows dequantized group by group, or once per call for a tall
//! panel) and the products stored at their positions. Each used expert is read once per
//! call, whatever the order of the indices; groups run in parallel.

use super::quantized::{self, Packed, PACKED_ROWS};
use super::{dense_as, elements};
use crate::halfmap::Half;
use crate::matmul::{batch_offsets, matrix, Gemm, PARALLEL_FLOPS};
use faer::{MatMut, MatRef, Par};
use half::{bf16, f16};
use kiln_base::{bail, ArrayData, DType, Layout, Result, HOST};
use rayon::prelude::*;

/// One group: the expert and the output positions that use it.
struct Group {
    expert: usize,
    positions: Vec<usize>,
}

/// The positions of the flat indices `rhs`, grouped by expert (ascending), each group in
/// position order. Indices past the last matrix are clamped to it (as `take`).
fn groups(rhs: &[u32], experts: usize) -> Vec<Group> {
    let mut by_expert: Vec<Vec<usize>> = vec![Vec::new(); experts];
    for (p, &e) in rhs.iter().enumerate() {
        by_expert[(e as usize).min(experts - 1)].push(p);
    }
    by_expert
        .into_iter()
        .enumerate()
        .filter(|(_, ps)| !ps.is_empty())
        .map(|(expert, positions)| Group { expert, positions })
        .collect()
}

/// The index inputs as clamped flat indices: `lhs` into `a`'s batch, `rhs` raw.
fn indices(inputs: &[ArrayData]) -> Result<(Vec<u32>, Vec<u32>)> {
    let [l, r] = [&inputs[0], &inputs[1]].map(|x| dense_as(x, DType::U32));
    Ok((elements::<u32>(&l?).to_vec(), elements::<u32>(&r?).to_vec()))
}

/// Runs `each` on every group (in parallel when the work pays for it) and stores each
/// group's row-major `(positions * m, n)` result at its positions of `out` (`m * n` each).
fn per_group<T: Copy + Default + Send + Sync>(
    groups: &[Group],
    flops_per_position: usize,
    block: usize,
    out: &mut [T],
    each: impl Fn(&Group, Par, &mut Vec<T>) + Sync,
) {
    let total: usize = groups.iter().map(|g| g.positions.len()).sum::<usize>() * flops_per_position;
    let par_of = |g: &Group| {
        let flops = g.positions.len() * flops_per_position;
        if flops >= PARALLEL_FLOPS {
            Par::rayon(0)
        } else {
            Par::Seq
        }
    };
    let run = |g: &Group| {
        let mut res = Vec::new();
        each(g, par_of(g), &mut res);
        res
    };
    let results: Vec<Vec<T>> = if total >= PARALLEL_FLOPS && groups.len() > 1 {
        groups.par_iter().map(run).collect()
    } else {
        groups.iter().map(run).collect()
    };
    for (g, res) in groups.iter().zip(&results) {
        if res.len() < g.positions.len() * block {
            continue; // interrupted: eval discards the output
        }
        for (j, &p) in g.positions.iter().enumerate() {
            out[p * block..(p + 1) * block].copy_from_slice(&res[j * block..(j + 1) * block]);
        }
    }
}

/// The rows of `a` (row-major `(batch, m, k)`) that a group's positions pick, as one panel.
fn panel<T: Copy>(a: &[T], lhs: &[u32], g: &Group, m: usize, k: usize) -> Vec<T> {
    let batch = a.len() / (m * k).max(1);
    let mut out = Vec::with_capacity(g.positions.len() * m * k);
    for &p in &g.positions {
        let i = (lhs[p] as usize).min(batch.saturating_sub(1));
        out.extend_from_slice(&a[i * m * k..(i + 1) * m * k]);
    }
    out
}

pub(crate) fn gather_mm(inputs: &[ArrayData], shape: &[usize]) -> Result<ArrayData> {
    match inputs[0].dtype {
        DType::F64 => gather_mm_as::<f64>(inputs, shape, None),
        DType::F32 => gather_mm_as::<f32>(inputs, shape, None),
        DType::F16 => gather_mm_as::<f32>(inputs, shape, Some(widen_matrix::<f16>)),
        DType::BF16 => gather_mm_as::<f32>(inputs, shape, Some(widen_matrix::<bf16>)),
        d => bail!(Type, "gather_mm", "The CPU backend does not support gather_mm on {d}."),
    }
}

/// The matrix of `b` at buffer offset `offset` (its last two axes), widened to f32 in the
/// order it is stored: row-major, or (a transposed view, as mlx_lm's `weight.swapaxes(-1,
/// -2)`) column-major. Returns whether it is column-major.
fn widen_matrix<H: Half>(b: &ArrayData, offset: usize, out: &mut Vec<f32>) -> bool {
    let l = &b.layout;
    let nd = l.ndim();
    let (rows, cols) = (l.shape[nd - 2], l.shape[nd - 1]);
    let (rs, cs) = (l.strides[nd - 2], l.strides[nd - 1]);
    // Column-major storage: walk the transposed view (unit stride along its rows).
    let by_columns = rs == 1 && cs != 1;
    let (lines, len, step, along) =
        if by_columns { (cols, rows, cs, rs) } else { (rows, cols, rs, cs) };
    let src = b.buffer.host_slice::<H>();
    out.clear();
    out.resize(lines * len, 0.0);
    for (i, dst) in out.chunks_exact_mut(len.max(1)).enumerate().take(lines) {
        let start = (offset as isize).wrapping_add((i as isize).wrapping_mul(step));
        if along == 1 {
            H::widen(&src[start as usize..start as usize + len], dst);
        } else {
            for (j, d) in dst.iter_mut().enumerate() {
                *d = src[start.wrapping_add((j as isize).wrapping_mul(along)) as usize].to_acc();
            }
        }
    }
    by_columns
}

/// Widens one matrix of `b` into a scratch; true when it comes out column-major.
type Widen<T> = fn(&ArrayData, usize, &mut Vec<T>) -> bool;

/// `gather_mm` computed in `T`: `b` read in place when `widen` is None (`b` is `T`), else
/// each used matrix widened by `widen` into a scratch.
fn gather_mm_as<T: Gemm>(
    inputs: &[ArrayData],
    shape: &[usize],
    widen: Option<Widen<T>>,
) -> Result<ArrayData> {
    let (a, b) = (dense_as(&inputs[0], T::DTYPE)?, &inputs[1]);
    let (lhs, rhs) = indices(&inputs[2..4])?;
    let nd = shape.len();
    let (m, n) = (shape[nd - 2], shape[nd - 1]);
    let k = a.layout.shape[a.layout.ndim() - 1];
    let mut out = vec![T::default(); shape.iter().product()];
    let offsets = batch_offsets(&b.layout);
    if !out.is_empty() && !offsets.is_empty() {
        let a = elements::<T>(&a);
        let rows_of = |mb: MatRef<'_, T>, g: &Group, par: Par, res: &mut Vec<T>| {
            let pa = panel(a, &lhs, g, m, k);
            let rows = g.positions.len() * m;
            res.resize(rows * n, T::default());
            if k == 0 {
                return;
            }
            let pa = MatRef::from_row_major_slice(&pa, rows, k);
            T::gemm(MatMut::from_row_major_slice_mut(res, rows, n), pa, mb, par);
        };
        per_group(
            &groups(&rhs, offsets.len()),
            m * n * k.max(1),
            m * n,
            &mut out,
            |g, par, res| {
                if kiln_base::interrupt::requested() {
                    return;
                }
                let mut scratch = Vec::new();
                match widen {
                    None => {
                        let src = b.buffer.host_slice::<T>();
                        rows_of(
                            matrix(src, &b.layout, offsets[g.expert], &mut scratch),
                            g,
                            par,
                            res,
                        );
                    }
                    Some(widen) => {
                        let mb = if widen(b, offsets[g.expert], &mut scratch) {
                            MatRef::from_row_major_slice(&scratch, n, k).transpose()
                        } else {
                            MatRef::from_row_major_slice(&scratch, k, n)
                        };
                        rows_of(mb, g, par, res);
                    }
                }
            },
        );
    }
    let buffer = HOST.from_slice(&out)?;
    Ok(ArrayData { buffer, layout: Layout::contiguous(shape), dtype: T::DTYPE })
}

/// `x[lhs] @ dequantize(w[rhs]).T`, in f32.
pub(crate) fn gather_qmm(
    inputs: &[ArrayData],
    group_size: usize,
    bits: u32,
    shape: &[usize],
) -> Result<ArrayData> {
    let x = dense_as(&inputs[0], DType::F32)?;
    let w = dense_as(&inputs[1], DType::U32)?;
    let (scales, biases) =
        (dense_as(&inputs[2], inputs[2].dtype)?, dense_as(&inputs[3], inputs[3].dtype)?);
    let (lhs, rhs) = indices(&inputs[4..6])?;
    let nd = shape.len();
    let (m, n) = (shape[nd - 2], shape[nd - 1]);
    let k = x.layout.shape[x.layout.ndim() - 1];
    let groups_per_row = k / group_size;
    let (words, params) = (n * k * bits as usize / 32, n * groups_per_row);
    let experts = w.layout.size() / words.max(1);
    let mut out = vec![0f32; shape.iter().product()];
    if !out.is_empty() && experts > 0 {
        let (xs, ws) = (elements::<f32>(&x), elements::<u32>(&w));
        per_group(&groups(&rhs, experts), m * n * k.max(1), m * n, &mut out, |g, par, res| {
            if kiln_base::interrupt::requested() {
                return;
            }
            let e = g.expert;
            let packed_scales = widen_params(&scales, e * params, params);
            let packed_biases = widen_params(&biases, e * params, params);
            let packed = Packed {
                words: &ws[e * words..(e + 1) * words],
                scales: quantized::Params::F32(&packed_scales),
                biases: quantized::Params::F32(&packed_biases),
                n,
                k,
                group_size,
                bits,
            };
            let px = panel(xs, &lhs, g, m, k);
            let rows = g.positions.len() * m;
            res.resize(rows * n, 0.0);
            if rows <= PACKED_ROWS {
                quantized::product(&px, rows, &packed, res);
            } else {
                let mut dense = vec![0f32; n * k];
                quantized::dequantize(&packed, &mut dense);
                let wt = MatRef::from_row_major_slice(&dense, n, k).transpose();
                let px = MatRef::from_row_major_slice(&px, rows, k);
                f32::gemm(MatMut::from_row_major_slice_mut(res, rows, n), px, wt, par);
            }
        });
    }
    let buffer = HOST.from_slice(&out)?;
    Ok(ArrayData { buffer, layout: Layout::contiguous(shape), dtype: DType::F32 })
}

/// `len` scales or biases from element `start` of row-major `p`, as f32.
fn widen_params(p: &ArrayData, start: usize, len: usize) -> Vec<f32> {
    let at = p.layout.offset + start;
    let mut out = vec![0f32; len];
    match p.dtype {
        DType::F16 => f16::widen(&p.buffer.host_slice::<f16>()[at..at + len], &mut out),
        DType::BF16 => bf16::widen(&p.buffer.host_slice::<bf16>()[at..at + len], &mut out),
        DType::F64 => {
            let src = &p.buffer.host_slice::<f64>()[at..at + len];
            out.iter_mut().zip(src).for_each(|(o, &v)| *o = v as f32);
        }
        _ => out.copy_from_slice(&p.buffer.host_slice::<f32>()[at..at + len]),
    }
    out
}
