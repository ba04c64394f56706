//! Scaled dot-product attention, streaming (flash-attention style): for each (batch, head,
//! block of queries) task, keys and values are visited a block at a time; the block's scores
//! `S = (scale q) kᵀ` come from a register-tiled product (`tile.rs`, kept transposed so the
//! softmax runs vectorised over queries), the running row maxima, sums and output rows are
//! rescaled when the maximum grows (online softmax), and `P v` is added by a second tiled
//! product. The full (Lq, Lk) score matrix never exists; memory per task is a few blocks.
//!
//! Hidden scores (causal or a false boolean mask) become the lowest finite value, so a row
//! with every key hidden averages all values as MLX's kernels do; key blocks entirely hidden
//! by the causal mask are skipped when every query of the block sees at least one key.
//! Grouped-query attention maps query head `h` to key/value head `h / (Hq / Hk)`.

use super::{dense_as, elements, tile, Real};
use crate::simd;
use crate::strided::output;
use kiln_base::{ArrayData, AttentionMask, Result};
use rayon::prelude::*;

const BLOCK_Q: usize = 64;
const BLOCK_K: usize = 256;

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

/// One block of query rows against every key block, with tile sizes for the SIMD level.
fn block<C: Real>(c: &Ctx<'_, C>, q: &[C], k: &[C], v: &[C], scale: C, o: &mut [C]) {
    // Tiles: (score keys, score queries, output rows, output columns); accumulators
    // `MR * NC` elements fill about half of the vector registers.
    let wide = std::mem::size_of::<C>() == 4;
    match simd::level() {
        simd::Level::Avx512 if wide => simd::run(
            #[inline(always)]
            || block_tiled::<C, 6, 32, 4, 64>(c, q, k, v, scale, o),
        ),
        simd::Level::Avx512 => simd::run(
            #[inline(always)]
            || block_tiled::<C, 6, 16, 4, 32>(c, q, k, v, scale, o),
        ),
        simd::Level::Avx2 if wide => simd::run(
            #[inline(always)]
            || block_tiled::<C, 3, 32, 3, 32>(c, q, k, v, scale, o),
        ),
        simd::Level::Avx2 => simd::run(
            #[inline(always)]
            || block_tiled::<C, 3, 16, 3, 16>(c, q, k, v, scale, o),
        ),
        simd::Level::Base => block_tiled::<C, 2, 8, 2, 8>(c, q, k, v, scale, o),
    }
}

#[inline(always)]
fn block_tiled<C: Real, const SMR: usize, const SNC: usize, const OMR: usize, const ONC: usize>(
    c: &Ctx<'_, C>,
    q: &[C],
    k: &[C],
    v: &[C],
    scale: C,
    o: &mut [C],
) {
    let (dk, dv, lk) = (c.dk, c.dv, c.lk);
    let rows = q.len() / dk;
    // Query columns of the transposed tiles, padded with zero queries to whole tiles.
    let ld = rows.next_multiple_of(SNC);
    let mut qt = vec![C::ZERO; dk * ld];
    for (r, qrow) in q.chunks_exact(dk).enumerate() {
        for (d, &x) in qrow.iter().enumerate() {
            qt[d * ld + r] = x * scale;
        }
    }
    let mut st = vec![C::ZERO; BLOCK_K * ld];
    let mut m = vec![C::NEG_INF; ld]; // running maxima
    let mut l = vec![C::ZERO; ld]; // running sums
    let (mut bmax, mut base, mut corr, mut sum) =
        (vec![C::ZERO; ld], vec![C::ZERO; ld], vec![C::ZERO; ld], vec![C::ZERO; ld]);
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
        let sb = &mut st[..kb * ld];
        tile::scores::<C, SMR, SNC>(sb, &k[j0 * dk..][..kb * dk], &qt, kb, dk, ld);
        apply_mask(c, sb, j0, kb, rows, ld, shift);
        // Online softmax, vectorised over the queries (the columns of sᵀ).
        bmax.copy_from_slice(&m);
        for srow in sb.chunks_exact(ld) {
            for (b, &x) in bmax.iter_mut().zip(srow) {
                *b = max_nan(*b, x);
            }
        }
        for r in 0..ld {
            corr[r] = if bmax[r] == m[r] { C::ONE } else { (m[r] - bmax[r]).exp() };
            // Every score so far -inf (an additive mask): exp(-inf - 0) = 0, not NaN.
            base[r] = if bmax[r] == C::NEG_INF { C::ZERO } else { bmax[r] };
        }
        sum.fill(C::ZERO);
        for srow in sb.chunks_exact_mut(ld) {
            for ((x, s), &b) in srow.iter_mut().zip(sum.iter_mut()).zip(&base) {
                *x = (*x - b).exp();
                *s = *s + *x;
            }
        }
        for r in 0..ld {
            l[r] = l[r] * corr[r] + sum[r];
        }
        m.copy_from_slice(&bmax);
        for (orow, &cr) in o.chunks_exact_mut(dv).zip(&corr) {
            if cr != C::ONE {
                orow.iter_mut().for_each(|y| *y = *y * cr);
            }
        }
        tile::accumulate::<C, OMR, ONC>(o, sb, &v[j0 * dv..][..kb * dv], rows, kb, dv, ld);
        j0 += kb;
    }
    for (orow, &lr) in o.chunks_exact_mut(dv).zip(&l) {
        let inv = C::ONE / lr;
        orow.iter_mut().for_each(|y| *y = *y * inv);
    }
}

/// Adds the mask to the block's transposed scores `sb` (keys `j0..j0 + kb`, `rows` queries):
/// additive values, and the lowest finite value where a boolean mask or causality hides a key.
#[inline(always)]
fn apply_mask<C: Real>(
    c: &Ctx<'_, C>,
    sb: &mut [C],
    j0: usize,
    kb: usize,
    rows: usize,
    ld: usize,
    shift: isize,
) {
    for r in 0..rows {
        let i = c.i0 + r;
        if let Some(add) = c.add {
            let (at, st) = add.row(c.b, c.h, i);
            for jj in 0..kb {
                let x = &mut sb[jj * ld + r];
                *x = *x + add.data[(at as isize + (j0 + jj) as isize * st) as usize];
            }
        }
        if let Some(bm) = c.boolean {
            let (at, st) = bm.row(c.b, c.h, i);
            for jj in 0..kb {
                if bm.data[(at as isize + (j0 + jj) as isize * st) as usize] == 0 {
                    sb[jj * ld + r] = C::LOWEST;
                }
            }
        }
        if c.causal {
            // Keys after `i + shift` are hidden.
            let first_hidden = (i as isize + shift + 1 - j0 as isize).clamp(0, kb as isize);
            for jj in first_hidden as usize..kb {
                sb[jj * ld + r] = C::LOWEST;
            }
        }
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
