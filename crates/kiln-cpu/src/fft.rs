//! `Primitive::Fft` through rustfft: each axis is transformed in turn on a complex64 work
//! buffer (lines along the axis gathered into a contiguous batch, one planned transform over
//! the batch, scattered back). Real transforms go through the full complex transform: the
//! forward one keeps the `n / 2 + 1` non-negative frequencies of the last axis, the inverse
//! one rebuilds the Hermitian-symmetric spectrum first and keeps the real part.

use crate::complex::C64;
use crate::strided::{dense, output};
use kiln_base::shape::size_of;
use kiln_base::{ArrayData, FftKind, Primitive, Result};
use num_complex::Complex32;
use rustfft::{FftDirection, FftPlanner};

pub(crate) fn fft(
    axes: &[usize],
    inverse: bool,
    kind: FftKind,
    x: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    let name = Primitive::Fft { axes: axes.to_vec(), inverse, kind }.name();
    let mut planner = FftPlanner::<f32>::new();
    let in_shape = x.layout.shape.as_slice();
    let Some((&last, rest)) = axes.split_last() else {
        return output::<C64>(name, shape, |_| Ok(()));
    };
    match kind {
        FftKind::Complex => {
            let mut work: Vec<Complex32> = dense::<C64>(x).iter().map(|z| z.0).collect();
            for &axis in axes {
                transform_axis(&mut planner, &mut work, in_shape, axis, inverse);
            }
            output::<C64>(name, shape, |out| {
                out.iter_mut().zip(&work).for_each(|(o, &z)| *o = C64(z));
                Ok(())
            })
        }
        FftKind::RealForward => {
            let mut work: Vec<Complex32> =
                dense::<f32>(x).iter().map(|&v| Complex32::new(v, 0.0)).collect();
            // The halved axis first, then the others on the half spectrum only.
            transform_axis(&mut planner, &mut work, in_shape, last, false);
            let keep = shape[last];
            let (n, inner) = (in_shape[last], size_of(&in_shape[last + 1..]));
            let mut half = Vec::with_capacity(size_of(shape));
            // (An empty input has no lines: `chunks` needs a nonzero size.)
            if n * inner > 0 {
                for w in work.chunks(n * inner) {
                    half.extend_from_slice(&w[..keep * inner]);
                }
            }
            for &axis in rest {
                transform_axis(&mut planner, &mut half, shape, axis, false);
            }
            output::<C64>(name, shape, |out| {
                out.iter_mut().zip(&half).for_each(|(o, &z)| *o = C64(z));
                Ok(())
            })
        }
        FftKind::RealInverse { n } => {
            let mut half: Vec<Complex32> = dense::<C64>(x).iter().map(|z| z.0).collect();
            for &axis in rest {
                transform_axis(&mut planner, &mut half, in_shape, axis, true);
            }
            let m = in_shape[last];
            let (outer, inner) = (size_of(&in_shape[..last]), size_of(&in_shape[last + 1..]));
            let mut work = vec![Complex32::new(0.0, 0.0); outer * n * inner];
            for o in 0..outer {
                for k in 0..n {
                    for i in 0..inner {
                        // X[k] for k < m, else conj(X[n - k]) (n - k < m always).
                        let z = if k < m {
                            half[(o * m + k) * inner + i]
                        } else {
                            half[(o * m + n - k) * inner + i].conj()
                        };
                        work[(o * n + k) * inner + i] = z;
                    }
                }
            }
            transform_axis(&mut planner, &mut work, shape, last, true);
            output::<f32>(name, shape, |out| {
                out.iter_mut().zip(&work).for_each(|(o, z)| *o = z.re);
                Ok(())
            })
        }
    }
}

/// Transforms every line along `axis` of the row-major `data` of `shape` in place; the
/// inverse is scaled by `1 / n` (numpy's "backward" normalisation).
fn transform_axis(
    planner: &mut FftPlanner<f32>,
    data: &mut [Complex32],
    shape: &[usize],
    axis: usize,
    inverse: bool,
) {
    let n = shape[axis];
    if n <= 1 && !inverse || data.is_empty() || n == 0 {
        return;
    }
    let dir = if inverse { FftDirection::Inverse } else { FftDirection::Forward };
    let plan = planner.plan_fft(n, dir);
    let inner = size_of(&shape[axis + 1..]);
    let scale = 1.0 / n as f32;
    if inner == 1 {
        plan.process(data);
    } else {
        // Gather the strided lines into one contiguous batch and back.
        let outer = data.len() / (n * inner);
        let mut batch = vec![Complex32::new(0.0, 0.0); data.len()];
        for o in 0..outer {
            for i in 0..inner {
                let line = &mut batch[(o * inner + i) * n..(o * inner + i + 1) * n];
                for (k, v) in line.iter_mut().enumerate() {
                    *v = data[(o * n + k) * inner + i];
                }
            }
        }
        plan.process(&mut batch);
        for o in 0..outer {
            for i in 0..inner {
                let line = &batch[(o * inner + i) * n..(o * inner + i + 1) * n];
                for (k, &v) in line.iter().enumerate() {
                    data[(o * n + k) * inner + i] = v;
                }
            }
        }
    }
    if inverse {
        data.iter_mut().for_each(|z| *z *= scale);
    }
}
