//! The primitive set: the contract between layers. Front ends (ops) only create primitives,
//! transforms only rewrite them, backends only evaluate them. Parameters are hashable and
//! comparable, so compile can key kernels on them and merge identical nodes (CSE).

use crate::conv::ConvParams;
use crate::elementwise::{BinaryOp, UnaryOp};
use crate::fast::FastOp;
use crate::fused::FusedProgram;
use crate::layout::Layout;
use crate::linalg::LinalgOp;
use crate::shape::{checked_size, fmt_shape, size_of, Shape, Strides};
use crate::{bail, ensure, DType, Result, Scalar};

/// Associative reductions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ScanOp {
    Sum,
    Prod,
    Max,
    Min,
    /// `log(exp(a) + exp(b))`, float inputs only (`logcumsumexp`).
    LogAddExp,
}

/// One axis of a reshape's target as shapeless compile recomputes it from a new input shape
/// (MLX's squeeze, expand_dims, flatten and `-1` infer their shapes; a literal size stays).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ReshapeDim {
    /// This size whatever the input.
    Fixed(usize),
    /// The product of the input's axes `start..end` (one axis kept, or several flattened).
    Axes(usize, usize),
    /// The input's size over the product of the other target axes (a `-1`).
    Rest,
}

/// A reshape rule's target for an input of shape `input`: `None` when the rule does not
/// fit it (axes past its rank, a `-1` that does not divide).
pub fn resolve_reshape(dims: &[ReshapeDim], input: &[usize]) -> Option<Shape> {
    let mut out = Shape::with_capacity(dims.len());
    let mut rest = None;
    for (i, d) in dims.iter().enumerate() {
        out.push(match *d {
            ReshapeDim::Fixed(n) => n,
            ReshapeDim::Axes(a, b) if a <= b && b <= input.len() => {
                input[a..b].iter().try_fold(1usize, |acc, &x| acc.checked_mul(x))?
            }
            ReshapeDim::Axes(..) => return None,
            ReshapeDim::Rest if rest.is_none() => {
                rest = Some(i);
                1
            }
            ReshapeDim::Rest => return None,
        });
    }
    if let Some(i) = rest {
        let known = out.iter().try_fold(1usize, |acc, &x| acc.checked_mul(x))?;
        let total = checked_size("reshape", input).ok()?;
        if known == 0 || total % known != 0 {
            return None;
        }
        out[i] = total / known;
    }
    Some(out)
}

/// Reductions that return an index (uint32, as MLX).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ArgReduceOp {
    ArgMax,
    ArgMin,
}

/// How a scatter combines each update with the element already in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ScatterReduce {
    /// The update replaces the element (the last of duplicate indices wins).
    None,
    Add,
    Prod,
    Max,
    Min,
}

/// complex64-only elementwise ops (`mx.real`, `mx.imag`, `abs`, `mx.conj`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ComplexOp {
    /// The real part, float32.
    Real,
    /// The imaginary part, float32.
    Imag,
    /// The magnitude, float32.
    Abs,
    /// The complex conjugate, complex64.
    Conj,
}

/// Which transform `Primitive::Fft` computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum FftKind {
    /// complex64 to complex64 over every axis.
    Complex,
    /// float32 to complex64: the last axis keeps its `n / 2 + 1` non-negative frequencies.
    RealForward,
    /// complex64 to float32 (the inverse of `RealForward`): the last axis becomes `n`.
    RealInverse { n: usize },
}

/// One node kind of the lazy graph.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
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
    /// The input itself (a view): marks the inputs of a transform.
    Identity,
    /// Reduction over sorted axes; reduced axes stay as size 1 (the op squeezes them).
    Reduce { op: ReduceOp, axes: Vec<usize> },
    /// Index of the max/min along one axis, which stays as size 1.
    ArgReduce { op: ArgReduceOp, axis: usize },
    /// `exp(x - max) / sum(exp(x - max))` over the last axis of a float input (MLX's
    /// primitive; other axes are transposes around it). `precise` asks half floats to
    /// accumulate in float32 (the CPU kernel always does).
    Softmax { precise: bool },
    /// `log(sum(exp(x)))` over the last axis of a real float input, which stays as size 1
    /// (MLX's `LogSumExp`; other axes are transposes around it): `m + log(sum(exp(x - m)))`
    /// with `m` the row max, or `m` itself where it is infinite; NaN anywhere gives NaN.
    /// Computed in float32 for half floats (float64 for float64), rounded once.
    LogSumExp,
    /// New shape of the same size (a view when strides allow, else a copy). `rule` (empty:
    /// none) says how shapeless compile recomputes `shape` from a new input shape
    /// ([`Primitive::reinfer`]); without one the shape is baked in.
    Reshape { shape: Shape, rule: Vec<ReshapeDim> },
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
    /// For each position of the index arrays (inputs 1.., one per entry of `axes`, integer,
    /// one shape), the block of `slice_sizes` of input 0 that starts at the indexed
    /// positions on `axes` and at 0 elsewhere. Output: index shape ++ `slice_sizes`.
    /// Negative indices count from the end; starts are then clamped so the block fits.
    Gather { axes: Vec<usize>, slice_sizes: Shape },
    /// Input 0 with blocks of the updates (last input, shape: index shape ++ block shape)
    /// combined in at the indexed positions (inputs 1..k+1 as in Gather). Negative indices
    /// count from the end; a block that does not fit is dropped (never written out of
    /// bounds).
    Scatter { axes: Vec<usize>, reduce: ScatterReduce },
    /// Input 0 with the strided region `Slice { start, step, len }` replaced by input 1
    /// (whose shape is `len`).
    SliceUpdate { start: Vec<usize>, step: Vec<isize>, len: Vec<usize> },
    /// Input 0 (`shape`) where the bool mask (input 1, `shape[..m]`) is true, filled in
    /// row-major order with consecutive rows of input 2 (`(rows, shape[m..]...)`).
    MaskedScatter,
    /// The row-major bytes reinterpreted as another dtype; the last axis rescales.
    View(DType),
    /// A strided view of the row-major elements: `shape`, element `strides` and `offset`
    /// (checked to stay inside the input).
    AsStrided { shape: Shape, strides: Strides, offset: usize },
    /// Counter-based random bits: for each key (`(..., 2)` uint32) `shape` elements of
    /// `width` bytes, from threefry2x32 (identical on every backend).
    RandomBits { shape: Shape, width: u8 },
    /// The identity (a view of its input); transforms treat it as a constant, so gradients
    /// stop here.
    StopGradient,
    /// N-d convolution, channels last: input `(N, ..., C_in)`, weight `(C_out, ..., C_in /
    /// groups)` of one float dtype (see `conv.rs`).
    Conv(ConvParams),
    /// A dense factorisation or solver over the last two axes (see `linalg.rs`); several
    /// outputs for QR, SVD, eigh and slogdet.
    Linalg(LinalgOp),
    /// complex64 elementwise parts: see [`ComplexOp`].
    Complex(ComplexOp),
    /// Discrete Fourier transform over sorted unique `axes` (numpy's unscaled forward,
    /// `1/n`-scaled inverse). Real kinds treat the last of `axes` as the halved axis.
    Fft { axes: Vec<usize>, inverse: bool, kind: FftKind },
    /// A function with transform rules of its own (custom_function, checkpoint). Inputs: the
    /// `num_primals` primals, then the function's outputs; the outputs are those (views).
    /// The rules live in kiln-core behind the opaque handle; backends never see this.
    // Not serialisable (export refuses them): rules live behind an opaque handle, and
    // fused programs are rebuilt from the graph they came from.
    #[serde(skip)]
    Custom { rules: Opaque, num_primals: usize },
    /// A fused elementwise kernel built by compile (see `fused.rs`): inputs broadcast to one
    /// shape, one output per program output, all of that shape.
    #[serde(skip)]
    Fused(std::sync::Arc<FusedProgram>),
    /// An `mx.fast` fused op (norms, RoPE, attention, user C kernels): see `fast.rs`.
    Fast(FastOp),
    /// The number of elements of the input over `axes` (its inverse when `inverted`), a 0-d
    /// array of `dtype`; the input's data is never read. `mean` divides by it inside
    /// compile traces, so shapeless replay counts the new shape (as MLX's primitive).
    NumberOfElements { axes: Vec<usize>, inverted: bool, dtype: DType },
    /// A collective between the processes of a group (see `distributed.rs`).
    // Not serialisable: the group is a number in this process's table.
    #[serde(skip)]
    Collective(crate::distributed::Collective),
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
            Primitive::Identity => "identity",
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
            Primitive::Softmax { .. } => "softmax",
            Primitive::LogSumExp => "logsumexp",
            Primitive::NumberOfElements { .. } => "number_of_elements",
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
            Primitive::StopGradient => "stop_gradient",
            Primitive::Conv(_) => "conv",
            Primitive::Linalg(op) => op.name(),
            Primitive::Custom { .. } => "custom_function",
            Primitive::Fused(_) => "Compiled",
            Primitive::Fast(f) => f.name(),
            Primitive::Complex(op) => match op {
                ComplexOp::Real => "real",
                ComplexOp::Imag => "imag",
                ComplexOp::Abs => "abs",
                ComplexOp::Conj => "conjugate",
            },
            Primitive::Fft { inverse, kind, .. } => match (kind, inverse) {
                (FftKind::Complex, false) => "fft",
                (FftKind::Complex, true) => "ifft",
                (FftKind::RealForward, _) => "rfft",
                (FftKind::RealInverse { .. }, _) => "irfft",
            },
            Primitive::Gather { .. } => "gather",
            Primitive::Scatter { reduce, .. } => match reduce {
                ScatterReduce::None => "scatter",
                ScatterReduce::Add => "scatter_add",
                ScatterReduce::Prod => "scatter_prod",
                ScatterReduce::Max => "scatter_max",
                ScatterReduce::Min => "scatter_min",
            },
            Primitive::SliceUpdate { .. } => "slice_update",
            Primitive::MaskedScatter => "masked_scatter",
            Primitive::View(_) => "view",
            Primitive::AsStrided { .. } => "as_strided",
            Primitive::Collective(c) => c.name(),
        }
    }

    /// Number of outputs (siblings) this primitive produces.
    pub fn num_outputs(&self) -> usize {
        match self {
            Primitive::Linalg(op) => op.num_outputs(),
            Primitive::Fused(p) => p.outputs.len(),
            Primitive::Fast(f) => f.num_outputs(),
            _ => 1,
        }
    }

    /// Output shapes and dtypes from input shapes and dtypes. Ops call this when they build a
    /// node, and shapeless compile calls it again at replay, so every check lives here.
    pub fn output_shapes(&self, inputs: &[(&[usize], DType)]) -> Result<Vec<(Shape, DType)>> {
        let op = self.name();
        let arity = match self {
            Primitive::Arange { .. } => 0,
            Primitive::Where => 3,
            Primitive::Binary(_)
            | Primitive::Matmul
            | Primitive::Conv(_)
            | Primitive::SearchSorted { .. } => 2,
            Primitive::Linalg(op) => op.num_inputs(),
            Primitive::Custom { num_primals, .. } => inputs.len().max(num_primals + 1),
            Primitive::Fused(p) => p.inputs.len(),
            Primitive::Fast(f) => f.num_inputs(),
            Primitive::Collective(c) => c.num_inputs(),
            Primitive::Concatenate { .. } => inputs.len().max(1),
            Primitive::Gather { axes, .. } => axes.len() + 1,
            Primitive::Scatter { axes, .. } => axes.len() + 2,
            Primitive::SliceUpdate { .. } => 2,
            Primitive::MaskedScatter => 3,
            _ => 1,
        };
        ensure!(inputs.len() == arity, Value, op, "Expected {arity} inputs, got {}.", inputs.len());
        let same = |shape: &[usize], dtype| Ok(vec![(Shape::from(shape), dtype)]);
        match self {
            Primitive::Arange { len, dtype, .. } => same(&[*len], *dtype),
            Primitive::Unary(_)
            | Primitive::Copy
            | Primitive::Identity
            | Primitive::StopGradient => same(inputs[0].0, inputs[0].1),
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
            Primitive::Softmax { .. } => {
                let (s, d) = inputs[0];
                ensure!(d.is_float(), Type, op, "Expected a float input, got {d}.");
                same(s, d)
            }
            Primitive::LogSumExp => {
                let (s, d) = inputs[0];
                ensure!(d.is_float(), Type, op, "Expected a float input, got {d}.");
                ensure!(!s.is_empty(), Value, op, "Expected an input with at least one axis.");
                let mut out = Shape::from(s);
                out[s.len() - 1] = 1;
                same(&out, d)
            }
            Primitive::Scan { op: sop, axis, .. } => {
                let (s, d) = inputs[0];
                check_axes(op, &[*axis], s.len())?;
                if *sop == ScanOp::LogAddExp {
                    ensure!(d.is_inexact(), Type, op, "Expected a float input, got {d}.");
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
            Primitive::NumberOfElements { axes, dtype, .. } => {
                check_axes(op, axes, inputs[0].0.len())?;
                ensure!(dtype.is_inexact(), Type, op, "Expected a float dtype, got {dtype}.");
                same(&[], *dtype)
            }
            Primitive::Reshape { shape, .. } => {
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
                check_slice(op, s, start, step, len)?;
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
                ensure!(
                    da == db && da.is_inexact(),
                    Type,
                    op,
                    "Expected float inputs of one dtype."
                );
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
            Primitive::Conv(params) => {
                let out = params.output_shape(op, inputs[0], inputs[1])?;
                same(&out, inputs[0].1)
            }
            Primitive::Linalg(l) => l.output_shapes(inputs),
            Primitive::Fast(f) => f.output_shapes(inputs),
            Primitive::Collective(c) => c.output_shapes(inputs),
            Primitive::Custom { num_primals, .. } => {
                Ok(inputs[*num_primals..].iter().map(|&(s, d)| (Shape::from(s), d)).collect())
            }
            Primitive::Fused(program) => {
                let mut shape = Shape::new();
                for (i, &(s, d)) in inputs.iter().enumerate() {
                    ensure!(
                        d == program.inputs[i],
                        Type,
                        op,
                        "Input {i} has dtype {d}, the kernel was built for {}.",
                        program.inputs[i]
                    );
                    shape = crate::shape::broadcast_shapes(op, &shape, s)?;
                }
                Ok(program.output_dtypes().into_iter().map(|d| (shape.clone(), d)).collect())
            }
            Primitive::Gather { axes, slice_sizes } => {
                let (s, d) = inputs[0];
                let idx = check_indices(op, axes, s, &inputs[1..])?;
                ensure!(
                    slice_sizes.len() == s.len()
                        && slice_sizes.iter().zip(s).all(|(&a, &b)| a <= b),
                    Value,
                    op,
                    "Slice sizes {} must fit in the input shape {}.",
                    fmt_shape(slice_sizes),
                    fmt_shape(s)
                );
                let mut out = Shape::from(idx);
                out.extend_from_slice(slice_sizes);
                same(&out, d)
            }
            Primitive::Scatter { axes, .. } => {
                let (s, d) = inputs[0];
                let (u, du) = inputs[inputs.len() - 1];
                let idx = check_indices(op, axes, s, &inputs[1..inputs.len() - 1])?;
                ensure!(du == d, Type, op, "Updates must have the dtype of the input.");
                let fits = u.len() == idx.len() + s.len()
                    && u[..idx.len()] == *idx
                    && u[idx.len()..].iter().zip(s).all(|(&a, &b)| a <= b);
                ensure!(
                    fits,
                    Value,
                    op,
                    "Updates of shape {} do not match indices of shape {} into shape {}.",
                    fmt_shape(u),
                    fmt_shape(idx),
                    fmt_shape(s)
                );
                same(s, d)
            }
            Primitive::SliceUpdate { start, step, len } => {
                let [(s, d), (u, du)] = [inputs[0], inputs[1]];
                check_slice(op, s, start, step, len)?;
                ensure!(du == d, Type, op, "The update must have the dtype of the input.");
                ensure!(
                    u == len.as_slice(),
                    Value,
                    op,
                    "Update of shape {} does not match the slice shape {}.",
                    fmt_shape(u),
                    fmt_shape(len)
                );
                same(s, d)
            }
            Primitive::MaskedScatter => {
                let [(s, d), (m, dm), (v, dv)] = [inputs[0], inputs[1], inputs[2]];
                ensure!(dm == DType::Bool, Type, op, "The mask must be bool.");
                ensure!(dv == d, Type, op, "Values must have the dtype of the input.");
                let k = m.len();
                ensure!(
                    k <= s.len() && m == &s[..k],
                    Value,
                    op,
                    "The boolean mask should have the same shape as the beginning of the \
                     indexed array but the mask has shape {} and the array has shape {}.",
                    fmt_shape(m),
                    fmt_shape(s)
                );
                ensure!(
                    v.len() == 1 + s.len() - k && v[1..] == s[k..],
                    Value,
                    op,
                    "Values of shape {} are not rows of shape {}.",
                    fmt_shape(v),
                    fmt_shape(&s[k..])
                );
                same(s, d)
            }
            Primitive::View(to) => {
                let (s, d) = inputs[0];
                let (from_size, to_size) = (d.size(), to.size());
                if from_size == to_size {
                    return same(s, *to);
                }
                let Some(&last) = s.last() else {
                    bail!(
                        Value,
                        op,
                        "Changing the type of a scalar is only allowed for types with the \
                         same size."
                    );
                };
                let bytes = last * from_size;
                ensure!(
                    bytes % to_size == 0,
                    Value,
                    op,
                    "When viewing as a larger dtype, the size in bytes of the last axis must \
                     be a multiple of the requested type size."
                );
                let mut out = Shape::from(s);
                *out.last_mut().expect("not 0-d") = bytes / to_size;
                same(&out, *to)
            }
            Primitive::Complex(cop) => {
                let (s, d) = inputs[0];
                ensure!(d == DType::C64, Type, op, "Expected a complex64 input, got {d}.");
                same(s, if *cop == ComplexOp::Conj { DType::C64 } else { DType::F32 })
            }
            Primitive::Fft { axes, inverse, kind } => {
                let (s, d) = inputs[0];
                check_axes(op, axes, s.len())?;
                let Some(&last) = axes.last() else {
                    bail!(Value, op, "Expected at least one axis.");
                };
                let mut out = Shape::from(s);
                let out_dtype = match kind {
                    FftKind::Complex => {
                        ensure!(d == DType::C64, Type, op, "Expected a complex64 input, got {d}.");
                        DType::C64
                    }
                    FftKind::RealForward => {
                        ensure!(!inverse, Value, op, "A real forward transform is not inverse.");
                        ensure!(d == DType::F32, Type, op, "Expected a float32 input, got {d}.");
                        out[last] = s[last] / 2 + 1;
                        DType::C64
                    }
                    FftKind::RealInverse { n } => {
                        ensure!(*inverse, Value, op, "A real inverse transform is inverse.");
                        ensure!(d == DType::C64, Type, op, "Expected a complex64 input, got {d}.");
                        ensure!(
                            s[last] == n / 2 + 1,
                            Value,
                            op,
                            "Expected {} frequencies on axis {last} for {n} outputs, got {}.",
                            n / 2 + 1,
                            s[last]
                        );
                        out[last] = *n;
                        DType::F32
                    }
                };
                same(&out, out_dtype)
            }
            Primitive::AsStrided { shape, strides, offset } => {
                let (s, d) = inputs[0];
                ensure!(
                    shape.len() == strides.len(),
                    Value,
                    op,
                    "Got {} strides for a shape of {} dimensions.",
                    strides.len(),
                    shape.len()
                );
                if checked_size(op, shape)? > 0 {
                    let inside = span(shape, strides, *offset)
                        .is_some_and(|(lo, hi)| lo >= 0 && hi < size_of(s) as i128);
                    ensure!(
                        inside,
                        Value,
                        op,
                        "Shape {}, strides {strides:?} and offset {offset} address elements \
                         outside the input of size {}.",
                        fmt_shape(shape),
                        size_of(s)
                    );
                }
                same(shape, d)
            }
        }
    }

    /// Re-parameterises the primitive for new input shapes (shapeless compile's replay, before
    /// [`Primitive::output_shapes`]): a reshape with a rule recomputes its target; every
    /// other primitive infers its output from its inputs already.
    pub fn reinfer(&mut self, inputs: &[(&[usize], DType)]) -> Result<()> {
        if let (Primitive::Reshape { shape, rule }, [(s, _)]) = (&mut *self, inputs) {
            if !rule.is_empty() {
                match resolve_reshape(rule, s) {
                    Some(new) => *shape = new,
                    None => bail!(
                        Value,
                        "reshape",
                        "Cannot infer the shape of an array of shape {} from the traced \
                         reshape to {}.",
                        fmt_shape(s),
                        fmt_shape(shape)
                    ),
                }
            }
        }
        Ok(())
    }

    /// Whether the primitive is elementwise over several inputs of one shape, which the ops
    /// layer broadcast to each other: shapeless replay broadcasts them again when new
    /// shapes differ (`x + y` traced on equal shapes, called on broadcastable ones).
    pub fn broadcasts_inputs(&self) -> bool {
        matches!(self, Primitive::Binary(_) | Primitive::Where | Primitive::Fused(_))
    }

    /// The output's layout when this primitive is a view of its single input, or `None` when
    /// it must run a kernel (all backends share this: views are stride arithmetic).
    pub fn view_layout(&self, input: &Layout) -> Option<Layout> {
        match self {
            Primitive::Reshape { shape, .. } => input.reshape(shape),
            Primitive::Transpose { perm } => Some(input.transpose(perm)),
            Primitive::BroadcastTo { shape } => Some(input.broadcast_to(shape)),
            Primitive::Slice { start, step, len } => Some(input.slice(start, step, len)),
            Primitive::Identity => Some(input.clone()),
            Primitive::StopGradient => Some(input.clone()),
            // Over the row-major elements: a view only when the input already is row-major.
            Primitive::AsStrided { shape, strides, offset } => input
                .row_contiguous
                .then(|| Layout::new(shape.clone(), strides.clone(), input.offset + offset)),
            _ => None,
        }
    }
}

/// Lowest and highest element addressed by a non-empty strided view, `None` past i128
/// (user shapes and strides may be huge).
pub fn span(shape: &[usize], strides: &[isize], offset: usize) -> Option<(i128, i128)> {
    let (mut lo, mut hi) = (offset as i128, offset as i128);
    for (&d, &st) in shape.iter().zip(strides) {
        let reach = (d as i128 - 1).checked_mul(st as i128)?;
        if reach < 0 {
            lo = lo.checked_add(reach)?;
        } else {
            hi = hi.checked_add(reach)?;
        }
    }
    Some((lo, hi))
}

/// A strided slice's parameters: one start, step and length per axis, every taken index in
/// bounds.
fn check_slice(
    op: &'static str,
    s: &[usize],
    start: &[usize],
    step: &[isize],
    len: &[usize],
) -> Result<()> {
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
    Ok(())
}

/// Gather/scatter index inputs: one integer array per (sorted, unique) axis, all of one
/// shape, which is returned.
fn check_indices<'a>(
    op: &'static str,
    axes: &[usize],
    s: &[usize],
    idx: &[(&'a [usize], DType)],
) -> Result<&'a [usize]> {
    check_axes(op, axes, s.len())?;
    for &(shape, dtype) in idx {
        ensure!(
            dtype.is_integer(),
            Value,
            op,
            "Got indices with invalid dtype. Indices must be integral."
        );
        ensure!(shape == idx[0].0, Value, op, "All index arrays must have one shape.");
    }
    Ok(idx.first().map_or(&[], |i| i.0))
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
        let bad = Primitive::Reshape { shape: Shape::from_slice(&[4, 2]), rule: vec![] }
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

/// A shared value a primitive carries without knowing its type (kiln-core's custom rules):
/// equal and hashed by identity.
#[derive(Clone)]
pub struct Opaque(pub std::sync::Arc<dyn std::any::Any + Send + Sync>);

impl PartialEq for Opaque {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}
impl Eq for Opaque {}
impl std::hash::Hash for Opaque {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (std::sync::Arc::as_ptr(&self.0) as *const () as usize).hash(state)
    }
}
impl std::fmt::Debug for Opaque {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Opaque({:p})", std::sync::Arc::as_ptr(&self.0))
    }
}
