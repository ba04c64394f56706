//! Reduce (sum/prod/max/min, and/or of bools, over sorted axes) and ArgReduce
//! (argmax/argmin on one axis). The input is viewed with the kept axes first and the reduced
//! ones last, so its row-major walk yields each output's group of elements consecutively.

use crate::element::{dispatch, Element};
use crate::scalar::{BinaryVisitor, Num};
use crate::strided::output;
use kiln_base::{bail, ArgReduceOp, ArrayData, BinaryOp, DType, Error, Layout, ReduceOp, Result};
use std::marker::PhantomData;

mod arg;
mod fast;

/// Elements folded linearly before partial results are combined pairwise: float sums get
/// O(log n) error growth at the cost of a few stack slots.
const BLOCK: usize = 128;

/// Elements between two checks for a Ctrl-C in loops that fold one element at a time.
const INTERRUPT_CHECK: usize = 1 << 16;

pub(crate) fn reduce(
    op: ReduceOp,
    axes: &[usize],
    x: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    let bin = match op {
        ReduceOp::Sum => BinaryOp::Add,
        ReduceOp::Prod => BinaryOp::Multiply,
        ReduceOp::Max => BinaryOp::Maximum,
        ReduceOp::Min => BinaryOp::Minimum,
        // On bools (the only input these take) minimum is `and` and maximum is `or`.
        ReduceOp::And => BinaryOp::Minimum,
        ReduceOp::Or => BinaryOp::Maximum,
    };
    dispatch!(x.dtype, T => {
        <T as Element>::Acc::binary(bin, Fold::<T> { op, axes, x, shape, ty: PhantomData })
    })
}

struct Fold<'a, T> {
    op: ReduceOp,
    axes: &'a [usize],
    x: &'a ArrayData,
    shape: &'a [usize],
    ty: PhantomData<T>,
}

/// The input with kept axes first and `reduced` last, and the size of one reduced group.
fn grouped(l: &Layout, reduced: &[usize]) -> (Layout, usize) {
    let mut perm: Vec<usize> = (0..l.ndim()).filter(|a| !reduced.contains(a)).collect();
    perm.extend_from_slice(reduced);
    let group = reduced.iter().map(|&a| l.shape[a]).product();
    (l.transpose(&perm), group)
}

impl<T: Element> BinaryVisitor<T::Acc> for Fold<'_, T> {
    fn dtype(&self) -> DType {
        T::DTYPE
    }

    fn arith<F: Fn(T::Acc, T::Acc) -> T::Acc + Copy + Send + Sync>(
        self,
        f: F,
    ) -> Result<ArrayData> {
        let name = match self.op {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::And => "all",
            ReduceOp::Or => "any",
        };
        let empty = match self.op {
            ReduceOp::Sum | ReduceOp::Or => Some(T::Acc::ZERO),
            ReduceOp::Prod | ReduceOp::And => Some(T::Acc::ONE),
            ReduceOp::Max | ReduceOp::Min => None,
        };
        let (view, group) = grouped(&self.x.layout, self.axes);
        let src = self.x.buffer.host_slice::<T>();
        output::<T>(name, self.shape, |out| {
            if out.is_empty() {
                return Ok(());
            }
            if group == 0 {
                let Some(e) = empty else {
                    bail!(Value, name, "Cannot {name} reduce zero size array.");
                };
                out.fill(T::from_acc(e));
                return Ok(());
            }
            if view.row_contiguous {
                // The groups are consecutive runs of the buffer.
                let base = &src[view.offset..view.offset + out.len() * group];
                fast::runs::<T, _>(base, group, out, f);
            } else if let Some((rows, start)) = fast::leading(&self.x.layout, self.axes) {
                // Leading axes reduced, the kept ones contiguous: fold whole rows.
                let base = &src[start..start + rows * out.len()];
                fast::rows::<T, _>(base, out, f);
            } else {
                let mut idx = view.indices();
                for o in out.iter_mut() {
                    let vals = idx.by_ref().take(group).map(|i| src[i].to_acc());
                    *o = T::from_acc(cascade(vals, f).unwrap_or(T::Acc::ZERO));
                }
            }
            Ok(())
        })
    }

    fn compare<F: Fn(T::Acc, T::Acc) -> bool + Copy + Send + Sync>(
        self,
        _f: F,
    ) -> Result<ArrayData> {
        Err(Error::Runtime { op: "reduce", msg: "Comparisons are not reductions.".into() })
    }
}

/// Folds `items` with `f` in blocks, combining block results like a binary counter
/// (pairwise summation). `None` when there are no items. Stops early on a Ctrl-C (the
/// partial result is discarded by eval): a fold over a broadcast input can be endless.
pub(crate) fn cascade<A: Copy>(
    mut items: impl Iterator<Item = A>,
    f: impl Fn(A, A) -> A,
) -> Option<A> {
    // (partial, level): merging two partials of one level gives the next level.
    let mut stack: Vec<(A, u32)> = Vec::new();
    while let Some(first) = items.next() {
        if kiln_base::interrupt::requested() {
            return Some(first);
        }
        let mut acc = first;
        for v in items.by_ref().take(BLOCK - 1) {
            acc = f(acc, v);
        }
        let mut level = 0;
        while let Some(&(top, l)) = stack.last() {
            if l != level {
                break;
            }
            stack.pop();
            acc = f(top, acc);
            level += 1;
        }
        stack.push((acc, level));
    }
    let (mut acc, _) = stack.pop()?;
    while let Some((top, _)) = stack.pop() {
        acc = f(top, acc);
    }
    Some(acc)
}

/// uint32 index of the first max (argmax) or min (argmin) along `axis`; NaN beats every
/// number, so the first NaN wins (numpy).
pub(crate) fn arg_reduce(
    op: ArgReduceOp,
    axis: usize,
    x: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    dispatch!(x.dtype, T => arg::<T>(op, axis, x, shape))
}

fn arg<T: Element>(
    op: ArgReduceOp,
    axis: usize,
    x: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    let name = match op {
        ArgReduceOp::ArgMax => "argmax",
        ArgReduceOp::ArgMin => "argmin",
    };
    let (view, group) = grouped(&x.layout, &[axis]);
    let src = x.buffer.host_slice::<T>();
    output::<u32>(name, shape, |out| {
        if group == 0 && !out.is_empty() {
            bail!(Value, name, "Cannot {name} reduce zero size array.");
        }
        let l = &x.layout;
        if l.row_contiguous && !out.is_empty() {
            // Read in place: (outer, group, inner) around the axis.
            let outer: usize = l.shape[..axis].iter().product();
            let inner: usize = l.shape[axis + 1..].iter().product();
            let base = &src[l.offset..l.offset + outer * group * inner];
            let dims = (outer, group, inner);
            match op {
                ArgReduceOp::ArgMax => arg::contiguous::<T, _>(base, dims, out, |v, b| v > b),
                ArgReduceOp::ArgMin => arg::contiguous::<T, _>(base, dims, out, |v, b| v < b),
            }
            return Ok(());
        }
        let mut idx = view.indices();
        match op {
            ArgReduceOp::ArgMax => fill_arg::<T>(out, group, &mut idx, src, |v, best| v > best),
            ArgReduceOp::ArgMin => fill_arg::<T>(out, group, &mut idx, src, |v, best| v < best),
        }
        Ok(())
    })
}

fn fill_arg<T: Element>(
    out: &mut [u32],
    group: usize,
    idx: &mut impl Iterator<Item = usize>,
    src: &[T],
    better: impl Fn(T::Acc, T::Acc) -> bool,
) {
    for o in out.iter_mut() {
        let mut vals = idx.by_ref().take(group).map(|i| src[i].to_acc()).enumerate();
        let Some((_, mut best)) = vals.next() else { continue };
        let mut at = 0;
        // Walk the whole group (the shared index iterator must end at the next group),
        // unless a Ctrl-C stops the evaluation (which then discards the result).
        for (j, v) in vals {
            if j % INTERRUPT_CHECK == 0 && kiln_base::interrupt::requested() {
                return;
            }
            if !best.is_nan() && (v.is_nan() || better(v, best)) {
                (best, at) = (v, j);
            }
        }
        *o = at as u32;
    }
}
