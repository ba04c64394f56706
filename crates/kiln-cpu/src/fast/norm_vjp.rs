//! The fused backward of layer_norm and rms_norm: per row, the statistics of `x` again (no
//! saved state), then `dx = r (gw - xhat mean(gw xhat) - mean(gw))` (rms_norm: without the
//! `mean(gw)` term) with `gw = g * weight`, while the row is in cache; `dweight = sum(g xhat)`
//! and `dbias = sum(g)` over rows. Rows are split over threads in fixed chunks, each chunk
//! summing its own partial `dweight`/`dbias`, and the partials are added in chunk order, so
//! the result does not depend on the thread count. Half floats are widened a row at a time
//! and every result is rounded once.

use super::{dense_as, elements, Real};
use crate::element::Element;
use crate::halfmap::Half;
use crate::simd;
use crate::strided::output_full;
use crate::walk::PARALLEL_ELEMENTS;
use half::{bf16, f16};
use kiln_base::{bail, ArrayData, DType, Result};
use rayon::prelude::*;

/// Which norm (layer_norm centres the row; rms_norm does not).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Layer,
    Rms,
}

/// A storage type read and written through the compute type `C`.
trait Io<C>: Element {
    fn widen(src: &[Self], dst: &mut [C]);
    fn narrow(src: &[C], dst: &mut [Self]);
}

macro_rules! same_io {
    ($t:ty) => {
        impl Io<$t> for $t {
            #[inline(always)]
            fn widen(src: &[Self], dst: &mut [$t]) {
                dst.copy_from_slice(src);
            }
            #[inline(always)]
            fn narrow(src: &[$t], dst: &mut [Self]) {
                dst.copy_from_slice(src);
            }
        }
    };
}
same_io!(f32);
same_io!(f64);

macro_rules! half_io {
    ($t:ty) => {
        impl Io<f32> for $t {
            #[inline(always)]
            fn widen(src: &[Self], dst: &mut [f32]) {
                <$t as Half>::widen(src, dst);
            }
            #[inline(always)]
            fn narrow(src: &[f32], dst: &mut [Self]) {
                <$t as Half>::narrow(src, dst);
            }
        }
    };
}
half_io!(f16);
half_io!(bf16);

const LANES: usize = 16;

/// `sum(f(a, b))` over two rows with partial lanes (so it vectorises).
#[inline(always)]
fn lane_sum2<C: Real>(a: &[C], b: &[C], f: impl Fn(C, C) -> C) -> C {
    let mut acc = [C::ZERO; LANES];
    let mut ca = a.chunks_exact(LANES);
    let mut cb = b.chunks_exact(LANES);
    for (x, y) in ca.by_ref().zip(cb.by_ref()) {
        for ((s, &u), &v) in acc.iter_mut().zip(x).zip(y) {
            *s = *s + f(u, v);
        }
    }
    let tail = ca.remainder().iter().zip(cb.remainder()).fold(C::ZERO, |s, (&u, &v)| s + f(u, v));
    acc.iter().fold(C::ZERO, |s, &t| s + t) + tail
}

/// One row: writes `dx` and adds the row's `g xhat` and `g` into `dw` and `db` (when kept).
/// `gw` is scratch of the row's length.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn row<C: Real>(
    kind: Kind,
    eps: C,
    x: &[C],
    g: &[C],
    w: Option<&[C]>,
    gw: &mut [C],
    dx: &mut [C],
    dw: Option<&mut [C]>,
    db: Option<&mut [C]>,
) {
    let n = C::of(x.len() as f64);
    let mean = match kind {
        Kind::Layer => lane_sum2(x, x, |v, _| v) / n,
        Kind::Rms => C::ZERO,
    };
    let var = lane_sum2(x, x, |v, _| (v - mean) * (v - mean)) / n;
    let r = C::ONE / (var + eps).sqrt();
    match w {
        Some(w) => {
            for ((o, &a), &b) in gw.iter_mut().zip(g).zip(w) {
                *o = a * b;
            }
        }
        None => gw.copy_from_slice(g),
    }
    // mean(gw xhat) = r mean(gw (x - mean)).
    let proj = r * lane_sum2(gw, x, |a, v| a * (v - mean)) / n;
    let shift = match kind {
        Kind::Layer => lane_sum2(gw, gw, |a, _| a) / n,
        Kind::Rms => C::ZERO,
    };
    for ((o, &a), &v) in dx.iter_mut().zip(&*gw).zip(x) {
        let xhat = (v - mean) * r;
        *o = r * (a - xhat * proj - shift);
    }
    if let Some(dw) = dw {
        for ((s, &a), &v) in dw.iter_mut().zip(g).zip(x) {
            *s = *s + a * ((v - mean) * r);
        }
    }
    if let Some(db) = db {
        for (s, &a) in db.iter_mut().zip(g) {
            *s = *s + a;
        }
    }
}

/// The backward for storage `T` computed in `C`: `dx`, then `dweight` and `dbias` when asked.
#[allow(clippy::too_many_arguments)]
fn run<T: Io<C>, C: Real>(
    op: &'static str,
    kind: Kind,
    x: &ArrayData,
    w: Option<&ArrayData>,
    g: &ArrayData,
    eps: f64,
    shape: &[usize],
    want_dw: bool,
    want_db: bool,
) -> Result<Vec<ArrayData>> {
    let d = shape.last().copied().unwrap_or(1);
    let (xd, gd) = (dense_as(x, T::DTYPE)?, dense_as(g, T::DTYPE)?);
    let (xs, gs) = (elements::<T>(&xd), elements::<T>(&gd));
    let wd = w.map(|w| dense_as(w, C::DTYPE)).transpose()?;
    let ws = wd.as_ref().map(elements::<C>);
    let eps = C::of(eps);
    let mut sums: Vec<C> = vec![C::ZERO; 2 * d];
    let dx = output_full::<T>(op, shape, |out| {
        if out.is_empty() || d == 0 {
            return Ok(());
        }
        let per_task = d * (PARALLEL_ELEMENTS / d).max(1);
        let partials: Vec<Vec<C>> = out
            .par_chunks_mut(per_task)
            .zip(xs.par_chunks(per_task).zip(gs.par_chunks(per_task)))
            .map(|(o, (xc, gc))| {
                // Row scratch: x, g, gw, dx in C, then this chunk's dweight and dbias sums.
                let mut buf = vec![C::ZERO; 6 * d];
                simd::run(
                    #[inline(always)]
                    || {
                        let (rows, acc) = buf.split_at_mut(4 * d);
                        let (xw, rest) = rows.split_at_mut(d);
                        let (gw_in, rest) = rest.split_at_mut(d);
                        let (gw, dxw) = rest.split_at_mut(d);
                        let (dw, db) = acc.split_at_mut(d);
                        for ((orow, xrow), grow) in
                            o.chunks_exact_mut(d).zip(xc.chunks_exact(d)).zip(gc.chunks_exact(d))
                        {
                            T::widen(xrow, xw);
                            T::widen(grow, gw_in);
                            row(
                                kind,
                                eps,
                                xw,
                                gw_in,
                                ws,
                                gw,
                                dxw,
                                want_dw.then_some(&mut *dw),
                                want_db.then_some(&mut *db),
                            );
                            T::narrow(dxw, orow);
                        }
                    },
                );
                buf.drain(..4 * d);
                buf
            })
            .collect();
        // Chunk order, whatever thread ran each chunk: deterministic sums.
        for p in &partials {
            for (s, &v) in sums.iter_mut().zip(p) {
                *s = *s + v;
            }
        }
        Ok(())
    })?;
    let mut outs = vec![dx];
    for (want, part) in [(want_dw, &sums[..d]), (want_db, &sums[d..])] {
        if want {
            outs.push(output_full::<T>(op, &[d], |o| {
                T::narrow(part, o);
                Ok(())
            })?);
        }
    }
    Ok(outs)
}

/// The fused backward of either norm over the last axis of `x` with cotangent `g`: `dx`
/// (x's dtype), then `dweight` when `w` is given and `dbias` when `want_db`.
pub(crate) fn norm_vjp(
    kind: Kind,
    x: &ArrayData,
    w: Option<&ArrayData>,
    g: &ArrayData,
    eps: f64,
    shape: &[usize],
    want_db: bool,
) -> Result<Vec<ArrayData>> {
    let op = match kind {
        Kind::Layer => "layer_norm_vjp",
        Kind::Rms => "rms_norm_vjp",
    };
    let want_dw = w.is_some();
    match x.dtype {
        DType::F32 => run::<f32, f32>(op, kind, x, w, g, eps, shape, want_dw, want_db),
        DType::F64 => run::<f64, f64>(op, kind, x, w, g, eps, shape, want_dw, want_db),
        DType::F16 => run::<f16, f32>(op, kind, x, w, g, eps, shape, want_dw, want_db),
        DType::BF16 => run::<bf16, f32>(op, kind, x, w, g, eps, shape, want_dw, want_db),
        d => bail!(Type, op, "Received unsupported type {d}."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_base::{Layout, HOST};

    fn data(v: &[f64], shape: &[usize], dtype: DType) -> ArrayData {
        let buffer = HOST.from_slice(v).unwrap();
        let a = ArrayData { buffer, layout: Layout::contiguous(shape), dtype: DType::F64 };
        crate::cast::astype(&a, shape, dtype).unwrap()
    }

    fn values(a: &ArrayData) -> Vec<f64> {
        let f = crate::cast::astype(a, &a.layout.shape.clone(), DType::F64).unwrap();
        let f = super::dense_as(&f, DType::F64).unwrap();
        elements::<f64>(&f).to_vec()
    }

    /// A scalar float64 reference of the backward.
    fn reference(
        kind: Kind,
        x: &[f64],
        w: Option<&[f64]>,
        g: &[f64],
        d: usize,
        eps: f64,
    ) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let mut dx = vec![0.0; x.len()];
        let (mut dw, mut db) = (vec![0.0; d], vec![0.0; d]);
        for ((xr, gr), o) in x.chunks(d).zip(g.chunks(d)).zip(dx.chunks_mut(d)) {
            let n = d as f64;
            let mean = if kind == Kind::Layer { xr.iter().sum::<f64>() / n } else { 0.0 };
            let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
            let r = 1.0 / (var + eps).sqrt();
            let xhat: Vec<f64> = xr.iter().map(|v| (v - mean) * r).collect();
            let gw: Vec<f64> = (0..d).map(|j| gr[j] * w.map_or(1.0, |w| w[j])).collect();
            let m1 = if kind == Kind::Layer { gw.iter().sum::<f64>() / n } else { 0.0 };
            let m2 = (0..d).map(|j| gw[j] * xhat[j]).sum::<f64>() / n;
            for j in 0..d {
                o[j] = r * (gw[j] - m1 - xhat[j] * m2);
                dw[j] += gr[j] * xhat[j];
                db[j] += gr[j];
            }
        }
        (dx, dw, db)
    }

    fn pseudo(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s % 2001) as f64 / 1000.0 - 1.0
            })
            .collect()
    }

    fn check(kind: Kind, shape: &[usize], dtype: DType, weight: bool, bias: bool) {
        let d = *shape.last().unwrap();
        let size: usize = shape.iter().product();
        let (xv, gv, wv) = (pseudo(size, 1), pseudo(size, 2), pseudo(d, 3));
        let x = data(&xv, shape, dtype);
        let g = data(&gv, shape, dtype);
        let w = weight.then(|| data(&wv, &[d], dtype));
        // The reference sees the values the kernel sees (rounded to the dtype).
        let (xr, gr, wr) = (values(&x), values(&g), w.as_ref().map(values));
        let eps = 1e-5;
        let outs = norm_vjp(kind, &x, w.as_ref(), &g, eps, shape, bias).unwrap();
        assert_eq!(outs.len(), 1 + weight as usize + bias as usize);
        let (dx, dw, db) = reference(kind, &xr, wr.as_deref(), &gr, d, eps);
        let tol = match dtype {
            DType::F64 => 1e-10,
            DType::F32 => 1e-4,
            _ => 3e-2,
        };
        let close = |got: &ArrayData, want: &[f64], what: &str| {
            assert_eq!(got.dtype, dtype);
            let got = values(got);
            assert_eq!(got.len(), want.len());
            for (i, (a, b)) in got.iter().zip(want).enumerate() {
                assert!(
                    (a - b).abs() <= tol * (1.0 + b.abs()),
                    "{kind:?} {shape:?} {dtype} {what}[{i}]: {a} vs {b}"
                );
            }
        };
        close(&outs[0], &dx, "dx");
        if weight {
            close(&outs[1], &dw, "dw");
        }
        if bias {
            close(&outs[1 + weight as usize], &db, "db");
        }
    }

    #[test]
    fn matches_the_scalar_reference() {
        for kind in [Kind::Layer, Kind::Rms] {
            for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
                for shape in [&[3, 1][..], &[2, 3, 7], &[5, 100], &[1, 33], &[70, 600]] {
                    for (weight, bias) in [(false, false), (true, false), (true, true)] {
                        let bias = bias && kind == Kind::Layer;
                        check(kind, shape, dtype, weight, bias);
                    }
                }
            }
        }
    }

    #[test]
    fn empty_rows_give_zero_weight_gradients() {
        let x = data(&[], &[0, 4], DType::F32);
        let w = data(&[1.0; 4], &[4], DType::F32);
        let outs = norm_vjp(Kind::Layer, &x, Some(&w), &x, 1e-5, &[0, 4], true).unwrap();
        assert_eq!(outs[0].layout.shape.as_slice(), &[0, 4]);
        assert_eq!(values(&outs[1]), vec![0.0; 4]);
        assert_eq!(values(&outs[2]), vec![0.0; 4]);
    }

    #[test]
    fn strided_inputs_are_read_in_place() {
        // x transposed: the kernel makes it dense first.
        let base = data(&pseudo(12, 5), &[4, 3], DType::F32);
        let mut xt = base.clone();
        xt.layout = Layout::new([3, 4].into_iter().collect(), [1, 3].into_iter().collect(), 0);
        let g = data(&pseudo(12, 6), &[3, 4], DType::F32);
        let got = norm_vjp(Kind::Rms, &xt, None, &g, 1e-6, &[3, 4], false).unwrap();
        let xv = values(&xt);
        let (want, _, _) = reference(Kind::Rms, &xv, None, &values(&g), 4, 1e-6);
        for (a, b) in values(&got[0]).iter().zip(&want) {
            assert!((a - b).abs() < 1e-5);
        }
    }

    #[test]
    fn partial_sums_do_not_depend_on_the_thread_count() {
        let shape = [300, 257];
        let x = data(&pseudo(300 * 257, 7), &shape, DType::F32);
        let g = data(&pseudo(300 * 257, 8), &shape, DType::F32);
        let w = data(&pseudo(257, 9), &[257], DType::F32);
        let a = norm_vjp(Kind::Layer, &x, Some(&w), &g, 1e-5, &shape, true).unwrap();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let b = pool.install(|| norm_vjp(Kind::Layer, &x, Some(&w), &g, 1e-5, &shape, true));
        let b = b.unwrap();
        for (p, q) in a.iter().zip(&b) {
            assert_eq!(values(p), values(q));
        }
    }
}
