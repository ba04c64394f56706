//! Scan: cumulative sum/prod/max/min/log-add-exp along one axis, forward or reversed,
//! inclusive or shifted by one (exclusive). Accumulates in the element's compute type
//! (`Element::Acc`: half floats in f32, integers wrapping) and rounds each output once.
//! Row-contiguous inputs are read as `(outer, n, inner)` blocks: along the last axis each
//! line is a plain loop over slices, along another axis whole rows advance together (a
//! vectorised loop), and both split over threads; other layouts walk line by line.

use crate::complex::C64;
use crate::element::{dispatch, Element};
use crate::lines::Lines;
use crate::scalar::{maximum, BinaryVisitor, Num};
use crate::simd;
use crate::strided::output;
use crate::walk::PARALLEL_ELEMENTS;
use kiln_base::{bail, ArrayData, BinaryOp, DType, Error, Layout, Result, ScanOp};
use rayon::prelude::*;
use std::marker::PhantomData;

/// What a scan needs beyond `Num`: the starting values of exclusive max/min scans and the
/// log-add-exp step.
pub(crate) trait ScanAcc: Num {
    /// The dtype's lowest value (-inf for floats): exclusive cummax and logcumsumexp start here.
    const LOWEST: Self;
    /// The dtype's highest value (+inf for floats): exclusive cummin starts here.
    const HIGHEST: Self;
    /// An exclusive log-add-exp scan's first output (log 0: -inf; -inf + 0i for complex, as
    /// MLX).
    const LOG_ZERO: Self = Self::LOWEST;
    /// `log(exp(a) + exp(b))` without overflow; NaN propagates.
    fn log_add_exp(a: Self, b: Self) -> Self;
}

macro_rules! float_acc {
    ($t:ty) => {
        impl ScanAcc for $t {
            const LOWEST: Self = <$t>::NEG_INFINITY;
            const HIGHEST: Self = <$t>::INFINITY;
            fn log_add_exp(a: $t, b: $t) -> $t {
                if a.is_nan() || b.is_nan() {
                    return <$t>::NAN;
                }
                let (hi, lo) = if a > b { (a, b) } else { (b, a) };
                // -inf + x and inf + x must not become NaN through inf - inf.
                if lo == <$t>::NEG_INFINITY || hi == <$t>::INFINITY {
                    return hi;
                }
                hi + (lo - hi).exp().ln_1p()
            }
        }
    };
}
float_acc!(f32);
float_acc!(f64);

// The primitive only accepts floats for log-add-exp and `scan` checks the dtype again
// before any loop, so the integer form below is never reached; max is its limit anyway.
macro_rules! int_acc {
    ($($t:ty),*) => {$(
        impl ScanAcc for $t {
            const LOWEST: Self = <$t>::MIN;
            const HIGHEST: Self = <$t>::MAX;
            fn log_add_exp(a: $t, b: $t) -> $t {
                maximum(a, b)
            }
        }
    )*};
}
int_acc!(i8, i16, i32, i64, u8, u16, u32, u64);

impl ScanAcc for bool {
    const LOWEST: Self = false;
    const HIGHEST: Self = true;
    fn log_add_exp(a: bool, b: bool) -> bool {
        a | b
    }
}

/// Evaluates a `Scan` primitive.
pub(crate) fn scan(
    op: ScanOp,
    axis: usize,
    reverse: bool,
    inclusive: bool,
    x: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    let name = kiln_base::Primitive::Scan { op, axis, reverse, inclusive }.name();
    if op == ScanOp::LogAddExp && !x.dtype.is_inexact() {
        bail!(Type, name, "Expected a float input, got {}.", x.dtype);
    }
    dispatch!(x.dtype, T => {
        let job = Scan::<T> { name, op, axis, reverse, inclusive, x, shape, ty: PhantomData };
        match op {
            ScanOp::Sum => <T as Element>::Acc::binary(BinaryOp::Add, job),
            ScanOp::Prod => <T as Element>::Acc::binary(BinaryOp::Multiply, job),
            ScanOp::Max => <T as Element>::Acc::binary(BinaryOp::Maximum, job),
            ScanOp::Min => <T as Element>::Acc::binary(BinaryOp::Minimum, job),
            ScanOp::LogAddExp => job.run(<<T as Element>::Acc as ScanAcc>::log_add_exp),
        }
    })
}

struct Scan<'a, T> {
    name: &'static str,
    op: ScanOp,
    axis: usize,
    reverse: bool,
    inclusive: bool,
    x: &'a ArrayData,
    shape: &'a [usize],
    ty: PhantomData<T>,
}

impl<T: Element> Scan<'_, T>
where
    T::Acc: ScanAcc,
{
    fn run(self, f: impl Fn(T::Acc, T::Acc) -> T::Acc + Copy + Send + Sync) -> Result<ArrayData> {
        // An exclusive scan's first output: the op's identity.
        let first = match self.op {
            ScanOp::Sum => T::Acc::ZERO,
            ScanOp::Prod => T::Acc::ONE,
            ScanOp::Max => T::Acc::LOWEST,
            ScanOp::LogAddExp => T::Acc::LOG_ZERO,
            ScanOp::Min => T::Acc::HIGHEST,
        };
        let src = self.x.buffer.host_slice::<T>();
        let l = &self.x.layout;
        let how = How { reverse: self.reverse, inclusive: self.inclusive, first };
        output::<T>(self.name, self.shape, |out| {
            if out.is_empty() {
                return Ok(());
            }
            if l.row_contiguous {
                let n = l.shape[self.axis];
                let inner: usize = l.shape[self.axis + 1..].iter().product();
                let base = &src[l.offset..l.offset + out.len()];
                contiguous::<T, _>(base, out, n, inner, how, f);
                return Ok(());
            }
            let input = Lines::new(l, self.axis);
            let out_lines = Lines::new(&Layout::contiguous(self.shape), self.axis);
            let n = input.len;
            for (si, so) in input.starts().zip(out_lines.starts()) {
                let mut acc = first;
                for step in 0..n {
                    let j = if self.reverse { n - 1 - step } else { step };
                    let v = src[input.at(si, j)].to_acc();
                    // The first element starts the running value as is (keeps -0.0, NaN).
                    let next = if step == 0 { v } else { f(acc, v) };
                    let shown = if self.inclusive { next } else { acc };
                    out[out_lines.at(so, j)] = T::from_acc(shown);
                    acc = next;
                }
            }
            Ok(())
        })
    }
}

/// The direction and kind of a scan, and an exclusive scan's first output.
#[derive(Clone, Copy)]
struct How<A> {
    reverse: bool,
    inclusive: bool,
    first: A,
}

/// A scan of a row-major `(outer, n, inner)` block along its middle axis into `out` (same
/// shape). With `inner == 1` each line is one contiguous run, scanned in a plain loop, lines
/// split over threads; otherwise whole rows of `inner` elements advance together (a
/// vectorised loop across the row), `outer` slabs split over threads.
fn contiguous<T: Element, F: Fn(T::Acc, T::Acc) -> T::Acc + Copy + Send + Sync>(
    src: &[T],
    out: &mut [T],
    n: usize,
    inner: usize,
    how: How<T::Acc>,
    f: F,
) {
    let slab = n * inner;
    let per_task = (PARALLEL_ELEMENTS / slab.max(1)).max(1) * slab;
    let body = |(o, x): (&mut [T], &[T])| {
        for (o, x) in o.chunks_mut(slab).zip(x.chunks(slab)) {
            if inner == 1 {
                line::<T, _>(x, o, how, f);
            } else {
                simd::run(
                    #[inline(always)]
                    || rows::<T, _>(x, o, inner, how, f),
                );
            }
        }
    };
    if out.len() >= 2 * PARALLEL_ELEMENTS && out.len() > per_task {
        out.par_chunks_mut(per_task).zip(src.par_chunks(per_task)).for_each(body);
    } else {
        body((out, src));
    }
}

/// One contiguous line, forward or reversed.
fn line<T: Element, F: Fn(T::Acc, T::Acc) -> T::Acc>(x: &[T], o: &mut [T], how: How<T::Acc>, f: F) {
    let pairs = o.iter_mut().zip(x);
    if how.reverse {
        scan_pairs::<T, _>(pairs.rev(), how, f);
    } else {
        scan_pairs::<T, _>(pairs, how, f);
    }
}

/// Scans `(output, input)` pairs in iteration order.
#[inline(always)]
fn scan_pairs<'a, T: Element, F: Fn(T::Acc, T::Acc) -> T::Acc>(
    mut pairs: impl Iterator<Item = (&'a mut T, &'a T)>,
    how: How<T::Acc>,
    f: F,
) {
    let Some((o, v)) = pairs.next() else { return };
    // The first element starts the running value as is (keeps -0.0, NaN).
    let mut acc = v.to_acc();
    *o = T::from_acc(if how.inclusive { acc } else { how.first });
    if how.inclusive {
        for (o, v) in pairs {
            acc = f(acc, v.to_acc());
            *o = T::from_acc(acc);
        }
    } else {
        for (o, v) in pairs {
            *o = T::from_acc(acc);
            acc = f(acc, v.to_acc());
        }
    }
}

/// One `(n, inner)` slab scanned along n: a running row of `inner` accumulators.
#[inline(always)]
fn rows<T: Element, F: Fn(T::Acc, T::Acc) -> T::Acc>(
    x: &[T],
    o: &mut [T],
    inner: usize,
    how: How<T::Acc>,
    f: F,
) {
    let n = x.len() / inner;
    let at = |step: usize| (if how.reverse { n - 1 - step } else { step }) * inner;
    let first = at(0);
    let mut acc: Vec<T::Acc> = x[first..first + inner].iter().map(|v| v.to_acc()).collect();
    let dst = &mut o[first..first + inner];
    if how.inclusive {
        dst.copy_from_slice(&x[first..first + inner]);
    } else {
        dst.fill(T::from_acc(how.first));
    }
    for step in 1..n {
        let r = at(step);
        let (row, dst) = (&x[r..r + inner], &mut o[r..r + inner]);
        for ((a, d), v) in acc.iter_mut().zip(dst).zip(row) {
            let next = f(*a, v.to_acc());
            *d = T::from_acc(if how.inclusive { next } else { *a });
            *a = next;
        }
    }
}

impl<T: Element> BinaryVisitor<T::Acc> for Scan<'_, T>
where
    T::Acc: ScanAcc,
{
    fn dtype(&self) -> DType {
        T::DTYPE
    }

    fn arith<F: Fn(T::Acc, T::Acc) -> T::Acc + Copy + Send + Sync>(
        self,
        f: F,
    ) -> Result<ArrayData> {
        self.run(f)
    }

    fn compare<F: Fn(T::Acc, T::Acc) -> bool + Copy + Send + Sync>(
        self,
        _f: F,
    ) -> Result<ArrayData> {
        Err(Error::Runtime { op: self.name, msg: "Comparisons are not scans.".into() })
    }
}

impl ScanAcc for C64 {
    const LOWEST: Self = C64::new(f32::NEG_INFINITY, f32::NEG_INFINITY);
    const HIGHEST: Self = C64::new(f32::INFINITY, f32::INFINITY);
    const LOG_ZERO: Self = C64::new(f32::NEG_INFINITY, 0.0);
    fn log_add_exp(a: Self, b: Self) -> Self {
        crate::complex::logaddexp(a, b)
    }
}
