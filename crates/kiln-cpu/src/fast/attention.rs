//! Scaled dot-product attention, streaming (flash-attention style): for each (batch, head,
//! block of queries) task, keys and values are visited a block at a time; the block's scores
//! `S = (scale q) kᵀ` come from one faer product, the running row maxima, sums and output
//! rows are rescaled when the maximum grows (online softmax), and `P v` is added by a second
//! product. The full (Lq, Lk) score matrix never exists; memory per task is a few blocks.
//!
//! Hidden scores (causal or a false boolean mask) become the lowest finite value, so a row
//! with every key hidden averages all values as MLX's kernels do; key blocks entirely hidden
//! by the causal mask are skipped when every query of the block sees at least one key.
//! Grouped-query attention maps query head `h` to key/value head `h / (Hq / Hk)`.

use super::{dense_as, elements, Real};
use crate::simd;
use crate::strided::output;
use faer::{MatMut, MatRef, Par};
use kiln_base::{ArrayData, AttentionMask, Result};
use rayon::prelude::*;

const BLOCK_Q: usize = 64;
const BLOCK_K: usize = 256;
/// Partial maxima and sums per row: independent lanes let the loops vectorise.
const LANES: usize = 16;

/// A broadcastable 4-d mask read in place through its strides (0 on broadcast axes).
struct Mask<'a, M> {
    data: &'a [M],
    offset: usize,
    strides: [isize; 4],
}

impl<M: Copy> Mask<'_, M> {
    #[inline(always)]
    fn row(&self, b: usize, h: usize, i: usize) -> (usize, isize) {
        let s = &self.strides;
        let at = self.offset as isize + b as isize * s[0] + h as isize * s[1] + i as isize * s[2];
        (at as usize, s[3])
    }
}

fn mask_of<M: bytemuck::Pod>(m: &ArrayData) -> Mask<'_, M> {
    let mut strides = [0isize; 4];
    for (ax, st) in strides.iter_mut().enumerate() {
        if m.layout.shape[ax] > 1 {
            *st = m.layout.strides[ax];
        }
    }
    Mask { data: m.buffer.host_slice::<M>(), offset: m.layout.offset, strides }
}

pub(crate) fn attention<C: Real>(
    inputs: &[ArrayData],
    mask: AttentionMask,
    scale: f64,
    shape: &[usize],
) -> Result<ArrayData> {
    let (q, k, v) = (&inputs[0], &inputs[1], &inputs[2]);
    let [b_n, hq, lq, dk] = [0, 1, 2, 3].map(|a| q.layout.shape[a]);
    let (hk, lk, dv) = (k.layout.shape[1], k.layout.shape[2], v.layout.shape[3]);
    let group = hq / hk.max(1);
    let (qd, kd, vd) = (dense_as(q, C::DTYPE)?, dense_as(k, C::DTYPE)?, dense_as(v, C::DTYPE)?);
    let (qs, ks, vs) = (elements::<C>(&qd), elements::<C>(&kd), elements::<C>(&vd));
    // The additive mask in the compute type (its own size: broadcast axes stay size 1).
    let add_data = match mask {
        AttentionMask::Additive => Some(dense_as(&inputs[3], C::DTYPE)?),
        _ => None,
    };
    let add = add_data.as_ref().map(mask_of::<C>);
    let boolean = (mask == AttentionMask::Boolean).then(|| mask_of::<u8>(&inputs[3]));
    let causal = mask == AttentionMask::Causal;
    let scale = C::of(scale);
    output::<C>("scaled_dot_product_attention", shape, |out| {
        if out.is_empty() || lk == 0 {
            return Ok(()); // no keys: zeros, as MLX
        }
        let q_blocks = lq.div_ceil(BLOCK_Q);
        // Tasks: (batch, head, block of queries); each owns its output rows.
        let heads = b_n * hq;
        let mut blocks: Vec<(usize, usize, &mut [C])> = Vec::with_capacity(heads * q_blocks);
        for (bh, head_out) in out.chunks_mut(lq * dv).enumerate() {
            for (qb, o) in head_out.chunks_mut(BLOCK_Q * dv).enumerate() {
                blocks.push((bh, qb, o));
            }
        }
        blocks.into_par_iter().for_each(|(bh, qb, o)| {
            let (b, h) = (bh / hq, bh % hq);
            let kvh = b * hk + h / group;
            let i0 = qb * BLOCK_Q;
            let rows = o.len() / dv;
            let qrows = &qs[(bh * lq + i0) * dk..][..rows * dk];
            let kh = &ks[kvh * lk * dk..][..lk * dk];
            let vh = &vs[kvh * lk * dv..][..lk * dv];
            let ctx = Ctx {
                b,
                h,
                i0,
                lq,
                lk,
                dk,
                dv,
                causal,
                add: add.as_ref(),
                boolean: boolean.as_ref(),
            };
            block::<C>(&ctx, qrows, kh, vh, scale, o);
        });
        Ok(())
    })
}

struct Ctx<'a, C> {
    b: usize,
    h: usize,
    i0: usize,
    lq: usize,
    lk: usize,
    dk: usize,
    dv: usize,
    causal: bool,
    add: Option<&'a Mask<'a, C>>,
    boolean: Option<&'a Mask<'a, u8>>,
}

/// One block of query rows against every key block.
fn block<C: Real>(c: &Ctx<'_, C>, q: &[C], k: &[C], v: &[C], scale: C, o: &mut [C]) {
    let (dk, dv, lk) = (c.dk, c.dv, c.lk);
    let rows = q.len() / dk;
    let qs: Vec<C> = q.iter().map(|&x| x * scale).collect();
    let mut s = vec![C::ZERO; rows * BLOCK_K];
    let mut m = vec![C::NEG_INF; rows];
    let mut l = vec![C::ZERO; rows];
    o.fill(C::ZERO);
    // Causal: query i sees keys j <= i + lk - lq. Skipping later blocks is exact only when
    // every query of this block sees some key (else its row must average all keys).
    let shift = lk as isize - c.lq as isize;
    let first_sees = c.i0 as isize + shift >= 0;
    let key_end = if c.causal && first_sees {
        ((c.i0 + rows - 1) as isize + shift + 1).clamp(0, lk as isize) as usize
    } else {
        lk
    };
    let mut j0 = 0;
    while j0 < key_end {
        let kb = BLOCK_K.min(key_end - j0);
        let sb = &mut s[..rows * kb];
        C::gemm(
            MatMut::from_row_major_slice_mut(sb, rows, kb),
            MatRef::from_row_major_slice(&qs, rows, dk),
            MatRef::from_row_major_slice(&k[j0 * dk..][..kb * dk], kb, dk).transpose(),
            Par::Seq,
        );
        simd::run(
            #[inline(always)]
            || {
                for (r, srow) in sb.chunks_exact_mut(kb).enumerate() {
                    let i = c.i0 + r;
                    if let Some(add) = c.add {
                        let (at, st) = add.row(c.b, c.h, i);
                        for (jj, x) in srow.iter_mut().enumerate() {
                            *x = *x + add.data[(at as isize + (j0 + jj) as isize * st) as usize];
                        }
                    }
                    if let Some(bm) = c.boolean {
                        let (at, st) = bm.row(c.b, c.h, i);
                        for (jj, x) in srow.iter_mut().enumerate() {
                            if bm.data[(at as isize + (j0 + jj) as isize * st) as usize] == 0 {
                                *x = C::LOWEST;
                            }
                        }
                    }
                    if c.causal {
                        let last = i as isize + shift; // last visible key
                        for (jj, x) in srow.iter_mut().enumerate() {
                            if (j0 + jj) as isize > last {
                                *x = C::LOWEST;
                            }
                        }
                    }
                    // Online softmax update of row r (lane-wise, so the loops vectorise).
                    let mx = row_max(srow, m[r]);
                    let corr = if mx == m[r] { C::ONE } else { (m[r] - mx).exp() };
                    let sum = exp_sum(srow, mx);
                    l[r] = l[r] * corr + sum;
                    m[r] = mx;
                    if corr != C::ONE {
                        for y in o[r * dv..][..dv].iter_mut() {
                            *y = *y * corr;
                        }
                    }
                }
            },
        );
        C::gemm_add(
            MatMut::from_row_major_slice_mut(o, rows, dv),
            MatRef::from_row_major_slice(sb, rows, kb),
            MatRef::from_row_major_slice(&v[j0 * dv..][..kb * dv], kb, dv),
        );
        j0 += kb;
    }
    for (orow, &lr) in o.chunks_exact_mut(dv).zip(&l) {
        let inv = C::ONE / lr;
        orow.iter_mut().for_each(|y| *y = *y * inv);
    }
}

/// NaN-propagating maximum, as a select that vectorises.
#[inline(always)]
fn max_nan<C: Real>(a: C, v: C) -> C {
    if v > a || v.is_nan() {
        v
    } else {
        a
    }
}

/// The maximum of `init` and the row.
#[inline(always)]
fn row_max<C: Real>(x: &[C], init: C) -> C {
    let mut lanes = [init; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in chunks.by_ref() {
        for (m, &v) in lanes.iter_mut().zip(c) {
            *m = max_nan(*m, v);
        }
    }
    let m = lanes.into_iter().fold(init, max_nan);
    chunks.remainder().iter().fold(m, |a, &v| max_nan(a, v))
}

/// Replaces the row by `exp(x - mx)` and returns its sum.
#[inline(always)]
fn exp_sum<C: Real>(x: &mut [C], mx: C) -> C {
    let mut sums = [C::ZERO; LANES];
    let mut chunks = x.chunks_exact_mut(LANES);
    for c in chunks.by_ref() {
        for (s, v) in sums.iter_mut().zip(c.iter_mut()) {
            *v = (*v - mx).exp();
            *s = *s + *v;
        }
    }
    let mut tail = C::ZERO;
    for v in chunks.into_remainder() {
        *v = (*v - mx).exp();
        tail = tail + *v;
    }
    sums.iter().fold(C::ZERO, |a, &b| a + b) + tail
}
