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
//!
//! bfloat16 inputs on AMD CPUs with AVX512-BF16 take `attention_bf16`: the same streaming
//! loop (`block_bf16`) with both products on bfloat16 dot products (`tile_bf16.rs`).

#[cfg(target_arch = "x86_64")]
use super::tile_bf16;
use super::{dense_as, elements, tile, Real};
use crate::simd;
use crate::strided::output;
use kiln_base::{ArrayData, AttentionMask, DType, Result};
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
    let (dk, lk, dv) = (q.layout.shape[3], k.layout.shape[2], v.layout.shape[3]);
    let (qd, kd, vd) = (dense_as(q, C::DTYPE)?, dense_as(k, C::DTYPE)?, dense_as(v, C::DTYPE)?);
    let (qs, ks, vs) = (elements::<C>(&qd), elements::<C>(&kd), elements::<C>(&vd));
    let scale = C::of(scale);
    for_each_block::<C>(inputs, mask, shape, |c, bh, kvh, o| {
        let rows = o.len() / dv;
        let qrows = &qs[(bh * c.lq + c.i0) * dk..][..rows * dk];
        let kh = &ks[kvh * lk * dk..][..lk * dk];
        let vh = &vs[kvh * lk * dv..][..lk * dv];
        block::<C>(c, qrows, kh, vh, scale, o);
    })
}

/// Whether `attention_bf16` runs these inputs: bfloat16 q, k and v on a CPU with bfloat16
/// dot products.
#[cfg(target_arch = "x86_64")]
pub(crate) fn bf16_products(inputs: &[ArrayData]) -> bool {
    // Empty axes (no keys, head dims of 0) take the float32 kernel: nothing to pack.
    let nonempty =
        [inputs[0].layout.shape[3], inputs[1].layout.shape[2], inputs[2].layout.shape[3]]
            .iter()
            .all(|&n| n > 0);
    inputs[..3].iter().all(|x| x.dtype == DType::BF16) && nonempty && tile_bf16::available()
}

/// Attention of bfloat16 inputs on bfloat16 dot products (`tile_bf16.rs`), in float32 otherwise
/// (scores, softmax, sums, output). Keys and values are packed as pairs once per call.
#[cfg(target_arch = "x86_64")]
pub(crate) fn attention_bf16(
    inputs: &[ArrayData],
    mask: AttentionMask,
    scale: f64,
    shape: &[usize],
) -> Result<ArrayData> {
    let (q, k, v) = (&inputs[0], &inputs[1], &inputs[2]);
    let (dk, lk, dv) = (q.layout.shape[3], k.layout.shape[2], v.layout.shape[3]);
    let (qd, kd, vd) =
        (dense_as(q, DType::BF16)?, dense_as(k, DType::BF16)?, dense_as(v, DType::BF16)?);
    let qs = elements::<u16>(&qd);
    let (dkp, ldo) = (dk.div_ceil(2), dv.next_multiple_of(tile_bf16::LANES));
    let kp = pack_keys(elements::<u16>(&kd), dk);
    let vp = pack_values(elements::<u16>(&vd), lk, dv, ldo);
    let kv_pairs = lk.div_ceil(2);
    let scale = scale as f32;
    for_each_block::<f32>(inputs, mask, shape, |c, bh, kvh, o| {
        let rows = o.len() / dv;
        let qrows = &qs[(bh * c.lq + c.i0) * dk..][..rows * dk];
        let kh = &kp[kvh * lk * dkp..][..lk * dkp];
        let vh = &vp[kvh * kv_pairs * ldo..][..kv_pairs * ldo];
        // SAFETY: `bf16_products` (the caller's check) found every feature it is compiled for.
        unsafe { block_bf16(c, qrows, kh, vh, scale, o) };
    })
}

/// Rows of `dk` bfloat16 values as rows of `dk / 2` pairs (the last padded with zero).
#[cfg(target_arch = "x86_64")]
fn pack_keys(k: &[u16], dk: usize) -> Vec<u32> {
    let dkp = dk.div_ceil(2);
    let mut kp = vec![0u32; k.len() / dk.max(1) * dkp];
    kp.par_chunks_mut(dkp * 256).zip(k.par_chunks(dk * 256)).for_each(|(out, rows)| {
        for (o, row) in out.chunks_exact_mut(dkp).zip(rows.chunks_exact(dk)) {
            for (dp, y) in o.iter_mut().enumerate() {
                *y = tile_bf16::pair(row[2 * dp], row.get(2 * dp + 1).copied().unwrap_or(0));
            }
        }
    });
    kp
}

/// Each head's `(lk, dv)` values as `lk / 2` rows of `ldo` pairs of consecutive keys (a
/// missing last key and the padding columns are zero).
#[cfg(target_arch = "x86_64")]
fn pack_values(v: &[u16], lk: usize, dv: usize, ldo: usize) -> Vec<u32> {
    let pairs = lk.div_ceil(2);
    let heads = v.len() / (lk * dv).max(1);
    let mut vp = vec![0u32; heads * pairs * ldo];
    vp.par_chunks_mut(pairs * ldo).zip(v.par_chunks(lk * dv)).for_each(|(out, head)| {
        for (jp, o) in out.chunks_exact_mut(ldo).enumerate() {
            let lo = &head[2 * jp * dv..][..dv];
            let hi = head.get((2 * jp + 1) * dv..(2 * jp + 2) * dv);
            for (c, y) in o[..dv].iter_mut().enumerate() {
                *y = tile_bf16::pair(lo[c], hi.map_or(0, |h| h[c]));
            }
        }
    });
    vp
}

/// Splits the output into (batch, head, block of queries) tasks, each owning its output
/// rows, and runs `f(ctx, batch * Hq + head, kv head, rows)` on each in parallel.
fn for_each_block<C: Real>(
    inputs: &[ArrayData],
    mask: AttentionMask,
    shape: &[usize],
    f: impl Fn(&Ctx<'_, C>, usize, usize, &mut [C]) + Sync,
) -> Result<ArrayData> {
    let (q, k, v) = (&inputs[0], &inputs[1], &inputs[2]);
    let [b_n, hq, lq, dk] = [0, 1, 2, 3].map(|a| q.layout.shape[a]);
    let (hk, lk, dv) = (k.layout.shape[1], k.layout.shape[2], v.layout.shape[3]);
    let group = hq / hk.max(1);
    // The additive mask in the compute type (its own size: broadcast axes stay size 1).
    let add_data = match mask {
        AttentionMask::Additive => Some(dense_as(&inputs[3], C::DTYPE)?),
        _ => None,
    };
    let add = add_data.as_ref().map(mask_of::<C>);
    let boolean = (mask == AttentionMask::Boolean).then(|| mask_of::<u8>(&inputs[3]));
    let causal = mask == AttentionMask::Causal;
    output::<C>("scaled_dot_product_attention", shape, |out| {
        if out.is_empty() || lk == 0 {
            return Ok(()); // no keys: zeros, as MLX
        }
        let q_blocks = lq.div_ceil(BLOCK_Q);
        let heads = b_n * hq;
        let mut blocks: Vec<(usize, usize, &mut [C])> = Vec::with_capacity(heads * q_blocks);
        for (bh, head_out) in out.chunks_mut(lq * dv).enumerate() {
            for (qb, o) in head_out.chunks_mut(BLOCK_Q * dv).enumerate() {
                blocks.push((bh, qb, o));
            }
        }
        blocks.into_par_iter().for_each(|(bh, qb, o)| {
            let (b, h) = (bh / hq, bh % hq);
            let ctx = Ctx {
                b,
                h,
                i0: qb * BLOCK_Q,
                lq,
                lk,
                dk,
                dv,
                causal,
                add: add.as_ref(),
                boolean: boolean.as_ref(),
            };
            f(&ctx, bh, b * hk + h / group, o);
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

impl<C> Ctx<'_, C> {
    /// Causal attention: query `i` sees keys `j <= i + shift`.
    fn shift(&self) -> isize {
        self.lk as isize - self.lq as isize
    }

    /// The keys a block of `rows` queries visits. Skipping causally hidden blocks is exact
    /// only when every query of the block sees some key (else its row averages all keys).
    fn key_end(&self, rows: usize) -> usize {
        let first_sees = self.i0 as isize + self.shift() >= 0;
        if self.causal && first_sees {
            ((self.i0 + rows - 1) as isize + self.shift() + 1).clamp(0, self.lk as isize) as usize
        } else {
            self.lk
        }
    }
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
    let (dk, dv) = (c.dk, c.dv);
    let rows = o.len() / dv;
    // Query columns of the transposed tiles, padded with zero queries to whole tiles.
    let ld = rows.next_multiple_of(SNC);
    let mut qt = vec![C::ZERO; dk * ld];
    for (r, qrow) in q.chunks_exact(dk.max(1)).enumerate() {
        for (d, &x) in qrow.iter().enumerate() {
            qt[d * ld + r] = x * scale;
        }
    }
    let mut st = vec![C::ZERO; BLOCK_K * ld];
    let mut online = Online::new(ld);
    o.fill(C::ZERO);
    let key_end = c.key_end(rows);
    let mut j0 = 0;
    while j0 < key_end {
        let kb = BLOCK_K.min(key_end - j0);
        let sb = &mut st[..kb * ld];
        tile::scores::<C, SMR, SNC>(sb, &k[j0 * dk..][..kb * dk], &qt, kb, dk, ld);
        apply_mask(c, sb, j0, kb, rows, ld);
        online.step(sb, ld);
        online.rescale(o, dv);
        tile::accumulate::<C, OMR, ONC>(o, sb, &v[j0 * dv..][..kb * dv], rows, kb, dv, ld);
        j0 += kb;
    }
    online.finish(o, dv);
}

/// `block_tiled` on bfloat16 products: the output accumulates in `ldo`-wide float32 rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,avx512bf16")]
fn block_bf16(c: &Ctx<'_, f32>, q: &[u16], kp: &[u32], vp: &[u32], scale: f32, out: &mut [f32]) {
    use crate::halfmap::bf16_bits;
    use tile_bf16::pair;
    let (dk, dv) = (c.dk, c.dv);
    let (dkp, ldo) = (dk.div_ceil(2), dv.next_multiple_of(tile_bf16::LANES));
    let rows = q.len() / dk;
    let ld = rows.next_multiple_of(tile_bf16::QUERY_TILE);
    let mut qp = vec![0u32; dkp * ld];
    for (r, qrow) in q.chunks_exact(dk).enumerate() {
        for dp in 0..dkp {
            qp[dp * ld + r] = pair(qrow[2 * dp], qrow.get(2 * dp + 1).copied().unwrap_or(0));
        }
    }
    let mut st = vec![0f32; BLOCK_K * ld];
    let mut pp = vec![0u32; BLOCK_K / 2 * ld];
    let mut o = vec![0f32; rows * ldo];
    let mut online = Online::new(ld);
    let key_end = c.key_end(rows);
    let mut j0 = 0; // a multiple of BLOCK_K: key pairs start at even keys
    while j0 < key_end {
        let kb = BLOCK_K.min(key_end - j0);
        let sb = &mut st[..kb * ld];
        tile_bf16::scores(sb, &kp[j0 * dkp..][..kb * dkp], &qp, kb, dkp, ld, scale);
        apply_mask(c, sb, j0, kb, rows, ld);
        online.step(sb, ld);
        online.rescale(&mut o, ldo);
        let pairs = kb / 2;
        for (jp, prow) in pp[..pairs * ld].chunks_exact_mut(ld).enumerate() {
            let (lo, hi) = (&sb[2 * jp * ld..][..ld], &sb[(2 * jp + 1) * ld..][..ld]);
            for ((y, &a), &b) in prow.iter_mut().zip(lo).zip(hi) {
                *y = pair(bf16_bits(a), bf16_bits(b));
            }
        }
        let vb = &vp[j0 / 2 * ldo..];
        tile_bf16::accumulate(&mut o, &pp[..pairs * ld], vb, rows, pairs, ldo, ld);
        if kb % 2 == 1 {
            // The block's last key alone (the other half of its pair is outside the block).
            let (p, vrow) = (&sb[(kb - 1) * ld..][..rows], &vb[pairs * ldo..][..dv]);
            for (orow, &pr) in o.chunks_exact_mut(ldo).zip(p) {
                for (y, &x) in orow.iter_mut().zip(vrow) {
                    *y = pr.mul_add(f32::from_bits(x << 16), *y);
                }
            }
        }
        j0 += kb;
    }
    online.finish(&mut o, ldo);
    for (dst, src) in out.chunks_exact_mut(dv).zip(o.chunks_exact(ldo)) {
        dst.copy_from_slice(&src[..dv]);
    }
}

/// The online softmax's state for the `ld` queries of a block (vectorised over queries: the
/// columns of the transposed scores).
struct Online<C> {
    m: Vec<C>,    // running maxima
    l: Vec<C>,    // running sums
    corr: Vec<C>, // each output row's rescale in the last step
    bmax: Vec<C>,
    base: Vec<C>,
    sum: Vec<C>,
}

impl<C: Real> Online<C> {
    fn new(ld: usize) -> Self {
        let zeros = || vec![C::ZERO; ld];
        Online {
            m: vec![C::NEG_INF; ld],
            l: zeros(),
            corr: zeros(),
            bmax: zeros(),
            base: zeros(),
            sum: zeros(),
        }
    }

    /// Replaces a key block's scores `sb` (one row per key) by `exp(s - max)` against the
    /// new running maxima, and updates the sums.
    #[inline(always)]
    fn step(&mut self, sb: &mut [C], ld: usize) {
        let Online { m, l, corr, bmax, base, sum } = self;
        bmax.copy_from_slice(m);
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
            for ((x, s), &b) in srow.iter_mut().zip(sum.iter_mut()).zip(base.iter()) {
                *x = (*x - b).exp();
                *s = *s + *x;
            }
        }
        for r in 0..ld {
            l[r] = l[r] * corr[r] + sum[r];
        }
        m.copy_from_slice(bmax);
    }

    /// Rescales the output rows (`ldo` apart) to the new maxima.
    #[inline(always)]
    fn rescale(&self, o: &mut [C], ldo: usize) {
        for (orow, &cr) in o.chunks_exact_mut(ldo).zip(&self.corr) {
            if cr != C::ONE {
                orow.iter_mut().for_each(|y| *y = *y * cr);
            }
        }
    }

    /// Divides the output rows by their sums.
    #[inline(always)]
    fn finish(&self, o: &mut [C], ldo: usize) {
        for (orow, &lr) in o.chunks_exact_mut(ldo).zip(&self.l) {
            let inv = C::ONE / lr;
            orow.iter_mut().for_each(|y| *y = *y * inv);
        }
    }
}

/// Adds the mask to the block's transposed scores `sb` (keys `j0..j0 + kb`, `rows` queries):
/// additive values, and the lowest finite value where a boolean mask or causality hides a key.
#[inline(always)]
fn apply_mask<C: Real>(c: &Ctx<'_, C>, sb: &mut [C], j0: usize, kb: usize, rows: usize, ld: usize) {
    let shift = c.shift();
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
