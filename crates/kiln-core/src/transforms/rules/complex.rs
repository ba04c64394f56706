//! Gradients of complex64 values, with MLX's convention: a tangent maps forward as the
//! derivative does (`jvp(t) = J t`), a cotangent maps back through the conjugate transpose
//! (`vjp(g) = J^H g`), so the gradient of a real loss `L` at `z = x + iy` is
//! `dL/dx + i dL/dy` (PyTorch's convention; JAX returns its conjugate).
//!
//! Rules here: the `Complex` parts (real, imag, conj, abs) and `Fft`. Every other primitive
//! whose derivative is complex-linear (elementwise arithmetic, reductions, scans, matmul)
//! keeps its real rule: `conj(rule(conj(g)))` is its conjugate transpose (see
//! [`conjugated_vjp`]).

use crate::array::Array;
use crate::ops::{self, record, scalar};
use kiln_base::{ComplexOp, DType, FftKind, Primitive, Result, Scalar};

/// Whether `prim`'s real vjp rule, on complex64 values, must be conjugated to give MLX's
/// cotangents: primitives whose Jacobian entries depend on the primal values. Movement,
/// indexing and sums have real 0/1 Jacobians, where conjugating would change nothing.
pub(super) fn conjugated_vjp(prim: &Primitive, primals: &[Array]) -> bool {
    let complex = primals.iter().any(|p| p.dtype().is_complex());
    complex
        && matches!(
            prim,
            Primitive::Unary(_)
                | Primitive::Binary(_)
                | Primitive::Reduce { .. }
                | Primitive::Scan { .. }
                | Primitive::Matmul
                | Primitive::Softmax { .. }
                | Primitive::LogSumExp
        )
}

/// `x` as complex64 with `x` in the imaginary part (`i x`).
fn times_i(x: &Array) -> Result<Array> {
    ops::multiply(&ops::astype(x, DType::C64)?, &scalar(Scalar::Complex(0.0, 1.0), DType::C64)?)
}

/// `z / |z|`, 0 where `z` is 0 (MLX's abs gradient there).
fn unit(z: &Array, magnitude: &Array) -> Result<Array> {
    let zero = scalar(Scalar::Float(0.0), DType::F32)?;
    let safe = ops::where_(
        &ops::equal(magnitude, &zero)?,
        &scalar(Scalar::Float(1.0), DType::F32)?,
        magnitude,
    )?;
    let ratio = ops::divide(z, &ops::astype(&safe, DType::C64)?)?;
    ops::where_(&ops::equal(magnitude, &zero)?, &ops::zeros(&[], DType::C64)?, &ratio)
}

/// The product of the transformed sizes of `shape` (the `1/n` of the unscaled inverse).
fn transform_size(axes: &[usize], shape: &[usize]) -> f64 {
    axes.iter().map(|&a| shape[a] as f64).product()
}

fn scale(x: &Array, factor: f64) -> Result<Array> {
    ops::multiply(x, &scalar(Scalar::Float(factor), x.dtype())?)
}

/// Cotangents of a `Complex` or `Fft` primitive's single input.
pub(super) fn vjp(prim: &Primitive, x: &Array, g: &Array, out: &Array) -> Result<Array> {
    match prim {
        Primitive::Complex(op) => match op {
            ComplexOp::Real => ops::astype(g, DType::C64),
            ComplexOp::Imag => times_i(g),
            ComplexOp::Conj => ops::conjugate(g),
            // d|z|/dx + i d|z|/dy = z / |z|.
            ComplexOp::Abs => ops::multiply(&ops::astype(g, DType::C64)?, &unit(x, out)?),
        },
        Primitive::Fft { axes, inverse, kind } => {
            let n = transform_size(axes, x.shape());
            let complex = |inverse: bool, y: &Array| {
                record(
                    Primitive::Fft { axes: axes.clone(), inverse, kind: FftKind::Complex },
                    vec![y.clone()],
                )
            };
            match kind {
                // The DFT matrix F is symmetric, so F^H = conj(F) = n * (its inverse).
                FftKind::Complex if !inverse => scale(&complex(true, g)?, n),
                FftKind::Complex => scale(&complex(false, g)?, 1.0 / n),
                // rfft is the full transform keeping the first n/2 + 1 frequencies: zero-pad
                // the cotangent back to n, go through the full adjoint, keep the real part.
                FftKind::RealForward => {
                    let last = *axes.last().expect("checked when recorded");
                    let mut pad = g.shape().to_vec();
                    pad[last] = x.shape()[last] - g.shape()[last];
                    let full =
                        ops::concatenate(&[g.clone(), ops::zeros(&pad, DType::C64)?], last as i64)?;
                    ops::real(&scale(&complex(true, &full)?, n)?)
                }
                // irfft reads each frequency strictly between 0 and n/2 twice (itself and
                // its mirrored conjugate) and the others once: rfft of the cotangent,
                // weighted by 2 there, over the output size.
                FftKind::RealInverse { n: len } => {
                    let last = *axes.last().expect("checked when recorded");
                    let n = transform_size(axes, g.shape());
                    let spectrum = record(
                        Primitive::Fft {
                            axes: axes.clone(),
                            inverse: false,
                            kind: FftKind::RealForward,
                        },
                        vec![g.clone()],
                    )?;
                    let m = len / 2 + 1;
                    let weights: Vec<f32> = (0..m)
                        .map(|k| if k == 0 || 2 * k == *len { 1.0 } else { 2.0 })
                        .map(|w| (w / n) as f32)
                        .collect();
                    let mut wshape = vec![1; x.ndim()];
                    wshape[last] = m;
                    ops::multiply(&spectrum, &Array::from_slice(&weights, &wshape)?)
                }
            }
        }
        _ => unreachable!("dispatched by class"),
    }
}

/// The tangent of a `Complex` or `Fft` primitive's output.
pub(super) fn jvp(prim: &Primitive, x: &Array, t: &Array, out: &Array) -> Result<Array> {
    match prim {
        Primitive::Complex(ComplexOp::Abs) => {
            // d|z| = Re(conj(z) dz) / |z|, 0 at z = 0.
            ops::real(&ops::multiply(&ops::conjugate(&unit(x, out)?)?, t)?)
        }
        // Every other part and every transform is (real-)linear: apply it to the tangent.
        Primitive::Complex(_) | Primitive::Fft { .. } => record(prim.clone(), vec![t.clone()]),
        _ => unreachable!("dispatched by class"),
    }
}
