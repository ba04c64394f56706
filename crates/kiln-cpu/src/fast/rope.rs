//! Rotary positional encoding over the last axis of `(B, ..., T, D)`. Angles depend only on
//! the position `offset[b] + t` and the pair index, so a cos/sin table per distinct offset
//! (computed in float64, stored in the compute type) serves every head; rows then rotate
//! their first `dims` features in pairs (halves, or adjacent pairs when `traditional`) and
//! copy the rest.

use super::{dense_as, elements, Real};
use crate::simd;
use crate::strided::output_full;
use crate::walk::PARALLEL_ELEMENTS;
use kiln_base::{ArrayData, DType, Result};
use rayon::prelude::*;

pub(crate) struct Params {
    pub dims: usize,
    pub traditional: bool,
    pub base: f64,
    pub scale: f64,
    pub inverse: bool,
}

pub(crate) fn rope<C: Real>(
    x: &ArrayData,
    offset: &ArrayData,
    freqs: Option<&ArrayData>,
    p: &Params,
    shape: &[usize],
) -> Result<ArrayData> {
    let nd = shape.len();
    let (t_len, d) = (shape[nd - 2], shape[nd - 1]);
    let half = p.dims / 2;
    let od = dense_as(offset, DType::I64)?;
    let offsets = elements::<i64>(&od);
    // Inverse frequencies: 1 / freqs, or base^(-2i / dims).
    let inv: Vec<f64> = match freqs {
        Some(f) => {
            let fd = dense_as(f, DType::F64)?;
            elements::<f64>(&fd).iter().map(|&f| 1.0 / f).collect()
        }
        None => (0..half).map(|i| (-(i as f64) * p.base.ln() / half as f64).exp()).collect(),
    };
    let sign = if p.inverse { -1.0 } else { 1.0 };
    // tables[k]: (cos, sin) for offsets[k], laid out (T, half). Rows of the table are built
    // in parallel: a float64 sin_cos per entry cost as much as the rotation itself.
    let tables: Vec<(Vec<C>, Vec<C>)> = offsets
        .iter()
        .map(|&off| {
            let (mut cos, mut sin) = (vec![C::ZERO; t_len * half], vec![C::ZERO; t_len * half]);
            let rows = cos.par_chunks_mut(half.max(1)).zip(sin.par_chunks_mut(half.max(1)));
            rows.enumerate().with_min_len(16).for_each(|(t, (cos, sin))| {
                let pos = (off as f64 + t as f64) * p.scale;
                for ((c, s), &f) in cos.iter_mut().zip(sin.iter_mut()).zip(&inv) {
                    let (sn, cs) = (pos * f).sin_cos();
                    *c = C::of(cs);
                    *s = C::of(sign * sn);
                }
            });
            (cos, sin)
        })
        .collect();
    let xd = dense_as(x, C::DTYPE)?;
    let xs = elements::<C>(&xd);
    let per_b = shape[1..].iter().product::<usize>() / d.max(1);
    output_full::<C>("rope", shape, |out| {
        if out.is_empty() || d == 0 {
            return Ok(());
        }
        let rows_per_task = (PARALLEL_ELEMENTS / d).max(1);
        out.par_chunks_mut(d * rows_per_task).enumerate().for_each(|(task, o)| {
            simd::run(
                #[inline(always)]
                || {
                    for (i, orow) in o.chunks_exact_mut(d).enumerate() {
                        let r = task * rows_per_task + i;
                        let (b, t) = (r / per_b, r % t_len);
                        let (cos, sin) = &tables[if tables.len() == 1 { 0 } else { b }];
                        let (cos, sin) = (&cos[t * half..][..half], &sin[t * half..][..half]);
                        let xr = &xs[r * d..][..d];
                        rotate(xr, orow, cos, sin, half, p.traditional);
                    }
                },
            )
        });
        Ok(())
    })
}

#[inline(always)]
fn rotate<C: Real>(x: &[C], o: &mut [C], cos: &[C], sin: &[C], half: usize, traditional: bool) {
    let dims = 2 * half;
    if traditional {
        for (((o, x), &c), &s) in
            o[..dims].chunks_exact_mut(2).zip(x.chunks_exact(2)).zip(cos).zip(sin)
        {
            o[0] = x[0] * c - x[1] * s;
            o[1] = x[0] * s + x[1] * c;
        }
    } else {
        let (o1, rest) = o.split_at_mut(half);
        let (x1, x2) = (&x[..half], &x[half..dims]);
        for ((((o, &a), &b), &c), &s) in o1.iter_mut().zip(x1).zip(x2).zip(cos).zip(sin) {
            *o = a * c - b * s;
        }
        for ((((o, &a), &b), &c), &s) in rest[..half].iter_mut().zip(x1).zip(x2).zip(cos).zip(sin) {
            *o = a * s + b * c;
        }
    }
    o[dims..].copy_from_slice(&x[dims..]);
}
