//! Matmul `(..., m, k) @ (..., k, n)` through faer. f32/f64 operands with a unit stride
//! are passed to faer as strided views of the input buffers (transposed, row-sliced and
//! broadcast operands are read in place); reversed or doubly strided ones are copied. f16/bf16 are converted to f32 in bulk, multiplied, and
//! rounded back in bulk.

use crate::element::Element;
use crate::halfmap::Half;
use crate::strided::{output, output_full};
use crate::walk::{par_chunks, Plan};
use faer::linalg::matmul::matmul as faer_matmul;
use faer::{Accum, MatMut, MatRef, Par};
use half::{bf16, f16};
use kiln_base::{bail, ArrayData, DType, Layout, Result};
use rayon::prelude::*;

pub(crate) use crate::walk::PARALLEL_FLOPS;

/// Multiply-adds per panel of a huge product (about 0.1 s on two cores): the interval at
/// which a Ctrl-C is seen.
const PANEL_FLOPS: usize = 1 << 33;

/// The float types faer multiplies natively.
pub(crate) trait Gemm: Element + Default {
    fn gemm(dst: MatMut<'_, Self>, a: MatRef<'_, Self>, b: MatRef<'_, Self>, par: Par);
}

macro_rules! gemm {
    ($t:ty) => {
        impl Gemm for $t {
            fn gemm(dst: MatMut<'_, $t>, a: MatRef<'_, $t>, b: MatRef<'_, $t>, par: Par) {
                faer_matmul(dst, Accum::Replace, a, b, 1.0, par);
            }
        }
    };
}
gemm!(f32);
gemm!(f64);

pub(crate) fn matmul(a: &ArrayData, b: &ArrayData, shape: &[usize]) -> Result<ArrayData> {
    match a.dtype {
        DType::F32 => native::<f32>(a, b, shape),
        DType::F64 => native::<f64>(a, b, shape),
        DType::F16 => widened::<f16>(a, b, shape),
        DType::BF16 => widened::<bf16>(a, b, shape),
        DType::C64 => crate::complex_linalg::matmul(a, b, shape),
        d => bail!(Type, "matmul", "The CPU backend does not support matmul on {d}."),
    }
}

fn native<T: Gemm>(a: &ArrayData, b: &ArrayData, shape: &[usize]) -> Result<ArrayData> {
    output::<T>("matmul", shape, |out| {
        batched(a.buffer.host_slice::<T>(), &a.layout, b.buffer.host_slice::<T>(), &b.layout, out);
        Ok(())
    })
}

/// Half-precision inputs: widened to f32 in bulk (`widen_view`), multiplied, and the
/// result rounded back once in bulk (few-row products: `matvec.rs`; a big `W.T`: `by_panels`). Conversions run on every thread, into pooled blocks (a
/// fresh allocation of a big operand page-faults on every call).
fn widened<H: Half>(a: &ArrayData, b: &ArrayData, shape: &[usize]) -> Result<ArrayData> {
    // A few rows against a big B (a decode step) widen B a run at a time instead.
    if let Some(out) = crate::matvec::product::<H>(a, b, shape)? {
        return Ok(out);
    }
    if let Some(out) = by_panels::<H>(a, b, shape)? {
        return Ok(out);
    }
    let (wa, la) = widen_view::<H>(a.buffer.host_slice::<H>(), &a.layout)?;
    let (wb, lb) = widen_view::<H>(b.buffer.host_slice::<H>(), &b.layout)?;
    let (wa, wb) = (wa.buffer.host_slice::<f32>(), wb.buffer.host_slice::<f32>());
    let acc = output_full::<f32>("matmul", shape, |acc| {
        batched(wa, &la, wb, &lb, acc);
        Ok(())
    })?;
    output_full::<H>("matmul", shape, |out| {
        let acc = acc.buffer.host_slice::<f32>();
        par_chunks(out, |chunk, at| H::narrow(&acc[at..at + chunk.len()], chunk));
        Ok(())
    })
}

/// float32 values of B a panel of `by_panels` holds at most (4 MB).
const PANEL_VALUES: usize = 1 << 20;
/// Fewest columns a panel of `by_panels` takes.
const PANEL_COLUMNS: usize = 128;

/// One half-float product against a big `W.T` (B's k axis of unit stride: a prefill's
/// `x @ W.T`), B widened a panel of columns at a time (a panel a task, each multiplied by
/// faer), so its float32 copy never exists whole: the lm_head of a 128k vocabulary would be
/// a 1 GB copy. `None` for other products (batches, other layouts, small B).
fn by_panels<H: Half>(a: &ArrayData, b: &ArrayData, shape: &[usize]) -> Result<Option<ArrayData>> {
    let (la, lb) = (&a.layout, &b.layout);
    let nd = la.ndim();
    if nd < 2 || lb.ndim() != nd || la.shape[..nd - 2].iter().product::<usize>() != 1 {
        return Ok(None);
    }
    let (m, k, n) = (la.shape[nd - 2], la.shape[nd - 1], lb.shape[nd - 1]);
    let (rs, cs) = (lb.strides[nd - 2], lb.strides[nd - 1]);
    if rs != 1 || cs < k as isize || m == 0 || k * n < 2 * PANEL_VALUES {
        return Ok(None);
    }
    let (wa, la) = widen_view::<H>(a.buffer.host_slice::<H>(), la)?;
    let mut scratch = Vec::new();
    let xs = matrix(wa.buffer.host_slice::<f32>(), &la, la.offset, &mut scratch);
    let src = b.buffer.host_slice::<H>();
    let panel = (PANEL_VALUES / k).max(PANEL_COLUMNS).min(n);
    let panels: Vec<Vec<f32>> = (0..n.div_ceil(panel))
        .into_par_iter()
        .map(|p| {
            let (first, columns) = (p * panel, panel.min(n - p * panel));
            let mut res = vec![0f32; m * columns];
            if kiln_base::interrupt::requested() {
                return res; // eval discards the output
            }
            // Column j of B is row j of W: k contiguous values from `offset + j * cs`.
            let mut dense = vec![0f32; columns * k];
            for (j, row) in dense.chunks_exact_mut(k).enumerate() {
                let at = lb.offset + (first + j) * cs as usize;
                H::widen(&src[at..at + k], row);
            }
            let w = MatRef::from_row_major_slice(&dense, columns, k).transpose();
            f32::gemm(MatMut::from_row_major_slice_mut(&mut res, m, columns), xs, w, Par::Seq);
            res
        })
        .collect();
    let out = output_full::<H>("matmul", shape, |out| {
        for (p, res) in panels.iter().enumerate() {
            let (first, columns) = (p * panel, panel.min(n - p * panel));
            for (r, row) in res.chunks_exact(columns).enumerate() {
                H::narrow(row, &mut out[r * n + first..r * n + first + columns]);
            }
        }
        Ok(())
    })?;
    Ok(Some(out))
}

/// The elements `l` addresses in `src`, widened to f32, and their layout in the result.
/// When the view covers most of the buffer span it lies in (contiguous, transposed,
/// broadcast, reversed, lightly sliced), the span is converted as one slice and the layout
/// kept (offset shifted); a sparse view (a big step, a small slice of a big array) is
/// gathered row-major, converting each contiguous run in bulk.
fn widen_view<H: Half>(src: &[H], l: &Layout) -> Result<(ArrayData, Layout)> {
    let size = l.size();
    let widened = |n: usize, fill: &dyn Fn(&mut [f32])| {
        output_full::<f32>("matmul", &[n], |dst| {
            fill(dst);
            Ok(())
        })
    };
    if size == 0 {
        return Ok((widened(0, &|_| {})?, Layout::contiguous(&l.shape)));
    }
    // The lowest and highest buffer index the view touches (in bounds: validated layout).
    let (mut lo, mut hi) = (l.offset as isize, l.offset as isize);
    for (&d, &s) in l.shape.iter().zip(&l.strides) {
        let span = (d as isize - 1).wrapping_mul(s);
        if span < 0 {
            lo = lo.wrapping_add(span);
        } else {
            hi = hi.wrapping_add(span);
        }
    }
    let (lo, hi) = (lo as usize, hi as usize);
    if hi - lo < 2 * size {
        let span = &src[lo..=hi];
        let dst = widened(span.len(), &|dst| {
            par_chunks(dst, |chunk, at| H::widen(&span[at..at + chunk.len()], chunk))
        })?;
        let view = Layout::new(l.shape.clone(), l.strides.clone(), l.offset - lo);
        return Ok((dst, view));
    }
    let plan = Plan::new(&l.shape, [l]);
    let dst = widened(size, &|dst| {
        par_chunks(dst, |chunk, at| {
            plan.runs(at, at + chunk.len(), |pos, [i], [s], n| {
                let out = &mut chunk[pos - at..pos - at + n];
                if s == 1 {
                    H::widen(&src[i as usize..i as usize + n], out);
                } else {
                    for (t, o) in out.iter_mut().enumerate() {
                        *o = src[i.wrapping_add((t as isize).wrapping_mul(s)) as usize].to_acc();
                    }
                }
            })
        })
    })?;
    Ok((dst, Layout::contiguous(&l.shape)))
}

/// One faer call per batch element, writing row-major `(batch, m, n)` into `out`. A big
/// product is threaded inside faer; many small ones are spread over threads by batch.
fn batched<T: Gemm>(a: &[T], la: &Layout, b: &[T], lb: &Layout, out: &mut [T]) {
    let nd = la.ndim();
    let (m, k, n) = (la.shape[nd - 2], la.shape[nd - 1], lb.shape[nd - 1]);
    if m * n == 0 {
        return;
    }
    if k == 0 {
        out.fill(T::default());
        return;
    }
    let (oa, ob) = (batch_offsets(la), batch_offsets(lb));
    // A product long enough to take seconds runs in panels of rows, and a Ctrl-C stops it
    // between panels (or between batch elements); eval discards the output.
    let panel = (PANEL_FLOPS / (n * k)).max(32).min(m);
    let one = |dst: &mut [T], oa: usize, ob: usize, par: Par, scratch: &mut [Vec<T>; 2]| {
        let [sa, sb] = scratch;
        let (ma, mb) = (matrix(a, la, oa, sa), matrix(b, lb, ob, sb));
        for r0 in (0..m).step_by(panel) {
            if kiln_base::interrupt::requested() {
                return;
            }
            let rows = panel.min(m - r0);
            let dst = MatMut::from_row_major_slice_mut(&mut dst[r0 * n..(r0 + rows) * n], rows, n);
            T::gemm(dst, ma.subrows(r0, rows), mb, par);
        }
    };
    let flops = m * n * k;
    if flops >= PARALLEL_FLOPS || oa.len() < 2 || flops * oa.len() < PARALLEL_FLOPS {
        let par = if flops >= PARALLEL_FLOPS { Par::rayon(0) } else { Par::Seq };
        let mut scratch = [Vec::new(), Vec::new()];
        for ((dst, &oa), &ob) in out.chunks_mut(m * n).zip(&oa).zip(&ob) {
            one(dst, oa, ob, par, &mut scratch);
        }
        return;
    }
    // Enough batch elements of PARALLEL_FLOPS / 4 or more per task to pay for it.
    let per_task = (PARALLEL_FLOPS / 4).div_ceil(flops);
    out.par_chunks_mut(m * n * per_task).enumerate().for_each(|(t, chunk)| {
        let mut scratch = [Vec::new(), Vec::new()];
        for (j, dst) in chunk.chunks_mut(m * n).enumerate() {
            let e = t * per_task + j;
            one(dst, oa[e], ob[e], Par::Seq, &mut scratch);
        }
    });
}

/// Buffer offset of each batch element's matrix, in row-major batch order.
pub(crate) fn batch_offsets(l: &Layout) -> Vec<usize> {
    let nd = l.ndim();
    let batch = Layout::new(l.shape[..nd - 2].into(), l.strides[..nd - 2].into(), l.offset);
    batch.indices().collect()
}

/// The matrix whose (0, 0) element is `src[offset]`, as a faer view. faer reads a matrix
/// with one unit stride and no negative one (row- or column-major, maybe with a longer
/// leading dimension or a broadcast axis) in place at full speed; other views (a reversed
/// axis, two non-unit strides) take its slower generic path (a reversed operand: 1.25x the
/// time of a dense one at 1024^3, measured), so they are copied row-major into `scratch`.
pub(crate) fn matrix<'a, T: Copy>(
    src: &'a [T],
    l: &Layout,
    offset: usize,
    scratch: &'a mut Vec<T>,
) -> MatRef<'a, T> {
    let nd = l.ndim();
    let (rows, cols) = (l.shape[nd - 2], l.shape[nd - 1]);
    let (rs, cs) = (l.strides[nd - 2], l.strides[nd - 1]);
    if rows == 0 || cols == 0 {
        return MatRef::from_row_major_slice(&src[..0], rows, cols);
    }
    let unit = cs == 1 || rs == 1 || rows == 1 || cols == 1;
    if unit && rs >= 0 && cs >= 0 {
        // SAFETY: kiln-cpu validates every input layout against its buffer before a kernel
        // runs (`strided::validate`), so `offset + i * rs + j * cs` lies inside `src` for
        // every `i < rows`, `j < cols`: the pointer to element (0, 0) plus those offsets
        // stays inside the slice's one allocation, is aligned (an element of a `&[T]`),
        // initialised, and only read (the output is another buffer) for the borrow's life.
        return unsafe { MatRef::from_raw_parts(src.as_ptr().add(offset), rows, cols, rs, cs) };
    }
    scratch.clear();
    for i in 0..rows {
        let start = (offset as isize).wrapping_add((i as isize).wrapping_mul(rs));
        scratch.extend(
            (0..cols).map(|j| src[start.wrapping_add((j as isize).wrapping_mul(cs)) as usize]),
        );
    }
    MatRef::from_row_major_slice(scratch.as_slice(), rows, cols)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_base::HOST;

    /// A big `W.T` in panels (600 columns of k 4096: three panels; W's rows 4100 apart, as a
    /// slice of a wider W) against a float64 sum of the same bfloat16 values.
    #[test]
    fn panels_match_a_float64_sum() {
        let (m, k, n, ld) = (20, 4096, 600, 4100);
        let value = |i: usize, s: usize| bf16::from_f32(((i * 37 + s) % 101) as f32 * 0.02 - 1.0);
        let xv: Vec<bf16> = (0..m * k).map(|i| value(i, 1)).collect();
        let wv: Vec<bf16> = (0..n * ld).map(|i| value(i, 2)).collect();
        let a = ArrayData {
            buffer: HOST.from_slice(&xv).unwrap(),
            layout: Layout::contiguous(&[m, k]),
            dtype: DType::BF16,
        };
        let b = ArrayData {
            buffer: HOST.from_slice(&wv).unwrap(),
            layout: Layout::new(vec![k, n].into(), vec![1, ld as isize].into(), 0),
            dtype: DType::BF16,
        };
        let out = by_panels::<bf16>(&a, &b, &[m, n]).unwrap().expect("a big W.T");
        let got = out.buffer.host_slice::<bf16>();
        for r in 0..m {
            for j in 0..n {
                let want: f64 =
                    (0..k).map(|i| xv[r * k + i].to_f64() * wv[j * ld + i].to_f64()).sum();
                let g = got[r * n + j].to_f64();
                assert!((g - want).abs() <= want.abs() / 128.0 + 1e-3, "({r}, {j}): {g} {want}");
            }
        }
        let small =
            ArrayData { layout: Layout::new(vec![64, 8].into(), vec![1, 64].into(), 0), ..b };
        let a = ArrayData { layout: Layout::contiguous(&[20, 64]), ..a };
        assert!(by_panels::<bf16>(&a, &small, &[20, 8]).unwrap().is_none(), "small B");
    }
}
