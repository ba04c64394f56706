//! Sort, argsort, partition and argpartition along one axis, and binary search into a
//! sorted sequence. Floats order NaN after every number (numpy's rule; -0.0 and 0.0 tie).
//! Sorting is stable; partition only guarantees the kth element in place with no greater
//! element before it and no smaller one after, and otherwise leaves the elements in the
//! order libstdc++'s `std::nth_element` (which MLX's CPU kernels call) leaves them.

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
            ordered_lines::<T>(src, &input, &out_lines, kth, true, |_, so, line| {
                for (j, &(_, i)) in line.iter().enumerate() {
                    out[out_lines.at(so, j)] = i;
                }
            });
            Ok(())
        })
    } else {
        output::<T>(name, shape, |out| {
            // The original elements are copied (bit-exact: -0.0 and NaN payloads survive).
            ordered_lines::<T>(src, &input, &out_lines, kth, false, |si, so, line| {
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
    arg: bool,
    mut emit: impl FnMut(usize, usize, &[Keyed<T::Acc>]),
) {
    let n = input.len;
    let mut line: Vec<Keyed<T::Acc>> = Vec::with_capacity(n);
    // MLX's orders for `std::nth_element`: values alone for partition; for argpartition
    // equal values by position (NaNs, which never compare equal, are not).
    let by_value = |a: &Keyed<T::Acc>, b: &Keyed<T::Acc>| order(&a.0, &b.0) == Ordering::Less;
    let by_position = |a: &Keyed<T::Acc>, b: &Keyed<T::Acc>| match order(&a.0, &b.0) {
        Ordering::Less => true,
        Ordering::Equal => !a.0.is_nan() && a.1 < b.1,
        Ordering::Greater => false,
    };
    for (si, so) in input.starts().zip(out_lines.starts()) {
        line.clear();
        line.extend((0..n).map(|j| (src[input.at(si, j)].to_acc(), j as u32)));
        match kth {
            None => line.sort_by(|a, b| order(&a.0, &b.0)),
            Some(k) if arg => nth_element(&mut line, k, &by_position),
            Some(k) => nth_element(&mut line, k, &by_value),
        }
        emit(si, so, &line);
    }
}

/// `std::nth_element` as libstdc++ implements it (introselect: median-of-three pivot moved
/// to the front, unguarded Hoare partition, insertion sort below four elements, heap select
/// past `2 log2 n` rounds), so that partitions come out in the same element order as MLX's
/// CPU kernels, which call it. `less` must be a strict weak order.
fn nth_element<E: Copy>(v: &mut [E], nth: usize, less: &impl Fn(&E, &E) -> bool) {
    let n = v.len();
    if n == 0 || nth >= n {
        return;
    }
    let (mut first, mut last) = (0usize, n);
    let mut depth = 2 * (usize::BITS - 1 - n.leading_zeros()) as usize;
    while last - first > 3 {
        if depth == 0 {
            heap_select(&mut v[first..last], nth + 1 - first, less);
            v.swap(first, nth);
            return;
        }
        depth -= 1;
        let cut = partition_pivot(v, first, last, less);
        if cut <= nth {
            first = cut;
        } else {
            last = cut;
        }
    }
    insertion_sort(&mut v[first..last], less);
}

fn partition_pivot<E: Copy>(
    v: &mut [E],
    first: usize,
    last: usize,
    less: &impl Fn(&E, &E) -> bool,
) -> usize {
    let mid = first + (last - first) / 2;
    let (a, b, c) = (first + 1, mid, last - 1);
    let pick = if less(&v[a], &v[b]) {
        if less(&v[b], &v[c]) {
            b
        } else if less(&v[a], &v[c]) {
            c
        } else {
            a
        }
    } else if less(&v[a], &v[c]) {
        a
    } else if less(&v[b], &v[c]) {
        c
    } else {
        b
    };
    v.swap(first, pick);
    // Unguarded partition of [first + 1, last) around v[first].
    let (mut lo, mut hi) = (first + 1, last);
    loop {
        while less(&v[lo], &v[first]) {
            lo += 1;
        }
        hi -= 1;
        while less(&v[first], &v[hi]) {
            hi -= 1;
        }
        if lo >= hi {
            return lo;
        }
        v.swap(lo, hi);
        lo += 1;
    }
}

fn insertion_sort<E: Copy>(v: &mut [E], less: &impl Fn(&E, &E) -> bool) {
    for i in 1..v.len() {
        let val = v[i];
        if less(&val, &v[0]) {
            v.copy_within(0..i, 1);
            v[0] = val;
        } else {
            let mut j = i;
            while less(&val, &v[j - 1]) {
                v[j] = v[j - 1];
                j -= 1;
            }
            v[j] = val;
        }
    }
}

/// libstdc++'s `__heap_select`: a max-heap of the first `middle` elements, each later
/// element smaller than its top swapped in.
fn heap_select<E: Copy>(v: &mut [E], middle: usize, less: &impl Fn(&E, &E) -> bool) {
    let len = middle;
    if len >= 2 {
        let mut parent = (len - 2) / 2;
        loop {
            let value = v[parent];
            adjust_heap(&mut v[..len], parent, value, less);
            if parent == 0 {
                break;
            }
            parent -= 1;
        }
    }
    for i in middle..v.len() {
        if less(&v[i], &v[0]) {
            let value = v[i];
            v[i] = v[0];
            adjust_heap(&mut v[..len], 0, value, less);
        }
    }
}

fn adjust_heap<E: Copy>(v: &mut [E], mut hole: usize, value: E, less: &impl Fn(&E, &E) -> bool) {
    let len = v.len();
    let top = hole;
    let mut child = hole;
    while len >= 2 && child < (len - 1) / 2 {
        child = 2 * (child + 1);
        if less(&v[child], &v[child - 1]) {
            child -= 1;
        }
        v[hole] = v[child];
        hole = child;
    }
    if len & 1 == 0 && len >= 2 && child == (len - 2) / 2 {
        child = 2 * (child + 1);
        v[hole] = v[child - 1];
        hole = child - 1;
    }
    // push_heap
    while hole > top {
        let parent = (hole - 1) / 2;
        if !less(&v[parent], &value) {
            break;
        }
        v[hole] = v[parent];
        hole = parent;
    }
    v[hole] = value;
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
