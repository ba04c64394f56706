//! Index expressions: `x[items]` (getitem) and `x[items] = value` / `x.at[items].add(v)`
//! (index_update), with numpy's rules as MLX applies them. Ints, slices, new axes and one
//! ellipsis alone are basic indexing: a strided view. Integer arrays make it advanced: a
//! Gather (getitem) or Scatter (update) over the indexed axes, and then ints count as 0-d
//! index arrays. The advanced result dims go where the first advanced item stands when all
//! advanced items are adjacent (after the ellipsis is expanded, as MLX does), else first.

use super::indexing::{broadcast_indices, masked_scatter};
use super::{arange, astype, broadcast_to, record, reshape, scalar, transpose, zeros};
use crate::array::Array;
use kiln_base::shape::{fmt_shape, size_of, Shape};
use kiln_base::{bail, ensure, DType, Primitive, Result, Scalar, ScatterReduce};

/// One entry of an index expression.
#[derive(Debug, Clone)]
pub enum IndexItem {
    /// A single position (negative counts from the end); removes the axis.
    Int(i64),
    /// `start:stop:step` with Python's defaults for `None`.
    Slice(Option<i64>, Option<i64>, Option<i64>),
    /// `None`: inserts an axis of size 1.
    NewAxis,
    /// `...`: as many full slices as needed.
    Ellipsis,
    /// An integer array (advanced indexing), or for assignment alone a bool mask.
    Array(Array),
}

/// How one axis of the indexed array is addressed.
#[derive(Debug, Clone)]
enum Addr {
    /// An int in basic indexing: position `start`, the axis disappears.
    Fixed,
    /// `start, start + step, ...` (`len` of them): one result dim.
    Range,
    /// An index array (or an int, as a 0-d array, in advanced indexing).
    Adv(Array),
}

/// A result dim, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dim {
    NewAxis,
    Range(usize),
    /// All dims of the broadcast advanced indices, at once.
    Adv,
}

/// An index expression resolved against a shape.
struct Plan {
    addr: Vec<Addr>,
    start: Vec<usize>,
    step: Vec<isize>,
    len: Vec<usize>,
    /// Broadcast shape of the advanced indices (empty for basic indexing).
    adv_shape: Shape,
    /// The index arrays broadcast to `adv_shape`, by axis.
    adv: Vec<(usize, Array)>,
    dims: Vec<Dim>,
}

impl Plan {
    fn new(op: &'static str, shape: &[usize], items: &[IndexItem]) -> Result<Plan> {
        let items = expand(op, shape.len(), items)?;
        let advanced = items.iter().any(|i| matches!(i, IndexItem::Array(_)));
        let n = shape.len();
        let mut plan = Plan {
            addr: Vec::with_capacity(n),
            start: Vec::with_capacity(n),
            step: Vec::with_capacity(n),
            len: Vec::with_capacity(n),
            adv_shape: Shape::new(),
            adv: vec![],
            dims: vec![],
        };
        // Positions (in `items`) of the advanced items, to decide where their dims go.
        let mut adv_at = vec![];
        let mut axis = 0;
        for (pos, item) in items.iter().enumerate() {
            let dim = shape.get(axis).copied().unwrap_or(0);
            match item {
                IndexItem::NewAxis => {
                    plan.dims.push(Dim::NewAxis);
                    continue;
                }
                IndexItem::Int(i) => {
                    let p = if *i < 0 { i.wrapping_add(dim as i64) } else { *i };
                    if p < 0 || p >= dim as i64 {
                        bail!(
                            Index,
                            op,
                            "Index {i} is out of bounds for axis {axis} with size {dim}."
                        );
                    }
                    if advanced {
                        adv_at.push(pos);
                        let zero_d = scalar(Scalar::Int(p), DType::I64)?;
                        plan.push(Addr::Adv(zero_d), 0, 1, dim);
                    } else {
                        plan.push(Addr::Fixed, p as usize, 1, 1);
                    }
                }
                IndexItem::Slice(a, b, c) => {
                    let step = c.unwrap_or(1);
                    let (s, l) = super::shape::python_slice(op, *a, *b, step, dim)?;
                    plan.dims.push(Dim::Range(axis));
                    // One element or none: the step is irrelevant, 1 keeps strides small.
                    let step = if l <= 1 { 1 } else { step as isize };
                    plan.push(Addr::Range, s, step, l);
                }
                IndexItem::Array(a) => {
                    adv_at.push(pos);
                    plan.push(Addr::Adv(a.clone()), 0, 1, dim);
                }
                IndexItem::Ellipsis => unreachable!("expanded"),
            }
            axis += 1;
        }
        if advanced {
            let (axes, arrays): (Vec<usize>, Vec<Array>) = plan
                .addr
                .iter()
                .enumerate()
                .filter_map(|(d, a)| match a {
                    Addr::Adv(x) => Some((d, x.clone())),
                    _ => None,
                })
                .unzip();
            let (arrays, shape) = broadcast_indices(op, &arrays)?;
            plan.adv = axes.into_iter().zip(arrays).collect();
            plan.adv_shape = shape;
            let adjacent = adv_at.windows(2).all(|w| w[1] == w[0] + 1);
            // The advanced dims take the place of the first advanced item, or go first.
            let at = if adjacent {
                items[..adv_at[0]]
                    .iter()
                    .filter(|i| matches!(i, IndexItem::NewAxis | IndexItem::Slice(..)))
                    .count()
            } else {
                0
            };
            plan.dims.insert(at, Dim::Adv);
        }
        Ok(plan)
    }

    fn push(&mut self, addr: Addr, start: usize, step: isize, len: usize) {
        self.addr.push(addr);
        self.start.push(start);
        self.step.push(step);
        self.len.push(len);
    }

    /// The shape of `x[items]`.
    fn result_shape(&self) -> Shape {
        let mut out = Shape::new();
        for d in &self.dims {
            match *d {
                Dim::NewAxis => out.push(1),
                Dim::Range(a) => out.push(self.len[a]),
                Dim::Adv => out.extend_from_slice(&self.adv_shape),
            }
        }
        out
    }

    /// The basic part as one strided slice of `x` (advanced axes whole).
    fn basic_view(&self, x: &Array) -> Result<Array> {
        let whole = self.start.iter().all(|&s| s == 0)
            && self.step.iter().all(|&s| s == 1)
            && self.len == x.shape();
        if whole {
            return Ok(x.clone());
        }
        let prim = Primitive::Slice {
            start: self.start.clone(),
            step: self.step.clone(),
            len: self.len.clone(),
        };
        record(prim, vec![x.clone()])
    }

    /// Result dims (without new axes) listed as: advanced dims first, then the range dims in
    /// axis order, i.e. the order Gather/Scatter produce. Returns the permutation from that
    /// order to the result order, and the result shape without new axes.
    fn order(&self) -> (Vec<i64>, Vec<i64>) {
        let nb = self.adv_shape.len();
        let ranges: Vec<usize> = self
            .dims
            .iter()
            .filter_map(|d| if let Dim::Range(a) = d { Some(*a) } else { None })
            .collect();
        let mut perm = vec![];
        let mut shape = vec![];
        for d in &self.dims {
            match *d {
                Dim::NewAxis => {}
                Dim::Adv => {
                    perm.extend((0..nb).map(|i| i as i64));
                    shape.extend(self.adv_shape.iter().map(|&s| s as i64));
                }
                Dim::Range(a) => {
                    let r = ranges.iter().position(|&x| x == a).expect("listed");
                    perm.push((nb + r) as i64);
                    shape.push(self.len[a] as i64);
                }
            }
        }
        (perm, shape)
    }
}

/// The items with the ellipsis replaced by full slices, and full slices for the axes not
/// indexed.
fn expand(op: &'static str, ndim: usize, items: &[IndexItem]) -> Result<Vec<IndexItem>> {
    let consumed = items
        .iter()
        .filter(|i| matches!(i, IndexItem::Int(_) | IndexItem::Slice(..) | IndexItem::Array(_)))
        .count();
    let ellipses = items.iter().filter(|i| matches!(i, IndexItem::Ellipsis)).count();
    ensure!(ellipses <= 1, Value, op, "An index can only have a single ellipsis ('...').");
    ensure!(consumed <= ndim, Value, op, "Too many indices for array with {ndim} dimensions.");
    let full = IndexItem::Slice(None, None, None);
    let mut out = Vec::with_capacity(items.len() + ndim);
    for item in items {
        if matches!(item, IndexItem::Ellipsis) {
            out.extend(std::iter::repeat_n(full.clone(), ndim - consumed));
        } else {
            out.push(item.clone());
        }
    }
    if ellipses == 0 {
        out.extend(std::iter::repeat_n(full, ndim - consumed));
    }
    Ok(out)
}

/// `x[items]` with numpy's rules (basic indexing is a view; advanced a gather).
pub fn index(x: &Array, items: &[IndexItem]) -> Result<Array> {
    let op = "index";
    reject_bool(op, items)?;
    let plan = Plan::new(op, x.shape(), items)?;
    let out_shape = plan.result_shape();
    let target: Vec<i64> = out_shape.iter().map(|&d| d as i64).collect();
    if plan.adv.is_empty() {
        return reshape(&plan.basic_view(x)?, &target);
    }
    if size_of(&out_shape) == 0 {
        return zeros(&out_shape, x.dtype());
    }
    if let Some(&(a, _)) = plan.adv.iter().find(|(a, _)| x.shape()[*a] == 0) {
        bail!(Index, op, "Cannot index into axis {a} of size 0.");
    }
    let view = plan.basic_view(x)?;
    let mut sizes = Shape::from(view.shape());
    plan.adv.iter().for_each(|(a, _)| sizes[*a] = 1);
    let mut inputs = vec![view];
    inputs.extend(plan.adv.iter().map(|(_, i)| i.clone()));
    let axes = plan.adv.iter().map(|(a, _)| *a).collect();
    let g = record(Primitive::Gather { axes, slice_sizes: sizes }, inputs)?;
    // (adv..., sizes with 1s on advanced axes) -> (adv..., ranges...) -> result order.
    let (perm, shape) = plan.order();
    let mut grouped: Vec<i64> = plan.adv_shape.iter().map(|&d| d as i64).collect();
    grouped.extend(
        (0..x.ndim()).filter(|a| matches!(plan.addr[*a], Addr::Range)).map(|a| plan.len[a] as i64),
    );
    let g = transpose(&reshape(&g, &grouped)?, Some(&perm))?;
    debug_assert_eq!(g.shape().iter().map(|&d| d as i64).collect::<Vec<_>>(), shape);
    reshape(&g, &target)
}

/// Bool arrays are masks; only a lone mask in an assignment is supported (as in MLX).
fn reject_bool(op: &'static str, items: &[IndexItem]) -> Result<()> {
    for item in items {
        if let IndexItem::Array(a) = item {
            ensure!(a.dtype() != DType::Bool, Value, op, "boolean indices are not yet supported");
        }
    }
    Ok(())
}

/// `value` shaped to broadcast over `target`: extra leading dims of size 1 are dropped,
/// as numpy and MLX allow.
fn fit_value(op: &'static str, value: &Array, target: &[usize]) -> Result<Array> {
    let extra = value.ndim().saturating_sub(target.len());
    ensure!(
        value.shape()[..extra].iter().all(|&d| d == 1),
        Value,
        op,
        "Cannot broadcast array of shape {} into shape {}.",
        fmt_shape(value.shape()),
        fmt_shape(target)
    );
    let trimmed: Vec<i64> = value.shape()[extra..].iter().map(|&d| d as i64).collect();
    let v = reshape(value, &trimmed)?;
    let ok = v.shape().iter().rev().zip(target.iter().rev()).all(|(&a, &b)| a == b || a == 1);
    ensure!(
        ok,
        Value,
        op,
        "Cannot broadcast array of shape {} into shape {}.",
        fmt_shape(value.shape()),
        fmt_shape(target)
    );
    broadcast_to(&v, target)
}

/// `x` with `x[items]` replaced by `value` (`reduce` None: assignment) or combined with it
/// (`x.at[items].add(value)` and friends: duplicates accumulate). `value` is cast to x's
/// dtype and broadcast to the indexed shape. A lone bool array is a mask (assignment only).
pub fn index_update(
    x: &Array,
    items: &[IndexItem],
    value: &Array,
    reduce: ScatterReduce,
) -> Result<Array> {
    let op = if reduce == ScatterReduce::None { "__setitem__" } else { "at" };
    let value = astype(value, x.dtype())?;
    if let [IndexItem::Array(mask)] = items {
        if mask.dtype() == DType::Bool {
            ensure!(
                reduce == ScatterReduce::None,
                Value,
                op,
                "boolean indices are not yet supported"
            );
            return masked_scatter(x, mask, &value);
        }
    }
    reject_bool(op, items)?;
    let plan = Plan::new(op, x.shape(), items)?;
    let target = plan.result_shape();
    let value = fit_value(op, &value, &target)?;
    if size_of(&target) == 0 {
        return Ok(x.clone());
    }
    if plan.adv.is_empty() && reduce == ScatterReduce::None {
        let len: Vec<i64> = plan.len.iter().map(|&d| d as i64).collect();
        let update = reshape(&value, &len)?;
        let prim = Primitive::SliceUpdate {
            start: plan.start.clone(),
            step: plan.step.clone(),
            len: plan.len,
        };
        return record(prim, vec![x.clone(), update]);
    }
    scatter_plan(x, &plan, &value, reduce)
}

/// The Scatter for an index plan: advanced axes take their index arrays; a range with step 1
/// (or one element) is a block starting at its start; other ranges become `arange` index
/// arrays with a dim of their own after the advanced dims.
fn scatter_plan(x: &Array, plan: &Plan, value: &Array, reduce: ScatterReduce) -> Result<Array> {
    let n = x.ndim();
    let nb = plan.adv_shape.len();
    let strided: Vec<usize> =
        (0..n).filter(|&a| matches!(plan.addr[a], Addr::Range) && plan.step[a] != 1).collect();
    let mut index_shape: Vec<usize> = plan.adv_shape.to_vec();
    index_shape.extend(strided.iter().map(|&a| plan.len[a]));
    let ni = index_shape.len();
    let mut axes = vec![];
    let mut indices = vec![];
    let mut block = vec![1usize; n];
    for (a, addr) in plan.addr.iter().enumerate() {
        let idx = match addr {
            Addr::Adv(_) => {
                let i = &plan.adv.iter().find(|(d, _)| *d == a).expect("advanced axis").1;
                let mut s: Vec<i64> = i.shape().iter().map(|&d| d as i64).collect();
                s.extend(std::iter::repeat_n(1, ni - nb));
                reshape(i, &s)?
            }
            Addr::Range if plan.step[a] != 1 => {
                let (s, st, l) = (plan.start[a] as f64, plan.step[a] as f64, plan.len[a] as f64);
                let r = arange(s, s + st * l, st, DType::I64)?;
                let r_pos = nb + strided.iter().position(|&d| d == a).expect("strided axis");
                let shape: Vec<i64> =
                    (0..ni).map(|d| if d == r_pos { plan.len[a] as i64 } else { 1 }).collect();
                reshape(&r, &shape)?
            }
            Addr::Range | Addr::Fixed => {
                block[a] = plan.len[a];
                if plan.start[a] == 0 {
                    continue; // blocks start at 0 on unlisted axes
                }
                scalar(Scalar::Int(plan.start[a] as i64), DType::I64)?
            }
        };
        axes.push(a);
        indices.push(broadcast_to(&idx, &index_shape)?);
    }
    // The value (result order) -> (advanced dims, strided ranges, block ranges) -> updates.
    let (perm, shape) = plan.order();
    let v = reshape(value, &shape)?;
    let mut inverse = vec![0i64; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p as usize] = i as i64;
    }
    // `order` lists ranges in axis order after the advanced dims; strided ones must come
    // first among them.
    let ranges: Vec<usize> = (0..n).filter(|&a| matches!(plan.addr[a], Addr::Range)).collect();
    let mut grouped: Vec<i64> = inverse[..nb].to_vec();
    grouped.extend(
        ranges
            .iter()
            .enumerate()
            .filter(|(_, a)| strided.contains(a))
            .map(|(r, _)| inverse[nb + r]),
    );
    grouped.extend(
        ranges
            .iter()
            .enumerate()
            .filter(|(_, a)| !strided.contains(a))
            .map(|(r, _)| inverse[nb + r]),
    );
    let v = transpose(&v, Some(&grouped))?;
    let mut upd: Vec<i64> = index_shape.iter().map(|&d| d as i64).collect();
    upd.extend(block.iter().map(|&d| d as i64));
    let updates = reshape(&v, &upd)?;
    let mut inputs = vec![x.clone()];
    inputs.extend(indices);
    inputs.push(updates);
    record(Primitive::Scatter { axes, reduce }, inputs)
}
