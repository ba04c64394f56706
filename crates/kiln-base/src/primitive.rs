//! The primitive set: the contract between layers. Front ends (ops) only create primitives,
//! transforms only rewrite them, backends only evaluate them. Parameters are hashable and
//! comparable, so compile can key kernels on them and merge identical nodes (CSE).

use crate::elementwise::{BinaryOp, UnaryOp};
use crate::layout::Layout;
use crate::shape::{fmt_shape, size_of, Shape};
use crate::{bail, ensure, DType, Result, Scalar};

/// Associative reductions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Prod,
    Max,
    Min,
    /// Logical and of a bool input (`all`); true over no elements.
    And,
    /// Logical or of a bool input (`any`); false over no elements.
    Or,
}

/// Cumulative ops along one axis (one `Scan` primitive, the op a parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScanOp {
    Sum,
    Prod,
    Max,
    Min,
    /// `log(exp(a) + exp(b))`, float inputs only (`logcumsumexp`).
    LogAddExp,
}

/// Reductions that return an index (uint32, as MLX).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArgReduceOp {
    ArgMax,
    ArgMin,
}

/// One node kind of the lazy graph.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Primitive {
    /// `start + i * step` for `i < len`, in `dtype`. No inputs.
    Arange { start: Scalar, step: Scalar, len: usize, dtype: DType },
    /// Elementwise on one input; the input already has the op's compute dtype.
    Unary(UnaryOp),
    /// Elementwise on two inputs of one dtype and shape.
    Binary(BinaryOp),
    /// `cond ? x : y`; cond is bool, all three inputs share one shape.
    Where,
    /// Conversion to another dtype (C casts with MLX's edge cases, see kiln-cpu `cast.rs`).
    AsType(DType),
    /// A row-contiguous copy of the input.
    Copy,
    /// Reduction over sorted axes; reduced axes stay as size 1 (the op squeezes them).
    Reduce { op: ReduceOp, axes: Vec<usize> },
    /// Index of the max/min along one axis, which stays as size 1.
    ArgReduce { op: ArgReduceOp, axis: usize },
    /// New shape of the same size (a view when strides allow, else a copy).
    Reshape { shape: Shape },
    /// Axis permutation (a view).
    Transpose { perm: Vec<usize> },
    /// numpy broadcasting to a larger shape (a view, stride 0).
    BroadcastTo { shape: Shape },
    /// Per axis: first index, step (nonzero, may be negative), number of elements (a view).
    Slice { start: Vec<usize>, step: Vec<isize>, len: Vec<usize> },
    /// Joins inputs of one dtype along an axis.
    Concatenate { axis: usize },
    /// Cumulative `op` along `axis`: from the end when `reverse`; `inclusive: false` shifts
    /// by one, starting from the op's identity (0, 1, the dtype's lowest/highest, -inf).
    Scan { op: ScanOp, axis: usize, reverse: bool, inclusive: bool },
    /// Stable ascending sort along `axis`, NaN last; `arg` gives uint32 indices instead.
    Sort { axis: usize, arg: bool },
    /// Along `axis`, the element of sorted rank `kth` in place, none greater before it and
    /// none smaller after (NaN last); `arg` gives uint32 indices instead.
    Partition { kth: usize, axis: usize, arg: bool },
    /// For each value (second input), the uint32 insertion index into the sorted 1-d first
    /// input (one dtype, NaN last): before equal elements, or after them when `right`.
    SearchSorted { right: bool },
    /// `(..., m, k) @ (..., k, n)` with equal batch dims.
    Matmul,
    /// Counter-based random bits: for each key (`(..., 2)` uint32) `shape` elements of
    /// `width` bytes, from threefry2x32 (identical on every backend).
    RandomBits { shape: Shape, width: u8 },
}

impl Primitive {
    /// The name used in error messages and graph dumps.
    pub fn name(&self) -> &'static str {
        match self {
            Primitive::Arange { .. } => "arange",
            Primitive::Unary(op) => op.facts().name,
            Primitive::Binary(op) => op.facts().name,
            Primitive::Where => "where",
            Primitive::AsType(_) => "astype",
            Primitive::Copy => "copy",
            Primitive::Reduce { op, .. } => match op {
                ReduceOp::Sum => "sum",
                ReduceOp::Prod => "prod",
                ReduceOp::Max => "max",
                ReduceOp::Min => "min",
                ReduceOp::And => "all",
                ReduceOp::Or => "any",
            },
            Primitive::ArgReduce { op, .. } => match op {
                ArgReduceOp::ArgMax => "argmax",
                ArgReduceOp::ArgMin => "argmin",
            },
            Primitive::Reshape { .. } => "reshape",
            Primitive::Transpose { .. } => "transpose",
            Primitive::BroadcastTo { .. } => "broadcast_to",
            Primitive::Slice { .. } => "slice",
            Primitive::Concatenate { .. } => "concatenate",
            Primitive::Scan { op, .. } => match op {
                ScanOp::Sum => "cumsum",
                ScanOp::Prod => "cumprod",
                ScanOp::Max => "cummax",
                ScanOp::Min => "cummin",
                ScanOp::LogAddExp => "logcumsumexp",
            },
            Primitive::Sort { arg: false, .. } => "sort",
            Primitive::Sort { arg: true, .. } => "argsort",
            Primitive::Partition { arg: false, .. } => "partition",
            Primitive::Partition { arg: true, .. } => "argpartition",
            Primitive::SearchSorted { .. } => "searchsorted",
            Primitive::Matmul => "matmul",
            Primitive::RandomBits { .. } => "random_bits",
        }
    }

    /// Number of outputs (siblings) this primitive produces.
    pub fn num_outputs(&self) -> usize {
        1
    }

    /// Output shapes and dtypes from input shapes and dtypes. Ops call this when they build a
    /// node, and shapeless compile calls it again at replay, so every check lives here.
    pub fn output_shapes(&self, inputs: &[(&[usize], DType)]) -> Result<Vec<(Shape, DType)>> {
        let op = self.name();
        let arity = match self {
            Primitive::Arange { .. } => 0,
            Primitive::Where => 3,
            Primitive::Binary(_) | Primitive::Matmul | Primitive::SearchSorted { .. } => 2,
            Primitive::Concatenate { .. } => inputs.len().max(1),
            _ => 1,
        };
        ensure!(inputs.len() == arity, Value, op, "Expected {arity} inputs, got {}.", inputs.len());
        let same = |shape: &[usize], dtype| Ok(vec![(Shape::from(shape), dtype)]);
        match self {
            Primitive::Arange { len, dtype, .. } => same(&[*len], *dtype),
            Primitive::Unary(_) | Primitive::Copy => same(inputs[0].0, inputs[0].1),
            Primitive::AsType(dtype) => same(inputs[0].0, *dtype),
            Primitive::Binary(bin) => {
                let ((sa, da), (sb, db)) = (inputs[0], inputs[1]);
                ensure!(sa == sb && da == db, Value, op, "Inputs must match after promotion.");
                same(sa, if bin.facts().bool_output { DType::Bool } else { da })
            }
            Primitive::Where => {
                let [(sc, dc), (sx, dx), (sy, dy)] = [inputs[0], inputs[1], inputs[2]];
                ensure!(dc == DType::Bool && dx == dy, Type, op, "Expected a bool condition.");
                ensure!(sc == sx && sx == sy, Value, op, "Inputs must have one shape.");
                same(sx, dx)
            }
            Primitive::Reduce { op: rop, axes } => {
                let (s, d) = inputs[0];
                check_axes(op, axes, s.len())?;
                if matches!(rop, ReduceOp::And | ReduceOp::Or) {
                    ensure!(d == DType::Bool, Type, op, "Expected a bool input, got {d}.");
                }
                let mut out = Shape::from(s);
                axes.iter().for_each(|&a| out[a] = 1);
                same(&out, d)
            }
            Primitive::ArgReduce { axis, .. } => {
                let (s, _) = inputs[0];
                check_axes(op, &[*axis], s.len())?;
                let mut out = Shape::from(s);
                out[*axis] = 1;
                same(&out, DType::U32)
            }
            Primitive::Scan { op: sop, axis, .. } => {
                let (s, d) = inputs[0];
                check_axes(op, &[*axis], s.len())?;
                if *sop == ScanOp::LogAddExp {
                    ensure!(d.is_float(), Type, op, "Expected a float input, got {d}.");
                }
                same(s, d)
            }
            Primitive::Sort { axis, arg } => {
                let (s, d) = inputs[0];
                check_axes(op, &[*axis], s.len())?;
                same(s, if *arg { DType::U32 } else { d })
            }
            Primitive::Partition { kth, axis, arg } => {
                let (s, d) = inputs[0];
                check_axes(op, &[*axis], s.len())?;
                ensure!(
                    *kth < s[*axis],
                    Value,
                    op,
                    "kth {kth} is out of bounds for axis {axis} of size {}.",
                    s[*axis]
                );
                same(s, if *arg { DType::U32 } else { d })
            }
            Primitive::SearchSorted { .. } => {
                let ((sa, da), (sv, dv)) = (inputs[0], inputs[1]);
                ensure!(da == dv, Type, op, "Inputs must have one dtype.");
                ensure!(
                    sa.len() == 1,
                    Value,
                    op,
                    "The sorted sequence must be 1-D but has {} dimensions.",
                    sa.len()
                );
                same(sv, DType::U32)
            }
            Primitive::Reshape { shape } => {
                let (s, d) = inputs[0];
                ensure!(
                    size_of(s) == size_of(shape),
                    Value,
                    op,
                    "Cannot reshape array of size {} into shape {}.",
                    size_of(s),
                    fmt_shape(shape)
                );
                same(shape, d)
            }
            Primitive::Transpose { perm } => {
                let (s, d) = inputs[0];
                let mut seen = vec![false; s.len()];
                ensure!(perm.len() == s.len(), Value, op, "Expected {} axes.", s.len());
                for &p in perm {
                    ensure!(p < s.len() && !seen[p], Value, op, "Invalid permutation {perm:?}.");
                    seen[p] = true;
                }
                let out: Shape = perm.iter().map(|&p| s[p]).collect();
                same(&out, d)
            }
            Primitive::BroadcastTo { shape } => {
                let (s, d) = inputs[0];
                let ok = s.len() <= shape.len()
                    && s.iter().rev().zip(shape.iter().rev()).all(|(&a, &b)| a == b || a == 1);
                ensure!(
                    ok,
                    Value,
                    op,
                    "Cannot broadcast array of shape {} into shape {}.",
                    fmt_shape(s),
                    fmt_shape(shape)
                );
                same(shape, d)
            }
            Primitive::Slice { start, step, len } => {
                let (s, d) = inputs[0];
                ensure!(
                    start.len() == s.len() && step.len() == s.len() && len.len() == s.len(),
                    Value,
                    op,
                    "Expected one start, step and length per axis."
                );
                for ax in 0..s.len() {
                    if len[ax] == 0 {
                        continue;
                    }
                    let last = start[ax] as i128 + step[ax] as i128 * (len[ax] as i128 - 1);
                    ensure!(step[ax] != 0, Value, op, "Slice step cannot be zero.");
                    ensure!(
                        start[ax] < s[ax] && last >= 0 && last < s[ax] as i128,
                        Index,
                        op,
                        "Slice out of bounds on axis {ax} of size {}.",
                        s[ax]
                    );
                }
                same(len, d)
            }
            Primitive::Concatenate { axis } => {
                let (s0, d0) = inputs[0];
                check_axes(op, &[*axis], s0.len())?;
                let mut out = Shape::from(s0);
                out[*axis] = 0;
                for &(s, d) in inputs {
                    ensure!(d == d0, Type, op, "All inputs must have one dtype.");
                    let ok =
                        s.len() == s0.len() && (0..s.len()).all(|i| i == *axis || s[i] == s0[i]);
                    ensure!(ok, Value, op, "All inputs must match except on axis {axis}.");
                    out[*axis] += s[*axis];
                }
                same(&out, d0)
            }
            Primitive::Matmul => {
                let ((a, da), (b, db)) = (inputs[0], inputs[1]);
                ensure!(da == db && da.is_float(), Type, op, "Expected float inputs of one dtype.");
                let n = a.len();
                ensure!(n >= 2 && b.len() == n, Value, op, "Expected inputs of one rank >= 2.");
                ensure!(a[..n - 2] == b[..n - 2], Value, op, "Batch dimensions must match.");
                ensure!(
                    a[n - 1] == b[n - 2],
                    Value,
                    op,
                    "Last dimension of first input with shape {} must match second to last \
                     dimension of second input with shape {}.",
                    fmt_shape(a),
                    fmt_shape(b)
                );
                let mut out = Shape::from(a);
                out[n - 1] = b[n - 1];
                same(&out, da)
            }
            Primitive::RandomBits { shape, width } => {
                let (k, d) = inputs[0];
                ensure!(
                    d == DType::U32 && k.last() == Some(&2),
                    Value,
                    op,
                    "Expected a uint32 key array with last dimension 2."
                );
                let dtype = match width {
                    1 => DType::U8,
                    2 => DType::U16,
                    4 => DType::U32,
                    8 => DType::U64,
                    _ => bail!(Value, op, "Unsupported bit width {}.", *width as usize * 8),
                };
                let mut out = Shape::from(&k[..k.len() - 1]);
                out.extend_from_slice(shape);
                same(&out, dtype)
            }
        }
    }

    /// The output's layout when this primitive is a view of its single input, or `None` when
    /// it must run a kernel (all backends share this: views are stride arithmetic).
    pub fn view_layout(&self, input: &Layout) -> Option<Layout> {
        match self {
            Primitive::Reshape { shape } => input.reshape(shape),
            Primitive::Transpose { perm } => Some(input.transpose(perm)),
            Primitive::BroadcastTo { shape } => Some(input.broadcast_to(shape)),
            Primitive::Slice { start, step, len } => Some(input.slice(start, step, len)),
            _ => None,
        }
    }
}

fn check_axes(op: &'static str, axes: &[usize], ndim: usize) -> Result<()> {
    for (i, &a) in axes.iter().enumerate() {
        ensure!(a < ndim, Value, op, "Axis {a} is out of bounds for {ndim} dimensions.");
        ensure!(i == 0 || axes[i - 1] < a, Value, op, "Axes must be sorted and unique.");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        let r = Primitive::Reduce { op: ReduceOp::Sum, axes: vec![0, 2] };
        let out = r.output_shapes(&[(&[2, 3, 4], DType::F32)]).unwrap();
        assert_eq!(out[0].0.as_slice(), &[1, 3, 1]);
        let m =
            Primitive::Matmul.output_shapes(&[(&[5, 2, 3], DType::F32), (&[5, 3, 4], DType::F32)]);
        assert_eq!(m.unwrap()[0].0.as_slice(), &[5, 2, 4]);
        let bad = Primitive::Reshape { shape: Shape::from_slice(&[4, 2]) }
            .output_shapes(&[(&[6], DType::F32)]);
        assert_eq!(
            bad.unwrap_err().to_string(),
            "[reshape] Cannot reshape array of size 6 into shape (4, 2)."
        );
        let cmp = Primitive::Binary(BinaryOp::Less)
            .output_shapes(&[(&[2], DType::I32), (&[2], DType::I32)])
            .unwrap();
        assert_eq!(cmp[0].1, DType::Bool);
    }

    #[test]
    fn scan_sort_and_logical_shapes() {
        let f = |p: Primitive, s: &[usize], d| p.output_shapes(&[(s, d)]);
        let scan = |op| Primitive::Scan { op, axis: 1, reverse: false, inclusive: true };
        let out = f(scan(ScanOp::Sum), &[2, 3], DType::I8).unwrap();
        assert_eq!((out[0].0.as_slice(), out[0].1), (&[2, 3][..], DType::I8));
        assert!(f(scan(ScanOp::Sum), &[3], DType::I8).is_err()); // axis out of range
        assert!(f(scan(ScanOp::LogAddExp), &[2, 3], DType::I32).is_err()); // floats only
        let argsort = f(Primitive::Sort { axis: 0, arg: true }, &[4], DType::F16).unwrap();
        assert_eq!(argsort[0].1, DType::U32);
        assert_eq!(Primitive::Sort { axis: 0, arg: true }.name(), "argsort");
        let part = |kth, arg| Primitive::Partition { kth, axis: 0, arg };
        assert_eq!(f(part(3, false), &[4, 2], DType::I64).unwrap()[0].1, DType::I64);
        let err = f(part(4, true), &[4, 2], DType::I64).unwrap_err();
        assert_eq!(err.to_string(), "[argpartition] kth 4 is out of bounds for axis 0 of size 4.");
        let and = Primitive::Reduce { op: ReduceOp::And, axes: vec![0] };
        assert_eq!(and.name(), "all");
        assert!(f(and.clone(), &[2], DType::Bool).is_ok());
        assert!(f(and, &[2], DType::F32).is_err()); // bools only
        let search = Primitive::SearchSorted { right: true };
        let out = search.output_shapes(&[(&[5], DType::F32), (&[2, 3], DType::F32)]).unwrap();
        assert_eq!((out[0].0.as_slice(), out[0].1), (&[2, 3][..], DType::U32));
        assert!(search.output_shapes(&[(&[5, 1], DType::F32), (&[2], DType::F32)]).is_err());
        assert!(search.output_shapes(&[(&[5], DType::I32), (&[2], DType::F32)]).is_err());
    }
}
