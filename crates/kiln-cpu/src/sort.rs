//! Sort, argsort, partition and argpartition along one axis, and binary search into a
//! sorted sequence. Floats order NaN after every number (numpy's rule; -0.0 and 0.0 tie).
//! Sorting is stable; partition only guarantees the kth element in place with no greater
//! element before it and no smaller one after.

use crate::element::{dispatch, Element};
use crate::lines::Lines;
use crate::scalar::Num;
use crate::strided::map1;
use crate::strided::output;
use kiln_base::{ensure, ArrayData, Layout, Primitive, Result};
use std::cmp::Ordering;

/// The total order used everywhere here: IEEE order with NaN last (NaNs tied). A complex
/// value is NaN when either part is (MLX's order); its `partial_cmp` still orders by the
/// real parts when only an imaginary part is NaN, so NaN is checked before it.
#[inline(always)]
fn order<A: Num>(a: &A, b: &A) -> Ordering {
    match a.partial_cmp(b) {
        Some(o) if !(a.is_nan() || b.is_nan()) => o,
        _ => a.is_nan().cmp(&b.is_nan()),
    }
}

/// Evaluates `Sort` (`kth` None) or `Partition` (`kth` Some).
pub(crate) fn sort(
    prim: &Primitive,
    axis: usize,
    kth: Option<usize>,
    arg: bool,
    x: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    dispatch!(x.dtype, T => sort_typed::<T>(prim.name(), axis, kth, arg, x, shape))
}

/// An element's compute value and its position along the line.
type Keyed<A> = (A, u32);

fn sort_typed<T: Element>(
    name: &'static str,
    axis: usize,
    kth: Option<usize>,
    arg: bool,
    x: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    let src = x.buffer.host_slice::<T>();
    let input = Lines::new(&x.layout, axis);
    let out_lines = Lines::new(&Layout::contiguous(shape), axis);
    ensure!(
        input.len <= u32::MAX as usize + 1,
        Value,
        name,
        "Axis of {} elements is too long for uint32 indices.",
        input.len
    );
    if arg {
        output::<u32>(name, shape, |out| {
            ordered_lines::<T>(src, &input, &out_lines, kth, |_, so, line| {
                for (j, &(_, i)) in line.iter().enumerate() {
                    out[out_lines.at(so, j)] = i;
                }
            });
            Ok(())
        })
    } else {
        output::<T>(name, shape, |out| {
            // The original elements are copied (bit-exact: -0.0 and NaN payloads survive).
            ordered_lines::<T>(src, &input, &out_lines, kth, |si, so, line| {
                for (j, &(_, i)) in line.iter().enumerate() {
                    out[out_lines.at(so, j)] = src[input.at(si, i as usize)];
                }
            });
            Ok(())
        })
    }
}

/// Orders each line (sorted, or partitioned at `kth`) and hands it to `emit` with the
/// line's first input and output indices.
fn ordered_lines<T: Element>(
    src: &[T],
    input: &Lines,
    out_lines: &Lines,
    kth: Option<usize>,
    mut emit: impl FnMut(usize, usize, &[Keyed<T::Acc>]),
) {
    let n = input.len;
    let mut line: Vec<Keyed<T::Acc>> = Vec::with_capacity(n);
    for (si, so) in input.starts().zip(out_lines.starts()) {
        line.clear();
        line.extend((0..n).map(|j| (src[input.at(si, j)].to_acc(), j as u32)));
        match kth {
            None => line.sort_by(|a, b| order(&a.0, &b.0)),
            Some(k) => {
                line.select_nth_unstable_by(k, |a, b| order(&a.0, &b.0));
            }
        }
        emit(si, so, &line);
    }
}

/// Evaluates `SearchSorted`: for each value, the number of sequence elements ordered before
/// it (`right`: before or equal), by binary search over the (strided) 1-d sequence.
pub(crate) fn search_sorted(
    right: bool,
    seq: &ArrayData,
    values: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    dispatch!(seq.dtype, T => search_typed::<T>(right, seq, values, shape))
}

fn search_typed<T: Element>(
    right: bool,
    seq: &ArrayData,
    values: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    let name = "searchsorted";
    let line = Lines::new(&seq.layout, 0);
    let n = line.len;
    ensure!(
        n <= u32::MAX as usize,
        Value,
        name,
        "Sequence of {n} elements is too long for uint32."
    );
    let src = seq.buffer.host_slice::<T>();
    // A 1-d sequence is one line, starting at the layout's offset.
    let start = seq.layout.offset;
    output::<u32>(name, shape, |out| {
        map1::<T, u32>(values, out, |v| {
            let v = v.to_acc();
            let (mut lo, mut hi) = (0, n);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                let o = order(&src[line.at(start, mid)].to_acc(), &v);
                let before = if right { o != Ordering::Greater } else { o == Ordering::Less };
                if before {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            lo as u32
        });
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::complex::C64;

    #[test]
    fn complex_nan_goes_last_whichever_part_is_nan() {
        let nan = f32::NAN;
        let mut v = [
            C64::new(2.0, 0.0),
            C64::new(1.0, nan),
            C64::new(1.0, 1.0),
            C64::new(nan, -3.0),
            C64::new(-2.0, nan),
            C64::new(0.0, 0.0),
        ];
        v.sort_by(order);
        let got: Vec<(f32, f32)> = v.iter().map(|z| (z.re(), z.im())).collect();
        // Numbers lexicographically, then the NaN values tied (stable: input order).
        assert_eq!(
            format!("{got:?}"),
            "[(0.0, 0.0), (1.0, 1.0), (2.0, 0.0), (1.0, NaN), (NaN, -3.0), (-2.0, NaN)]"
        );
        assert_eq!(order(&1.0f32, &f32::NAN), Ordering::Less);
        assert_eq!(order(&f32::NAN, &f32::NAN), Ordering::Equal);
        assert_eq!(order(&-0.0f32, &0.0), Ordering::Equal);
    }
}
