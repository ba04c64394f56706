//! Attention's training forward (`o` and the row logsumexp) and its fused backward on the
//! CPU: the reference semantics of the GPU's flash kernels (kiln-cuda `fast/attention_bwd.rs`),
//! written plainly in float64 (one task per (batch, kv head), a row of scores at a time). The
//! GPU runs these primitives in training; the CPU runs them only when a graph recorded on the
//! GPU is replayed here, or under the testing switch of kiln-core's `record_fast`.
//!
//! Masks are `None` or causal (lower-right aligned: query `i` sees key `j` when
//! `j <= i + Lk - Lq`). A row that sees no key averages every value, as the forward does, and
//! its `lse` is `log(Lk)` (its scores taken as equal), so `exp(s - lse)` stays exact there;
//! no gradient reaches q or k through hidden scores.

use super::{dense_as, elements};
use crate::strided::output;
use kiln_base::{ArrayData, AttentionMask, DType, Result, Shape};
use rayon::prelude::*;

struct Dims {
    b: usize,
    hq: usize,
    hk: usize,
    lq: usize,
    lk: usize,
    d: usize,
    dv: usize,
    group: usize,
    causal: bool,
}

impl Dims {
    fn of(q: &ArrayData, k: &ArrayData, v: &ArrayData, mask: AttentionMask) -> Dims {
        let [b, hq, lq, d] = [0, 1, 2, 3].map(|a| q.layout.shape[a]);
        let (hk, lk, dv) = (k.layout.shape[1], k.layout.shape[2], v.layout.shape[3]);
        let group = hq / hk.max(1);
        Dims { b, hq, hk, lq, lk, d, dv, group, causal: mask == AttentionMask::Causal }
    }

    /// Whether query `i` sees key `j`.
    fn visible(&self, i: usize, j: usize) -> bool {
        !self.causal || j as i64 <= i as i64 + self.lk as i64 - self.lq as i64
    }

    /// Whether query `i` sees no key (every score hidden): it averages every value.
    fn blind(&self, i: usize) -> bool {
        self.causal && (i as i64 + self.lk as i64 - self.lq as i64) < 0
    }

    /// Query `i`'s weights of every key, given its scaled scores (hidden ones ignored) and
    /// logsumexp.
    fn weights(&self, i: usize, s: &[f64], lse: f64, p: &mut [f64]) {
        for (j, pj) in p.iter_mut().enumerate() {
            *pj = if self.blind(i) {
                (-lse).exp()
            } else if self.visible(i, j) {
                (s[j] - lse).exp()
            } else {
                0.0
            };
        }
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn f64s(x: &ArrayData) -> Result<ArrayData> {
    dense_as(x, DType::F64)
}

fn finish(op: &'static str, data: Vec<f64>, shape: &[usize], dtype: DType) -> Result<ArrayData> {
    let out = output::<f64>(op, shape, |o| {
        o.copy_from_slice(&data);
        Ok(())
    })?;
    super::finish(out, dtype)
}

/// `(o, lse)` of `FastOp::AttentionTrain`.
pub(crate) fn forward(
    inputs: &[ArrayData],
    mask: AttentionMask,
    scale: f64,
    outputs: &[(Shape, DType)],
) -> Result<Vec<ArrayData>> {
    let op = "scaled_dot_product_attention";
    let (qd, kd, vd) = (f64s(&inputs[0])?, f64s(&inputs[1])?, f64s(&inputs[2])?);
    let (q, k, v) = (elements::<f64>(&qd), elements::<f64>(&kd), elements::<f64>(&vd));
    let n = Dims::of(&inputs[0], &inputs[1], &inputs[2], mask);
    let mut o = vec![0.0f64; n.b * n.hq * n.lq * n.dv];
    let mut lse = vec![f64::NEG_INFINITY; n.b * n.hq * n.lq];
    if n.lq > 0 && n.dv > 0 {
        o.par_chunks_mut(n.lq * n.dv).zip(lse.par_chunks_mut(n.lq)).enumerate().for_each(
            |(bh, (o, lse))| {
                let (b, h) = (bh / n.hq, bh % n.hq);
                let kvh = b * n.hk + h / n.group;
                let kh = &k[kvh * n.lk * n.d..][..n.lk * n.d];
                let vh = &v[kvh * n.lk * n.dv..][..n.lk * n.dv];
                let mut s = vec![0.0f64; n.lk];
                let mut p = vec![0.0f64; n.lk];
                for i in 0..n.lq {
                    if n.lk == 0 {
                        continue; // no keys: zeros, lse -inf
                    }
                    let qi = &q[(bh * n.lq + i) * n.d..][..n.d];
                    let mut m = f64::NEG_INFINITY;
                    for (j, sj) in s.iter_mut().enumerate() {
                        *sj = if n.blind(i) { 0.0 } else { dot(qi, &kh[j * n.d..][..n.d]) * scale };
                        if n.blind(i) || n.visible(i, j) {
                            m = m.max(*sj);
                        }
                    }
                    let mut l = 0.0;
                    for (j, &sj) in s.iter().enumerate() {
                        if n.blind(i) || n.visible(i, j) {
                            l += (sj - m).exp();
                        }
                    }
                    lse[i] = m + l.ln();
                    n.weights(i, &s, lse[i], &mut p);
                    let oi = &mut o[i * n.dv..][..n.dv];
                    for (j, &pj) in p.iter().enumerate() {
                        if pj != 0.0 {
                            for (x, &y) in oi.iter_mut().zip(&vh[j * n.dv..][..n.dv]) {
                                *x += pj * y;
                            }
                        }
                    }
                }
            },
        );
    }
    Ok(vec![
        finish(op, o, &outputs[0].0, outputs[0].1)?,
        finish(op, lse, &outputs[1].0, DType::F32)?,
    ])
}

/// `(dq, dk, dv)` of `FastOp::AttentionVjp`: inputs q, k, v, o, lse, do.
pub(crate) fn backward(
    inputs: &[ArrayData],
    mask: AttentionMask,
    scale: f64,
    outputs: &[(Shape, DType)],
) -> Result<Vec<ArrayData>> {
    let op = "scaled_dot_product_attention_vjp";
    let x: Vec<ArrayData> = inputs.iter().map(f64s).collect::<Result<_>>()?;
    let [q, k, v, o, lse, g] = [0, 1, 2, 3, 4, 5].map(|i| elements::<f64>(&x[i]));
    let n = Dims::of(&inputs[0], &inputs[1], &inputs[2], mask);
    let mut dq = vec![0.0f64; n.b * n.hq * n.lq * n.d];
    let mut dk = vec![0.0f64; n.b * n.hk * n.lk * n.d];
    let mut dv = vec![0.0f64; n.b * n.hk * n.lk * n.dv];
    let tasks = n.b * n.hk;
    if tasks > 0 && n.lq > 0 && n.lk > 0 {
        // Task (b, kv head) owns its kv rows and the dq rows of its group's query heads.
        let dq_chunks = dq.par_chunks_mut((n.group * n.lq * n.d).max(1));
        let dk_chunks = dk.par_chunks_mut((n.lk * n.d).max(1));
        let dv_chunks = dv.par_chunks_mut((n.lk * n.dv).max(1));
        dq_chunks.zip(dk_chunks).zip(dv_chunks).enumerate().for_each(|(kvh, ((dq, dk), dv))| {
            let kh = &k[kvh * n.lk * n.d..][..n.lk * n.d];
            let vh = &v[kvh * n.lk * n.dv..][..n.lk * n.dv];
            let mut s = vec![0.0f64; n.lk];
            let mut p = vec![0.0f64; n.lk];
            for gi in 0..n.group {
                let bh = kvh * n.group + gi;
                for i in 0..n.lq {
                    let row = bh * n.lq + i;
                    let qi = &q[row * n.d..][..n.d];
                    let gi_row = &g[row * n.dv..][..n.dv];
                    let di = dot(gi_row, &o[row * n.dv..][..n.dv]);
                    for (j, sj) in s.iter_mut().enumerate() {
                        *sj = dot(qi, &kh[j * n.d..][..n.d]) * scale;
                    }
                    n.weights(i, &s, lse[row], &mut p);
                    let dqi = &mut dq[(gi * n.lq + i) * n.d..][..n.d];
                    for (j, &pj) in p.iter().enumerate() {
                        if pj == 0.0 {
                            continue;
                        }
                        let vj = &vh[j * n.dv..][..n.dv];
                        for (x, &y) in dv[j * n.dv..][..n.dv].iter_mut().zip(gi_row) {
                            *x += pj * y;
                        }
                        if n.blind(i) {
                            continue; // hidden scores pass no gradient
                        }
                        let ds = pj * (dot(gi_row, vj) - di) * scale;
                        let kj = &kh[j * n.d..][..n.d];
                        for (x, &y) in dqi.iter_mut().zip(kj) {
                            *x += ds * y;
                        }
                        for (x, &y) in dk[j * n.d..][..n.d].iter_mut().zip(qi) {
                            *x += ds * y;
                        }
                    }
                }
            }
        });
    }
    Ok(vec![
        finish(op, dq, &outputs[0].0, outputs[0].1)?,
        finish(op, dk, &outputs[1].0, outputs[1].1)?,
        finish(op, dv, &outputs[2].0, outputs[2].1)?,
    ])
}
