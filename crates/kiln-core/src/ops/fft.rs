//! `mx.fft`: discrete Fourier transforms over any axes (one `Fft` primitive per call; the
//! input is zero-padded or truncated to the requested sizes first), `norm` scaling, the
//! frequency grids and the shifts. Errors follow MLX, which names every transform `fftn`.

use super::{astype, concatenate, multiply, record, roll, scalar, slice, zeros};
use crate::array::Array;
use kiln_base::shape::normalize_axis;
use kiln_base::{bail, ensure, DType, FftKind, Primitive, Result, Scalar};

/// Which transform a front-end call asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FftType {
    /// complex to complex (`fft`, `ifft`, ...).
    Complex,
    /// real to half-spectrum (`rfft`, ...) or its inverse (`irfft`, ...).
    Real,
}

/// numpy's `norm`: which direction carries the `1/n` factor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FftNorm {
    /// Unscaled forward, `1/n` inverse (the default).
    Backward,
    /// `1/sqrt(n)` both ways.
    Ortho,
    /// `1/n` forward, unscaled inverse.
    Forward,
}

impl FftNorm {
    /// Parses `"backward"`, `"ortho"` or `"forward"`.
    pub fn parse(op: &'static str, s: &str) -> Result<FftNorm> {
        Ok(match s {
            "backward" => FftNorm::Backward,
            "ortho" => FftNorm::Ortho,
            "forward" => FftNorm::Forward,
            _ => bail!(
                Value,
                op,
                "Invalid norm. Expected one of {{'backward', 'ortho', 'forward'}}."
            ),
        })
    }
}

/// The n-d transform: `s` sizes along `axes` (None: all axes, the input's sizes; for the
/// real inverse the last size defaults to `2 * (m - 1)`).
pub fn fftn(
    x: &Array,
    s: Option<&[i64]>,
    axes: Option<&[i64]>,
    kind: FftType,
    inverse: bool,
    norm: FftNorm,
) -> Result<Array> {
    let op = "fftn";
    // Given axes are checked first (IndexError on a 0-d input, as MLX).
    let axes: Vec<usize> = match axes {
        Some(axes) => {
            axes.iter().map(|&a| normalize_axis(op, a, x.ndim())).collect::<Result<Vec<_>>>()?
        }
        None => {
            ensure!(s.is_none(), Value, op, "`axes` should not be `None` if `s` is not `None`.");
            (0..x.ndim()).collect()
        }
    };
    ensure!(x.ndim() > 0, Value, op, "Requires array with at least one dimension.");
    let mut sorted = axes.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != axes.len() {
        let shown: Vec<String> = axes.iter().map(|a| a.to_string()).collect();
        bail!(Value, op, "Duplicated axis received ({})", shown.join(","));
    }
    let real_inverse = kind == FftType::Real && inverse;
    let n: Vec<i64> = match s {
        Some(s) => {
            ensure!(s.len() == axes.len(), Value, op, "Shape and axes have different sizes.");
            s.to_vec()
        }
        None => axes
            .iter()
            .enumerate()
            .map(|(i, &a)| {
                let d = x.shape()[a] as i64;
                if real_inverse && i + 1 == axes.len() {
                    2 * (d - 1)
                } else {
                    d
                }
            })
            .collect(),
    };
    for &v in &n {
        ensure!(v > 0, Value, op, "Invalid FFT output size requested ({v})");
    }
    let Some(&real_axis) = axes.last() else {
        return Ok(x.clone());
    };
    let n: Vec<usize> = n.iter().map(|&v| v as usize).collect();
    // The real axis must be the last of the primitive's sorted axes: otherwise split into a
    // complex transform over the others and a one-axis real transform.
    if kind == FftType::Real && axes.len() > 1 && sorted.last() != Some(&real_axis) {
        let k = axes.len() - 1;
        let (rest, rest_n) = (&axes[..k], &n[..k]);
        let i64s = |v: &[usize]| v.iter().map(|&a| a as i64).collect::<Vec<_>>();
        let one = |y: &Array| {
            let (a, m) = ([real_axis as i64], [n[k] as i64]);
            fftn(y, Some(&m), Some(&a), FftType::Real, inverse, norm)
        };
        let others = |y: &Array| {
            fftn(y, Some(&i64s(rest_n)), Some(&i64s(rest)), FftType::Complex, inverse, norm)
        };
        return if inverse { one(&others(x)?) } else { others(&one(x)?) };
    }
    // Input sizes: the output sizes, except the real inverse's half spectrum.
    let mut y = match (kind, inverse) {
        (FftType::Real, false) => astype(x, DType::F32)?,
        _ => astype(x, DType::C64)?,
    };
    for (i, &a) in axes.iter().enumerate() {
        let want = if real_inverse && i + 1 == axes.len() { n[i] / 2 + 1 } else { n[i] };
        y = resize_axis(&y, a, want)?;
    }
    let prim_kind = match (kind, inverse) {
        (FftType::Complex, _) => FftKind::Complex,
        (FftType::Real, false) => FftKind::RealForward,
        (FftType::Real, true) => FftKind::RealInverse { n: n[n.len() - 1] },
    };
    let out = record(Primitive::Fft { axes: sorted, inverse, kind: prim_kind }, vec![y])?;
    let total: f64 = n.iter().map(|&v| v as f64).product();
    let factor = match (norm, inverse) {
        (FftNorm::Backward, _) => return Ok(out),
        (FftNorm::Ortho, false) => 1.0 / total.sqrt(),
        (FftNorm::Ortho, true) => total.sqrt(),
        (FftNorm::Forward, false) => 1.0 / total,
        (FftNorm::Forward, true) => total,
    };
    multiply(&out, &scalar(Scalar::Float(factor), out.dtype())?)
}

/// `x` truncated or zero-padded at the end of `axis` to `len` elements.
fn resize_axis(x: &Array, axis: usize, len: usize) -> Result<Array> {
    let d = x.shape()[axis];
    if d == len {
        return Ok(x.clone());
    }
    if d > len {
        let mut starts = vec![None; axis + 1];
        let mut stops = vec![None; axis + 1];
        starts[axis] = Some(0);
        stops[axis] = Some(len as i64);
        return slice(x, &starts, &stops, &vec![1; axis + 1]);
    }
    let mut shape = x.shape().to_vec();
    shape[axis] = len - d;
    concatenate(&[x.clone(), zeros(&shape, x.dtype())?], axis as i64)
}

/// The one-axis transform (`fft`, `ifft`, `rfft`, `irfft`).
pub fn fft1(
    x: &Array,
    n: Option<i64>,
    axis: i64,
    kind: FftType,
    inverse: bool,
    norm: FftNorm,
) -> Result<Array> {
    let s = n.map(|n| [n]);
    fftn(x, s.as_ref().map(|s| s.as_slice()), Some(&[axis]), kind, inverse, norm)
}

/// Sample frequencies of an `n`-point transform with spacing `d` (float32):
/// `[0, 1, ..., (n - 1) / 2, -(n / 2), ..., -1] / (d n)`.
pub fn fftfreq(n: i64, d: f64) -> Result<Array> {
    ensure!(n > 0, Value, "fftfreq", "`n` must be greater than 0.");
    let scale = 1.0 / (d * n as f64);
    let values: Vec<f32> = (0..n)
        .map(|i| if i < (n + 1) / 2 { i } else { i - n })
        .map(|k| (k as f64 * scale) as f32)
        .collect();
    Array::from_slice(&values, &[n as usize])
}

/// The non-negative frequencies of an `n`-point real transform: `[0, ..., n / 2] / (d n)`.
pub fn rfftfreq(n: i64, d: f64) -> Result<Array> {
    ensure!(n > 0, Value, "rfftfreq", "`n` must be greater than 0.");
    let scale = 1.0 / (d * n as f64);
    let values: Vec<f32> = (0..=n / 2).map(|k| (k as f64 * scale) as f32).collect();
    Array::from_slice(&values, &[values.len()])
}

/// Moves the zero frequency to the centre: a roll by `n / 2` on each axis (all by default);
/// `inverse` undoes it (`ifftshift`, a roll by `-(n / 2)`).
pub fn fftshift(x: &Array, axes: Option<&[i64]>, inverse: bool) -> Result<Array> {
    let op = if inverse { "ifftshift" } else { "fftshift" };
    let axes: Vec<i64> = match axes {
        Some(a) => a.to_vec(),
        None => (0..x.ndim() as i64).collect(),
    };
    if axes.is_empty() {
        return Ok(x.clone());
    }
    let mut shifts = Vec::with_capacity(axes.len());
    for &a in &axes {
        let ax = x.ndim() as i64;
        ensure!(
            a >= -ax && a < ax,
            Index,
            op,
            "Invalid axis {a} for array with {} dimensions.",
            x.ndim()
        );
        let d = x.shape()[a.rem_euclid(ax) as usize] as i64;
        shifts.push(if inverse { -(d / 2) } else { d / 2 });
    }
    roll(x, &shifts, Some(&axes))
}
