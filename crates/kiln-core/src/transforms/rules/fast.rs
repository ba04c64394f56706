//! Rules of the `mx.fast` primitives. Norm and attention gradients are exact compositions of
//! basic ops (computed in float32 for half floats); RoPE is a rotation, so its vjp is the
//! inverse rotation (the same primitive with `inverse`) and its jvp the rotation itself.
//! vmap moves the batch axis where the primitive maps over it (leading axes for the norms,
//! axis 1 for RoPE, merged into B for attention); cases it cannot express (batched weights,
//! offsets or frequencies) run the composition.

use super::vmap::{all_batched, to_front};
use crate::array::Array;
use crate::ops::{self, record};
use kiln_base::{bail, AttentionMask, DType, FastOp, Primitive, Result, Scalar};

type Out = (Vec<Array>, Vec<Option<usize>>);

/// float32 for half floats (the kernels' compute type), else the dtype itself.
fn compute(x: &Array) -> Result<Array> {
    match x.dtype() {
        DType::F16 | DType::BF16 => ops::astype(x, DType::F32),
        _ => Ok(x.clone()),
    }
}

fn f(v: f64, like: &Array) -> Result<Array> {
    ops::scalar(Scalar::Float(v), like.dtype())
}

const LAST: &[i64] = &[-1];

/// Normalisation statistics of `x` (compute dtype): `r = 1/sqrt(var + eps)` and `xhat`.
struct Norm {
    r: Array,
    xhat: Array,
    rms: bool,
}

impl Norm {
    fn new(x: &Array, eps: f64, rms: bool) -> Result<Norm> {
        let centred =
            if rms { x.clone() } else { ops::subtract(x, &ops::mean(x, Some(LAST), true)?)? };
        let var = ops::mean(&ops::square(&centred)?, Some(LAST), true)?;
        let r = ops::reciprocal(&ops::sqrt(&ops::add(&var, &f(eps, x)?)?)?)?;
        let xhat = ops::multiply(&centred, &r)?;
        Ok(Norm { r, xhat, rms })
    }

    /// The Jacobian of `x -> xhat` applied to `v` (symmetric, so either side):
    /// `r (v - mean(v) - xhat mean(v xhat))`, without the `mean(v)` term for rms.
    fn apply(&self, v: &Array) -> Result<Array> {
        let proj = ops::multiply(
            &self.xhat,
            &ops::mean(&ops::multiply(v, &self.xhat)?, Some(LAST), true)?,
        )?;
        let mut t = ops::subtract(v, &proj)?;
        if !self.rms {
            t = ops::subtract(&t, &ops::mean(v, Some(LAST), true)?)?;
        }
        ops::multiply(&self.r, &t)
    }
}

/// Sums `g` over every axis but the last (a weight's or bias's cotangent).
fn sum_leading(g: &Array) -> Result<Array> {
    let axes: Vec<i64> = (0..g.ndim() as i64 - 1).collect();
    if axes.is_empty() {
        return Ok(g.clone());
    }
    ops::sum(g, Some(&axes), false)
}

fn norm_parts(op: &FastOp) -> (f64, bool, bool, bool) {
    match op {
        FastOp::LayerNorm { eps, weight, bias } => (eps.as_f64(), false, *weight, *bias),
        FastOp::RmsNorm { eps, weight } => (eps.as_f64(), true, *weight, false),
        _ => (0.0, false, false, false),
    }
}

/// The fused backward primitive of a norm (`None` for other ops).
fn vjp_op(op: &FastOp, want_bias: bool) -> Option<FastOp> {
    match op {
        FastOp::LayerNorm { eps, weight, bias } => {
            Some(FastOp::LayerNormVjp { eps: *eps, weight: *weight, bias: *bias && want_bias })
        }
        FastOp::RmsNorm { eps, weight } => Some(FastOp::RmsNormVjp { eps: *eps, weight: *weight }),
        _ => None,
    }
}

/// Whether the vjp of a norm over `x` runs the fused backward kernel: on the GPU for the
/// dtypes its kernels take; on the CPU always (measured faster than the composition, see
/// `bench/norm_vjp_cpu.py`).
fn fused_backward(x: &Array) -> bool {
    match x.stream().device.kind {
        kiln_base::DeviceKind::Gpu => matches!(x.dtype(), DType::F32 | DType::F16 | DType::BF16),
        _ => true,
    }
}

fn norm_vjp(op: &FastOp, primals: &[Array], g: &Array, argnums: &[usize]) -> Result<Vec<Array>> {
    let (eps, rms, has_w, has_b) = norm_parts(op);
    if fused_backward(&primals[0]) {
        let bias_arg = 1 + has_w as usize;
        let want_bias = has_b && argnums.contains(&bias_arg);
        if let Some(vop) = vjp_op(op, want_bias) {
            let mut ins = vec![primals[0].clone()];
            if has_w {
                ins.push(primals[1].clone());
            }
            ins.push(ops::astype(g, primals[0].dtype())?);
            let outs = ops::record_all(Primitive::Fast(vop), ins)?;
            return argnums
                .iter()
                .map(|&i| match i {
                    0 => Ok(outs[0].clone()),
                    1 if has_w => Ok(outs[1].clone()),
                    _ => Ok(outs[1 + has_w as usize].clone()), // the bias
                })
                .collect();
        }
    }
    let x = compute(&primals[0])?;
    let g = compute(g)?;
    let n = Norm::new(&x, eps, rms)?;
    let gw = if has_w { ops::multiply(&g, &compute(&primals[1])?)? } else { g.clone() };
    argnums
        .iter()
        .map(|&i| match i {
            0 => n.apply(&gw),
            1 if has_w => sum_leading(&ops::multiply(&g, &n.xhat)?),
            _ => sum_leading(&g), // the bias
        })
        .collect()
}

/// The fused backward's parts: (eps, rms, weight, bias output).
fn norm_vjp_parts(op: &FastOp) -> (f64, bool, bool, bool) {
    match op {
        FastOp::LayerNormVjp { eps, weight, bias } => (eps.as_f64(), false, *weight, *bias),
        FastOp::RmsNormVjp { eps, weight } => (eps.as_f64(), true, *weight, false),
        _ => (0.0, false, false, false),
    }
}

/// The fused backward (`LayerNormVjp`/`RmsNormVjp`) written with basic ops, outputs in the
/// dtype of x: what its own vjp, jvp and vmap rules differentiate or map.
fn norm_vjp_composed(op: &FastOp, inputs: &[Array]) -> Result<Vec<Array>> {
    let (eps, rms, has_w, has_b) = norm_vjp_parts(op);
    let dtype = inputs[0].dtype();
    let x = compute(&inputs[0])?;
    let g = compute(&inputs[1 + has_w as usize])?;
    let n = Norm::new(&x, eps, rms)?;
    let gw = if has_w { ops::multiply(&g, &compute(&inputs[1])?)? } else { g.clone() };
    let mut outs = vec![n.apply(&gw)?];
    if has_w {
        outs.push(sum_leading(&ops::multiply(&g, &n.xhat)?)?);
    }
    if has_b {
        outs.push(sum_leading(&g)?);
    }
    outs.iter().map(|o| ops::astype(o, dtype)).collect()
}

/// vjp of the fused backward: the vjp of its composition (grad of grad).
fn norm_vjp_vjp(
    op: &FastOp,
    primals: &[Array],
    cotangents: &[Array],
    argnums: &[usize],
) -> Result<Vec<Array>> {
    let op = op.clone();
    let (_, grads) =
        crate::transforms::vjp(move |p| norm_vjp_composed(&op, p), primals, cotangents)?;
    Ok(argnums.iter().map(|&i| grads[i].clone()).collect())
}

/// jvp of the fused backward: the jvp of its composition.
fn norm_vjp_jvp(
    op: &FastOp,
    primals: &[Array],
    tangents: &[Array],
    argnums: &[usize],
) -> Result<Vec<Array>> {
    let full: Vec<Array> = (0..primals.len())
        .map(|i| match argnums.iter().position(|&a| a == i) {
            Some(k) => Ok(tangents[k].clone()),
            None => ops::zeros_like(&primals[i], None),
        })
        .collect::<Result<_>>()?;
    let op = op.clone();
    Ok(crate::transforms::jvp(move |p| norm_vjp_composed(&op, p), primals, &full)?.1)
}

/// vmap of the fused backward. Rows are independent, so with only `dx` to compute the batch
/// joins the leading (row) axes of x and g; weight and bias gradients are sums over rows,
/// which must stay apart per batch entry, so those (and batched weights) map the composition.
fn norm_vjp_vmap(op: &FastOp, inputs: &[Array], axes: &[Option<usize>]) -> Result<Out> {
    let (_, _, has_w, _) = norm_vjp_parts(op);
    if op.num_outputs() == 1 && !(has_w && axes[1].is_some()) {
        let g_at = 1 + has_w as usize;
        let both = all_batched(&[inputs[0].clone(), inputs[g_at].clone()], &[axes[0], axes[g_at]])?;
        let mut ins = vec![both[0].clone()];
        ins.extend_from_slice(&inputs[1..g_at]);
        ins.push(both[1].clone());
        return Ok((vec![record(Primitive::Fast(op.clone()), ins)?], vec![Some(0)]));
    }
    let op = op.clone();
    let (outs, _) =
        crate::transforms::vmap_outputs(move |p| norm_vjp_composed(&op, p), inputs, axes)?;
    Ok(outs.into_iter().unzip())
}

fn norm_jvp(
    op: &FastOp,
    primals: &[Array],
    tangents: &[Array],
    argnums: &[usize],
) -> Result<Array> {
    let (eps, rms, has_w, _) = norm_parts(op);
    let x = compute(&primals[0])?;
    let n = Norm::new(&x, eps, rms)?;
    let w = if has_w { Some(compute(&primals[1])?) } else { None };
    let mut out = ops::zeros_like(&x, None)?;
    for (&i, t) in argnums.iter().zip(tangents) {
        let t = compute(t)?;
        let term = match i {
            0 => {
                let j = n.apply(&t)?;
                match &w {
                    Some(w) => ops::multiply(&j, w)?,
                    None => j,
                }
            }
            1 if has_w => ops::multiply(&t, &n.xhat)?,
            _ => t,
        };
        out = ops::add(&out, &term)?;
    }
    Ok(out)
}

/// The forward as a composition of basic ops, in the inputs' dtype: what the GPU runs until
/// it has fused kernels for these ops (under compile, the elementwise parts fuse).
pub(crate) fn composed(op: &FastOp, inputs: &[Array]) -> Option<Result<Array>> {
    let dtype = inputs[0].dtype();
    let out = match op {
        FastOp::LayerNorm { .. } | FastOp::RmsNorm { .. } => norm_composed(op, inputs),
        FastOp::Attention { .. } => Attn::new(op, inputs).and_then(|a| a.output()),
        _ => return None,
    };
    Some(out.and_then(|y| ops::astype(&y, dtype)))
}

/// The norm written with basic ops (vmap with batched weights, the GPU).
fn norm_composed(op: &FastOp, inputs: &[Array]) -> Result<Array> {
    let (eps, rms, has_w, has_b) = norm_parts(op);
    let dtype = inputs[0].dtype();
    let x = compute(&inputs[0])?;
    let mut y = Norm::new(&x, eps, rms)?.xhat;
    if has_w {
        y = ops::multiply(&y, &inputs[1])?;
    }
    if has_b {
        y = ops::add(&y, &inputs[1 + has_w as usize])?;
    }
    ops::astype(&y, dtype)
}

/// Attention's pieces, grouped: q (B, Hk, G, Lq, D), k and v (B, Hk, 1, L, ·) and the
/// probabilities P (B, Hk, G, Lq, Lk), all in the compute dtype.
pub(crate) struct Attn {
    q: Array,
    /// `q * scale`: the scale goes on q (L x D) rather than on the scores (L x L).
    qs: Array,
    k: Array,
    v: Array,
    /// The masked scores (B, Hk, G, Lq, Lk), scaled.
    s: Array,
    p: Array,
    /// Where scores are visible, when some row may see no key (causal with Lq > Lk, a
    /// boolean mask): such a row averages every value, and its hidden scores, constants,
    /// pass no gradient (elsewhere hidden scores have zero weight anyway).
    visible: Option<Array>,
    scale: f64,
    shape: [usize; 5],
    /// The products' operand dtype: the compute dtype, except half floats on the GPU, whose
    /// matmuls run on tensor cores in the inputs' dtype (accumulating in float32) as MLX's
    /// and torch's unfused attention do; everything between the products stays float32.
    operands: DType,
}

/// `a @ b` with both operands cast to `operands`, the result in float32 for half floats.
fn product(operands: DType, a: &Array, b: &Array) -> Result<Array> {
    compute(&ops::matmul(&ops::astype(a, operands)?, &ops::astype(b, operands)?)?)
}

fn grouped(x: &Array, hk: usize, g: usize) -> Result<Array> {
    let s = x.shape();
    ops::reshape(x, &[s[0] as i64, hk as i64, g as i64, s[2] as i64, s[3] as i64])
}

impl Attn {
    pub(crate) fn new(op: &FastOp, primals: &[Array]) -> Result<Attn> {
        let FastOp::Attention { scale, mask } = op else { bail!(Value, "vjp", "Not attention.") };
        let scale = scale.as_f64();
        let (qs, ks) = (primals[0].shape().to_vec(), primals[1].shape().to_vec());
        let (b, hq, lq, hk, lk) = (qs[0], qs[1], qs[2], ks[1], ks[2]);
        let g = hq / hk.max(1);
        let half = matches!(primals[0].dtype(), DType::F16 | DType::BF16);
        let on_gpu = primals[0].stream().device.kind == kiln_base::DeviceKind::Gpu;
        let operands =
            if half && on_gpu { primals[0].dtype() } else { compute(&primals[0])?.dtype() };
        let q = grouped(&ops::astype(&primals[0], operands)?, hk, g)?;
        let k = grouped(&ops::astype(&primals[1], operands)?, hk, 1)?;
        let v = grouped(&ops::astype(&primals[2], operands)?, hk, 1)?;
        let qs = ops::multiply(&q, &f(scale, &q)?)?;
        let mut s = product(operands, &qs, &ops::swapaxes(&k, -1, -2)?)?;
        let full = [b, hk, g, lq, lk];
        let lowest = f(if s.dtype() == DType::F64 { f64::MIN } else { f32::MIN as f64 }, &s)?;
        let mut visible_where = None;
        match mask {
            AttentionMask::None => {}
            AttentionMask::Causal => {
                let i = ops::reshape(&ops::arange(0.0, lq as f64, 1.0, DType::I64)?, &[-1, 1])?;
                let j = ops::arange(0.0, lk as f64, 1.0, DType::I64)?;
                let shift = ops::scalar(Scalar::Int(lk as i64 - lq as i64), DType::I64)?;
                let visible = ops::less_equal(&j, &ops::add(&i, &shift)?)?;
                s = ops::where_(&visible, &s, &lowest)?;
                if lq > lk {
                    visible_where = Some(visible);
                }
            }
            AttentionMask::Additive | AttentionMask::Boolean => {
                let m = ops::broadcast_to(&primals[3], &[b, hq, lq, lk])?;
                let m = ops::reshape(&m, &full.map(|d| d as i64))?;
                s = if *mask == AttentionMask::Boolean {
                    visible_where = Some(m.clone());
                    ops::where_(&m, &s, &lowest)?
                } else {
                    ops::add(&s, &compute(&m)?)?
                };
            }
        }
        let p = ops::softmax(&s, Some(LAST), true)?;
        let visible = visible_where;
        Ok(Attn { q, qs, k, v, s, p, visible, scale, shape: [b, hq, lq, hk, g], operands })
    }

    /// The output when each query head `h` also has a sink logit `sinks[h]`: one more
    /// column in every row's softmax that carries no value (MLX's `sinks=`). Built from
    /// basic ops, so every transform differentiates it (sinks included).
    pub(crate) fn output_with_sinks(&self, sinks: &Array) -> Result<Array> {
        let [b, _, lq, hk, g] = self.shape;
        let sk =
            ops::reshape(&ops::astype(sinks, self.s.dtype())?, &[1, hk as i64, g as i64, 1, 1])?;
        let sk = ops::broadcast_to(&sk, &[b, hk, g, lq, 1])?;
        let p = ops::softmax(&ops::concatenate(&[sk, self.s.clone()], -1)?, Some(LAST), true)?;
        let p = ops::slice(&p, &[None, None, None, None, Some(1)], &[None; 5], &[1; 5])?;
        self.ungroup(&self.mm(&p, &self.v)?)
    }

    /// `a @ b` with operands in the products' dtype, result in the compute dtype.
    fn mm(&self, a: &Array, b: &Array) -> Result<Array> {
        product(self.operands, a, b)
    }

    /// Back to (B, Hq, L, ·) from the grouped layout.
    fn ungroup(&self, x: &Array) -> Result<Array> {
        let s = x.shape();
        let [b, hq, ..] = self.shape;
        ops::reshape(x, &[b as i64, hq as i64, s[3] as i64, s[4] as i64])
    }

    /// Sums the group axis away: (B, Hk, G, L, ·) -> (B, Hk, L, ·).
    fn sum_group(x: &Array) -> Result<Array> {
        ops::sum(x, Some(&[2]), false)
    }

    pub(super) fn output(&self) -> Result<Array> {
        self.ungroup(&self.mm(&self.p, &self.v)?)
    }

    /// The row logsumexp of the masked scores, (B, Hq, Lq) float32. (A row that sees no key
    /// gives about the lowest float here, `log(Lk)` in the fused kernels: the same
    /// probabilities, and no tangent either way.)
    pub(super) fn lse(&self) -> Result<Array> {
        let [b, hq, lq, ..] = self.shape;
        let l = ops::logsumexp(&self.s, Some(LAST), false)?;
        ops::astype(&ops::reshape(&l, &[b as i64, hq as i64, lq as i64])?, DType::F32)
    }

    /// `x` with hidden scores' entries zeroed (see `visible`).
    fn visible_only(&self, x: &Array) -> Result<Array> {
        match &self.visible {
            Some(m) => ops::where_(m, x, &ops::scalar(Scalar::Float(0.0), x.dtype())?),
            None => Ok(x.clone()),
        }
    }

    /// `P (dS - sum(dS P))`: the softmax Jacobian (symmetric) applied to `ds`.
    fn softmax_apply(&self, ds: &Array) -> Result<Array> {
        let dot = ops::sum(&ops::multiply(ds, &self.p)?, Some(LAST), true)?;
        ops::multiply(&self.p, &ops::subtract(ds, &dot)?)
    }
}

/// Attention's vjp as a composition, given o's cotangent `g`.
pub(super) fn attention_vjp(
    op: &FastOp,
    primals: &[Array],
    g: &Array,
    argnums: &[usize],
) -> Result<Vec<Array>> {
    let a = Attn::new(op, primals)?;
    let [_, _, _, hk, grp] = a.shape;
    let go = grouped(&compute(g)?, hk, grp)?;
    let t = |x: &Array| ops::swapaxes(x, -1, -2);
    let dp = a.mm(&go, &t(&a.v)?)?;
    // The scores' gradient without the scale: it is applied to the (L x D) products instead.
    let ds = a.visible_only(&a.softmax_apply(&dp)?)?;
    // Cast to the products' dtype before transposing: one cast (fused into the softmax
    // Jacobian's kernel) serves both products, instead of one per view.
    let ds = ops::astype(&ds, a.operands)?;
    argnums
        .iter()
        .map(|&i| match i {
            0 => {
                let dq = a.mm(&ds, &a.k)?;
                a.ungroup(&ops::multiply(&dq, &f(a.scale, &dq)?)?)
            }
            1 => Attn::sum_group(&a.mm(&t(&ds)?, &a.qs)?),
            2 => Attn::sum_group(&a.mm(&t(&ops::astype(&a.p, a.operands)?)?, &go)?),
            // The mask carries no gradient here.
            _ => ops::zeros_like(&primals[i], None),
        })
        .collect()
}

fn attention_jvp(
    op: &FastOp,
    primals: &[Array],
    tangents: &[Array],
    argnums: &[usize],
) -> Result<Array> {
    let a = Attn::new(op, primals)?;
    let [_, _, _, hk, grp] = a.shape;
    let t = |x: &Array| ops::swapaxes(x, -1, -2);
    let mut ds: Option<Array> = None;
    let mut out: Option<Array> = None;
    let acc = |slot: &mut Option<Array>, v: Array| -> Result<()> {
        *slot = Some(match slot.take() {
            Some(s) => ops::add(&s, &v)?,
            None => v,
        });
        Ok(())
    };
    for (&i, tan) in argnums.iter().zip(tangents) {
        match i {
            0 => acc(&mut ds, a.mm(&grouped(tan, hk, grp)?, &t(&a.k)?)?)?,
            1 => acc(&mut ds, a.mm(&a.q, &t(&grouped(tan, hk, 1)?)?)?)?,
            2 => acc(&mut out, a.mm(&a.p, &grouped(tan, hk, 1)?)?)?,
            _ => {}
        }
    }
    if let Some(ds) = ds {
        let ds = a.visible_only(&ops::multiply(&ds, &f(a.scale, &ds)?)?)?;
        acc(&mut out, a.mm(&a.softmax_apply(&ds)?, &a.v)?)?;
    }
    match out {
        Some(o) => a.ungroup(&o),
        None => ops::zeros_like(&a.output()?, None),
    }
}

fn rope_with(op: &FastOp, x: &Array, rest: &[Array], inverse: bool) -> Result<Array> {
    let FastOp::Rope { dims, traditional, base, scale, freqs, .. } = op else {
        bail!(Value, "rope", "Not rope.")
    };
    let fop = FastOp::Rope {
        dims: *dims,
        traditional: *traditional,
        base: *base,
        scale: *scale,
        freqs: *freqs,
        inverse,
    };
    let mut inputs = vec![x.clone()];
    inputs.extend_from_slice(rest);
    record(Primitive::Fast(fop), inputs)
}

fn rope_inverse(op: &FastOp) -> bool {
    matches!(op, FastOp::Rope { inverse: true, .. })
}

pub(super) fn vjp(
    op: &FastOp,
    primals: &[Array],
    cotangents: &[Array],
    argnums: &[usize],
    outputs: &[Array],
) -> Result<Vec<Array>> {
    let g = &cotangents[0];
    match op {
        FastOp::AttentionTrain { .. } | FastOp::AttentionVjp { .. } => {
            super::fast_train::vjp(op, primals, cotangents, argnums, outputs)
        }
        FastOp::LayerNorm { .. } | FastOp::RmsNorm { .. } => norm_vjp(op, primals, g, argnums),
        FastOp::Rope { .. } => argnums
            .iter()
            .map(|&i| match i {
                0 => rope_with(
                    op,
                    &ops::astype(g, primals[0].dtype())?,
                    &primals[1..],
                    !rope_inverse(op),
                ),
                _ => ops::zeros_like(&primals[i], None),
            })
            .collect(),
        FastOp::Attention { .. } => attention_vjp(op, primals, g, argnums),
        FastOp::LayerNormVjp { .. } | FastOp::RmsNormVjp { .. } => {
            norm_vjp_vjp(op, primals, cotangents, argnums)
        }
        FastOp::GatherMm | FastOp::GatherQmm { .. } => gathered_vjp(op, primals, g, argnums),
        FastOp::QuantizedMatmul { .. } => {
            let (_, cots) =
                crate::transforms::vjp(|ins| fused_composed(op, ins), primals, cotangents)?;
            Ok(argnums.iter().map(|&i| cots[i].clone()).collect())
        }
        FastOp::CKernel(_) | FastOp::CudaKernel(_) => {
            Err(super::missing("vjp", &Primitive::Fast(op.clone())))
        }
    }
}

/// The vjp of a gathered product `x[lhs] @ W[rhs]` (`W` dense, or dequantized and
/// transposed): x's cotangent `g @ W[rhs].T` is itself a gathered product (each expert read
/// in place, not copied per pick), scattered back through `take`'s rule; the weights' is
/// the composition's (`x[lhs].T @ g` per pick, scattered into the experts).
fn gathered_vjp(
    op: &FastOp,
    primals: &[Array],
    g: &Array,
    argnums: &[usize],
) -> Result<Vec<Array>> {
    let (x, lhs, rhs) = match op {
        FastOp::GatherMm => (&primals[0], &primals[2], &primals[3]),
        _ => (&primals[0], &primals[4], &primals[5]),
    };
    // `x`'s cotangent through `take(flat x, lhs)`: the scatter-add of `contrib`.
    let into_x = |contrib: &Array| -> Result<Array> {
        let s = x.shape();
        let flat = [-1, s[s.len() - 2] as i64, s[s.len() - 1] as i64];
        let pick =
            |ins: &[Array]| Ok(vec![ops::take(&ops::reshape(&ins[0], &flat)?, lhs, Some(0))?]);
        let (_, cots) =
            crate::transforms::vjp(pick, std::slice::from_ref(x), std::slice::from_ref(contrib))?;
        Ok(cots[0].clone())
    };
    let every = ops::reshape(
        &ops::arange(0.0, lhs.size() as f64, 1.0, DType::U32)?,
        &lhs.shape().iter().map(|&d| d as i64).collect::<Vec<_>>(),
    )?;
    let mut out = Vec::with_capacity(argnums.len());
    let mut weights = None;
    for &i in argnums {
        out.push(match (op, i) {
            (FastOp::GatherMm, 0) => {
                let bt = ops::swapaxes(&primals[1], -1, -2)?;
                into_x(&ops::gather_mm(g, &bt, Some(&every), Some(rhs))?)?
            }
            (FastOp::GatherQmm { group_size, bits }, 0) => {
                // Every expert dequantized once (not once per pick), then a gathered product.
                let [w, s, b] = [1, 2, 3].map(|j| &primals[j]);
                let dense = ops::dequantize(w, s, b, *group_size, *bits, Some(g.dtype()))?;
                into_x(&ops::gather_mm(g, &dense, Some(&every), Some(rhs))?)?
            }
            _ => {
                let cots = match &weights {
                    Some(c) => c,
                    None => {
                        let ct = [g.clone()];
                        let (_, c) =
                            crate::transforms::vjp(|ins| fused_composed(op, ins), primals, &ct)?;
                        weights.insert(c)
                    }
                };
                cots[i].clone()
            }
        });
    }
    Ok(out)
}

/// The fused products' definitions (their transforms are the compositions').
fn fused_composed(op: &FastOp, inputs: &[Array]) -> Result<Vec<Array>> {
    let out = match op {
        FastOp::QuantizedMatmul { group_size, bits } => {
            ops::composed_quantized_matmul(inputs, true, *group_size, *bits)?
        }
        FastOp::GatherMm => ops::composed_gather_mm(inputs)?,
        FastOp::GatherQmm { group_size, bits } => {
            ops::composed_gather_qmm(inputs, true, *group_size, *bits)?
        }
        _ => bail!(Value, op.name(), "Not a fused product."),
    };
    Ok(vec![out])
}

pub(super) fn jvp(
    op: &FastOp,
    primals: &[Array],
    tangents: &[Array],
    argnums: &[usize],
) -> Result<Vec<Array>> {
    let out = match op {
        FastOp::AttentionTrain { .. } | FastOp::AttentionVjp { .. } => {
            return super::fast_train::jvp(op, primals, tangents, argnums)
        }
        FastOp::LayerNorm { .. } | FastOp::RmsNorm { .. } => {
            norm_jvp(op, primals, tangents, argnums)?
        }
        FastOp::Rope { .. } => match argnums.iter().position(|&i| i == 0) {
            Some(p) => {
                let t = ops::astype(&tangents[p], primals[0].dtype())?;
                rope_with(op, &t, &primals[1..], rope_inverse(op))?
            }
            None => ops::zeros_like(&primals[0], None)?,
        },
        FastOp::Attention { .. } => attention_jvp(op, primals, tangents, argnums)?,
        FastOp::LayerNormVjp { .. } | FastOp::RmsNormVjp { .. } => {
            return norm_vjp_jvp(op, primals, tangents, argnums)
        }
        FastOp::QuantizedMatmul { .. } | FastOp::GatherMm | FastOp::GatherQmm { .. } => {
            // Every primal gets a tangent: the given ones, zeros for the rest.
            let mut all: Vec<Array> =
                primals.iter().map(|p| ops::zeros_like(p, None)).collect::<Result<_>>()?;
            for (&i, t) in argnums.iter().zip(tangents) {
                all[i] = t.clone();
            }
            let (_, tans) = crate::transforms::jvp(|ins| fused_composed(op, ins), primals, &all)?;
            return Ok(tans);
        }
        FastOp::CKernel(_) | FastOp::CudaKernel(_) => {
            return Err(super::missing("jvp", &Primitive::Fast(op.clone())))
        }
    };
    Ok(vec![out])
}

pub(super) fn vmap(op: &FastOp, inputs: &[Array], axes: &[Option<usize>]) -> Result<Out> {
    let prim = Primitive::Fast(op.clone());
    match op {
        FastOp::AttentionTrain { .. } | FastOp::AttentionVjp { .. } => {
            super::fast_train::vmap(op, inputs, axes)
        }
        FastOp::LayerNorm { .. } | FastOp::RmsNorm { .. } => {
            let x_only = axes[1..].iter().all(Option::is_none);
            let x = match axes[0] {
                Some(a) => to_front(&inputs[0], a)?,
                None => {
                    // Only weights are batched: give x the batch axis by broadcasting.
                    let n = inputs
                        .iter()
                        .zip(axes)
                        .find_map(|(x, a)| a.map(|a| x.shape()[a]))
                        .unwrap_or(1);
                    let mut shape = vec![n];
                    shape.extend_from_slice(inputs[0].shape());
                    ops::broadcast_to(&ops::expand_dims(&inputs[0], &[0])?, &shape)?
                }
            };
            if x_only {
                let mut ins = vec![x];
                ins.extend_from_slice(&inputs[1..]);
                return Ok((vec![record(prim, ins)?], vec![Some(0)]));
            }
            // Batched weight or bias (N, D): align as (N, 1, ..., 1, D) and compose.
            let mut ins = vec![x.clone()];
            for (p, a) in inputs[1..].iter().zip(&axes[1..]) {
                let p = match a {
                    Some(a) => {
                        let p = to_front(p, *a)?;
                        let mut shape: Vec<i64> = vec![p.shape()[0] as i64];
                        shape.extend(std::iter::repeat_n(1, x.ndim() - 2));
                        shape.push(p.shape()[1] as i64);
                        ops::reshape(&p, &shape)?
                    }
                    None => p.clone(),
                };
                ins.push(p);
            }
            Ok((vec![norm_composed(op, &ins)?], vec![Some(0)]))
        }
        FastOp::Rope { .. } => {
            if axes[1..].iter().any(Option::is_some) {
                bail!(Value, "vmap", "rope with a batched offset or freqs is not supported.");
            }
            // The batch goes to axis 1: axis 0 stays the one offsets index, and T, D stay last.
            let x = match axes[0] {
                Some(a) => ops::moveaxis(&inputs[0], a as i64, 1)?,
                None => return Ok((vec![record(prim, inputs.to_vec())?], vec![None])),
            };
            let mut ins = vec![x];
            ins.extend_from_slice(&inputs[1..]);
            Ok((vec![record(prim, ins)?], vec![Some(1)]))
        }
        FastOp::Attention { .. } => {
            let n = inputs.iter().zip(axes).find_map(|(x, a)| a.map(|a| x.shape()[a])).unwrap_or(1);
            let batched = all_batched(inputs, axes)?;
            let b = batched[0].shape()[1];
            let mut ins = Vec::with_capacity(batched.len());
            for (i, x) in batched.iter().enumerate() {
                let s = x.shape();
                // Merge (N, B) into one batch axis; a mask broadcast over B first.
                let x = if i == 3 && s[1] != b {
                    let mut shape = s.to_vec();
                    shape[1] = b;
                    ops::broadcast_to(x, &shape)?
                } else {
                    x.clone()
                };
                let s = x.shape();
                ins.push(ops::reshape(
                    &x,
                    &[(n * s[1]) as i64, s[2] as i64, s[3] as i64, s[4] as i64],
                )?);
            }
            let out = record(prim, ins)?;
            let s = out.shape().to_vec();
            let out =
                ops::reshape(&out, &[n as i64, b as i64, s[1] as i64, s[2] as i64, s[3] as i64])?;
            Ok((vec![out], vec![Some(0)]))
        }
        FastOp::LayerNormVjp { .. } | FastOp::RmsNormVjp { .. } => norm_vjp_vmap(op, inputs, axes),
        FastOp::QuantizedMatmul { .. } | FastOp::GatherMm | FastOp::GatherQmm { .. } => {
            let (outs, _) =
                crate::transforms::vmap_outputs(|ins| fused_composed(op, ins), inputs, axes)?;
            Ok(outs.into_iter().unzip())
        }
        FastOp::CKernel(_) | FastOp::CudaKernel(_) => Err(super::missing("vmap", &prim)),
    }
}
