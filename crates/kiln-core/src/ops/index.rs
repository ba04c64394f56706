//! Basic indexing (`x[1, ::-1, None, ...]`): ints, slices, new axes and one ellipsis, as a
//! strided slice plus a reshape, so the result is a view.

use super::{reshape, slice};
use crate::array::Array;
use kiln_base::{bail, ensure, Result};

/// One entry of an index expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexItem {
    /// A single position (negative counts from the end); removes the axis.
    Int(i64),
    /// `start:stop:step` with Python's defaults for `None`.
    Slice(Option<i64>, Option<i64>, Option<i64>),
    /// `None`: inserts an axis of size 1.
    NewAxis,
    /// `...`: as many full slices as needed.
    Ellipsis,
}

/// `x[items]` with numpy's basic-indexing rules.
pub fn index(x: &Array, items: &[IndexItem]) -> Result<Array> {
    let op = "index";
    let consumed =
        items.iter().filter(|i| matches!(i, IndexItem::Int(_) | IndexItem::Slice(..))).count();
    let ellipses = items.iter().filter(|i| matches!(i, IndexItem::Ellipsis)).count();
    ensure!(ellipses <= 1, Value, op, "An index can only have a single ellipsis ('...').");
    ensure!(
        consumed <= x.ndim(),
        Value,
        op,
        "Too many indices for array with {} dimensions.",
        x.ndim()
    );
    let full = IndexItem::Slice(None, None, None);
    let mut expanded = Vec::with_capacity(items.len() + x.ndim());
    for item in items {
        if *item == IndexItem::Ellipsis {
            expanded.extend(std::iter::repeat_n(full, x.ndim() - consumed));
        } else {
            expanded.push(*item);
        }
    }
    if ellipses == 0 {
        expanded.extend(std::iter::repeat_n(full, x.ndim() - consumed));
    }
    let (mut starts, mut stops, mut steps) = (vec![], vec![], vec![]);
    let mut out_shape: Vec<Option<usize>> = vec![]; // None marks "take from the slice"
    let mut axis = 0;
    for item in &expanded {
        match *item {
            IndexItem::Int(i) => {
                let dim = x.shape()[axis] as i64;
                let pos = if i < 0 { i + dim } else { i };
                if pos < 0 || pos >= dim {
                    bail!(Index, op, "Index {i} is out of bounds for axis {axis} with size {dim}.");
                }
                starts.push(Some(pos));
                stops.push(Some(pos + 1));
                steps.push(1);
                axis += 1;
            }
            IndexItem::Slice(a, b, c) => {
                starts.push(a);
                stops.push(b);
                steps.push(c.unwrap_or(1));
                out_shape.push(None);
                axis += 1;
            }
            IndexItem::NewAxis => out_shape.push(Some(1)),
            IndexItem::Ellipsis => unreachable!("expanded above"),
        }
    }
    let sliced = slice(x, &starts, &stops, &steps)?;
    // The sliced lengths of the kept axes, in order, fill the `None` slots.
    let kept = expanded
        .iter()
        .filter(|i| !matches!(i, IndexItem::NewAxis))
        .zip(sliced.shape())
        .filter(|(i, _)| matches!(i, IndexItem::Slice(..)))
        .map(|(_, &d)| d);
    let mut kept = kept.collect::<Vec<_>>().into_iter();
    let shape: Vec<i64> = out_shape
        .iter()
        .map(|d| d.unwrap_or_else(|| kept.next().expect("one per slice")) as i64)
        .collect();
    reshape(&sliced, &shape)
}
