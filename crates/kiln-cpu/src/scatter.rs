//! Writing into a copy of an input: Scatter (blocks at indexed positions, combined by a
//! reduction), SliceUpdate (a strided region) and MaskedScatter (rows where a mask is true).
//! The output is a fresh row-major copy, except a slice update into a donated base, which
//! writes into it (`slice_update_in_place`).

use crate::element::{dispatch, dispatch_bits, Bool8, Element};
use crate::gather::{block_offsets, checked_start, index_values};
use crate::scalar::{BinaryVisitor, Num};
use crate::strided::{map1, output};
use kiln_base::shape::{row_major_strides, size_of};
use kiln_base::{bail, ArrayData, BinaryOp, DType, Layout, Result, ScatterReduce};
use std::marker::PhantomData;

/// `out = dst; out[block at idx[i]] (op)= updates[i]` for every index position in order.
pub(crate) fn scatter(
    axes: &[usize],
    reduce: ScatterReduce,
    inputs: &[ArrayData],
    shape: &[usize],
) -> Result<ArrayData> {
    let op = kiln_base::Primitive::Scatter { axes: axes.to_vec(), reduce }.name();
    let bin = match reduce {
        ScatterReduce::None => None,
        ScatterReduce::Add => Some(BinaryOp::Add),
        ScatterReduce::Prod => Some(BinaryOp::Multiply),
        ScatterReduce::Max => Some(BinaryOp::Maximum),
        ScatterReduce::Min => Some(BinaryOp::Minimum),
    };
    let job = Job { op, axes, inputs, shape };
    dispatch!(inputs[0].dtype, T => match bin {
        None => job.run::<T, _>(|_, u: T| u),
        Some(bin) => <T as Element>::Acc::binary(bin, Combine::<T> { job, ty: PhantomData }),
    })
}

struct Job<'a> {
    op: &'static str,
    axes: &'a [usize],
    inputs: &'a [ArrayData],
    shape: &'a [usize],
}

impl Job<'_> {
    fn run<T: Element, F: Fn(T, T) -> T>(&self, f: F) -> Result<ArrayData> {
        let (dst, upd) = (&self.inputs[0], &self.inputs[self.inputs.len() - 1]);
        let idx = self.inputs[1..self.inputs.len() - 1]
            .iter()
            .map(|x| index_values(self.op, x))
            .collect::<Result<Vec<_>>>()?;
        let block_shape = &upd.layout.shape[upd.layout.ndim() - self.shape.len()..];
        let out_strides = row_major_strides(self.shape);
        let block = block_offsets(block_shape, &out_strides);
        let mut values = vec![T::zeroed(); upd.layout.size()];
        map1(upd, &mut values, |v: T| v);
        output::<T>(self.op, self.shape, |out| {
            map1(dst, out, |v: T| v);
            if block.is_empty() {
                return Ok(());
            }
            'blocks: for (i, chunk) in values.chunks(block.len()).enumerate() {
                let mut base = 0isize;
                for (j, &ax) in self.axes.iter().enumerate() {
                    // Out of range: dropped rather than written out of bounds.
                    let Some(start) = checked_start(idx[j][i], self.shape[ax], block_shape[ax])
                    else {
                        continue 'blocks;
                    };
                    base += start as isize * out_strides[ax];
                }
                for (&u, &off) in chunk.iter().zip(&block) {
                    let o = &mut out[(base + off) as usize];
                    *o = f(*o, u);
                }
            }
            Ok(())
        })
    }
}

/// Hands the dtype's reduction closure (from the scalar op table) to the scatter loop.
struct Combine<'a, T> {
    job: Job<'a>,
    ty: PhantomData<T>,
}

impl<T: Element> BinaryVisitor<T::Acc> for Combine<'_, T> {
    fn dtype(&self) -> DType {
        T::DTYPE
    }

    fn arith<F: Fn(T::Acc, T::Acc) -> T::Acc + Copy + Send + Sync>(
        self,
        f: F,
    ) -> Result<ArrayData> {
        self.job.run::<T, _>(|a: T, b: T| T::from_acc(f(a.to_acc(), b.to_acc())))
    }

    fn compare<F: Fn(T::Acc, T::Acc) -> bool + Copy + Send + Sync>(
        self,
        _f: F,
    ) -> Result<ArrayData> {
        bail!(Runtime, self.job.op, "A scatter reduction cannot be a comparison.")
    }
}

/// `out = dst; out[start::step, len] = update`.
pub(crate) fn slice_update(
    start: &[usize],
    step: &[isize],
    len: &[usize],
    dst: &ArrayData,
    update: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    let region = Layout::contiguous(shape).slice(start, step, len);
    dispatch_bits!(dst.dtype, T => {
        let src = update.buffer.host_slice::<T>();
        let mut out = output::<T>("slice_update", shape, |out| {
            map1(dst, out, |v: T| v);
            for (o, u) in region.indices().zip(update.layout.indices()) {
                out[o] = src[u];
            }
            Ok(())
        })?;
        out.dtype = dst.dtype;
        Ok(out)
    })
}

/// `slice_update` written into `dst`'s own buffer, when `dst` is donated (nothing but this
/// call references its buffer: the caller checked) and row-major over `shape`: a KV cache's
/// new entries cost their own bytes, not a copy of the cache. `None` for other layouts.
pub(crate) fn slice_update_in_place(
    (start, step, len): (&[usize], &[isize], &[usize]),
    dst: &ArrayData,
    update: &ArrayData,
    shape: &[usize],
) -> Result<Option<ArrayData>> {
    let whole = Layout::contiguous(shape);
    if dst.layout != whole || dst.dtype != update.dtype {
        return Ok(None);
    }
    let region = whole.slice(start, step, len);
    let n = size_of(shape);
    dispatch_bits!(dst.dtype, T => {
        if dst.buffer.host_slice::<T>().len() < n {
            return Ok(None);
        }
        let src = update.buffer.host_slice::<T>();
        let base = dst.buffer.as_ptr() as *mut T;
        for (o, u) in region.indices().zip(update.layout.indices()) {
            assert!(o < n, "slice_update: region index {o} past {n} elements");
            // SAFETY: `o < n` elements of dst's host buffer (checked above); the buffer is
            // donated, so no other handle reads or writes it meanwhile, and `update` does not
            // share it (a shared buffer would not count as donated).
            unsafe { *base.add(o) = src[u] };
        }
    });
    Ok(Some(dst.clone()))
}

/// `out = dst`, then each row (trailing `shape[m..]` block) whose mask entry is true takes
/// the next row of `values`, in row-major order.
pub(crate) fn masked_scatter(
    dst: &ArrayData,
    mask: &ArrayData,
    values: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    let op = "masked_scatter";
    let mut flags = vec![Bool8(0); mask.layout.size()];
    map1(mask, &mut flags, |v: Bool8| v);
    let inner = size_of(&shape[mask.layout.ndim()..]);
    let rows = values.layout.shape[0];
    dispatch_bits!(dst.dtype, T => {
        let src = values.buffer.host_slice::<T>();
        let mut out = output::<T>(op, shape, |out| {
            map1(dst, out, |v: T| v);
            if inner == 0 {
                return Ok(());
            }
            let mut from = values.layout.indices();
            let mut used = 0usize;
            for (chunk, flag) in out.chunks_mut(inner).zip(&flags) {
                if flag.0 == 0 {
                    continue;
                }
                if used == rows {
                    bail!(Runtime, op, "Source does not have enough elements for mask.");
                }
                used += 1;
                for (o, i) in chunk.iter_mut().zip(from.by_ref()) {
                    *o = src[i];
                }
            }
            Ok(())
        })?;
        out.dtype = dst.dtype;
        Ok(out)
    })
}
