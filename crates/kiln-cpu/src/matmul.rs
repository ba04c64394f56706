//! Matmul `(..., m, k) @ (..., k, n)` through faer. f32/f64 matrices that are row- or
//! column-major in memory are passed as views; other strides are gathered first. f16/bf16
//! are converted to f32, multiplied, and rounded back.

use crate::element::Element;
use crate::strided::output;
use bytemuck::Pod;
use faer::linalg::matmul::matmul as faer_matmul;
use faer::{Accum, MatMut, MatRef, Par};
use half::{bf16, f16};
use kiln_base::shape::size_of;
use kiln_base::{bail, ArrayData, DType, Layout, Result};

/// Below this many multiply-adds, threading costs more than it saves.
pub(crate) const PARALLEL_FLOPS: usize = 1 << 18;

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

/// Half-precision inputs: multiply in f32 on contiguous copies, round the result once.
fn widened<T: Element<Acc = f32>>(
    a: &ArrayData,
    b: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    let widen = |x: &ArrayData| -> (Vec<f32>, Layout) {
        let src = x.buffer.host_slice::<T>();
        (x.layout.indices().map(|i| src[i].to_acc()).collect(), Layout::contiguous(&x.layout.shape))
    };
    let ((wa, la), (wb, lb)) = (widen(a), widen(b));
    let mut acc = vec![0f32; size_of(shape)];
    batched(&wa, &la, &wb, &lb, &mut acc);
    output::<T>("matmul", shape, |out| {
        for (o, &v) in out.iter_mut().zip(&acc) {
            *o = T::from_acc(v);
        }
        Ok(())
    })
}

/// One faer call per batch element, writing row-major `(batch, m, n)` into `out`.
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
    let par = if m * n * k >= PARALLEL_FLOPS { Par::rayon(0) } else { Par::Seq };
    let (oa, ob) = (batch_offsets(la), batch_offsets(lb));
    let (mut sa, mut sb) = (Vec::new(), Vec::new());
    for ((dst, &oa), &ob) in out.chunks_mut(m * n).zip(&oa).zip(&ob) {
        let ma = matrix(a, la, oa, &mut sa);
        let mb = matrix(b, lb, ob, &mut sb);
        T::gemm(MatMut::from_row_major_slice_mut(dst, m, n), ma, mb, par);
    }
}

/// Buffer offset of each batch element's matrix, in row-major batch order.
fn batch_offsets(l: &Layout) -> Vec<usize> {
    let nd = l.ndim();
    let batch = Layout::new(l.shape[..nd - 2].into(), l.strides[..nd - 2].into(), l.offset);
    batch.indices().collect()
}

/// The matrix at `offset` as a faer view: directly when row- or column-major in memory,
/// else gathered row-major into `scratch`.
fn matrix<'a, T: Pod>(
    src: &'a [T],
    l: &Layout,
    offset: usize,
    scratch: &'a mut Vec<T>,
) -> MatRef<'a, T> {
    let nd = l.ndim();
    let (rows, cols) = (l.shape[nd - 2], l.shape[nd - 1]);
    let (rs, cs) = (l.strides[nd - 2], l.strides[nd - 1]);
    let dense = &src[offset..];
    if (cs == 1 || cols == 1) && (rs == cols as isize || rows == 1) {
        return MatRef::from_row_major_slice(&dense[..rows * cols], rows, cols);
    }
    if (rs == 1 || rows == 1) && (cs == rows as isize || cols == 1) {
        return MatRef::from_column_major_slice(&dense[..rows * cols], rows, cols);
    }
    let view = Layout::new([rows, cols].as_slice().into(), [rs, cs].as_slice().into(), offset);
    scratch.clear();
    scratch.extend(view.indices().map(|i| src[i]));
    MatRef::from_row_major_slice(scratch.as_slice(), rows, cols)
}
