//! Attention's two products on bfloat16 dot-product instructions (AVX512-BF16 `vdpbf16ps`:
//! each float32 lane adds the products of one pair of bfloat16 values, exactly, so a vector
//! instruction does twice the multiply-adds of a float32 FMA). Operands are packed as pairs
//! along the summed axis, one `u32` (low half first) per pair:
//! - `scores`: `sᵀ[j, r] = scale Σ_d k[j, d] q[r, d]`, with `kp[j][d / 2]` broadcast against
//!   `qp[d / 2][r]` (16 queries per vector);
//! - `accumulate`: `o[r, c] += Σ_j p[r, j] v[j, c]`, with `pp[j / 2][r]` (the probabilities
//!   rounded to bfloat16, as flash attention does on GPUs) broadcast against `vp[j / 2][c]`.
//!
//! Every function is compiled for the CPU features `FEATURES` names; the caller checks them
//! (`available`) once. Accumulators are fixed-size arrays of vectors, which LLVM keeps in
//! registers.

use std::arch::x86_64::*;

/// A bfloat16 pair as one `u32`, `lo` in the low half (the first of the pair).
#[inline(always)]
pub(super) fn pair(lo: u16, hi: u16) -> u32 {
    u32::from(lo) | (u32::from(hi) << 16)
}

/// Whether attention should take the bfloat16 products here: the CPU has them, `simd` runs at
/// its AVX-512 level, and they are faster than widening to float32.
pub(super) fn available() -> bool {
    supported() && twice_the_fma_rate()
}

/// Whether this CPU has the bfloat16 dot-product instructions (and `simd` runs at AVX-512).
fn supported() -> bool {
    crate::simd::level() == crate::simd::Level::Avx512
        && std::is_x86_feature_detected!("avx512bf16")
}

/// AMD cores run `vdpbf16ps` at twice the multiply-adds per cycle of a float32 FMA (two Zen 5
/// cores: 991 against 541 GFLOP/s, `bench/cpu_peak.c`). Intel Xeons run it at the FMA's rate,
/// where packing pairs makes attention slower than widening (the H200 host's Xeon: 1.6 to 2x
/// slower in `bench/fast_cpu.py`).
fn twice_the_fma_rate() -> bool {
    let id = __cpuid(0);
    // "AuthenticAMD", as the vendor string's three registers.
    (id.ebx, id.edx, id.ecx) == (0x6874_7541, 0x6974_6e65, 0x444d_4163)
}

pub(super) use x86::*;

mod x86 {
    use super::super::tile::KEYS_PER_PASS;
    use super::*;

    /// Query columns per score vector, value columns per output vector.
    pub(in super::super) const LANES: usize = 16;
    /// Score tile: keys by vectors of queries (12 accumulators).
    const SMR: usize = 6;
    const SNV: usize = 2;
    /// Queries per score-tile column group: `ld` is a multiple of it.
    pub(in super::super) const QUERY_TILE: usize = SNV * LANES;
    /// Output tile: rows by vectors of value columns (16 accumulators).
    const OMR: usize = 4;
    const ONV: usize = 4;

    #[target_feature(enable = "avx512f,avx512bf16")]
    #[inline]
    fn load_f32(s: &[f32]) -> __m512 {
        let s: &[f32; LANES] = s[..LANES].try_into().unwrap();
        // SAFETY: `s` holds 16 floats (checked above); the load is unaligned.
        unsafe { _mm512_loadu_ps(s.as_ptr()) }
    }

    #[target_feature(enable = "avx512f,avx512bf16")]
    #[inline]
    fn store_f32(s: &mut [f32], x: __m512) {
        let s: &mut [f32; LANES] = (&mut s[..LANES]).try_into().unwrap();
        // SAFETY: `s` holds 16 floats (checked above); the store is unaligned.
        unsafe { _mm512_storeu_ps(s.as_mut_ptr(), x) }
    }

    #[target_feature(enable = "avx512f,avx512bf16")]
    #[inline]
    fn load_pairs(s: &[u32]) -> __m512bh {
        let s: &[u32; LANES] = s[..LANES].try_into().unwrap();
        // SAFETY: `s` holds 16 u32 (checked above); the load is unaligned.
        let x = unsafe { _mm512_loadu_si512(s.as_ptr().cast()) };
        // SAFETY: both are 512 bits of plain data.
        unsafe { std::mem::transmute::<__m512i, __m512bh>(x) }
    }

    #[target_feature(enable = "avx512f,avx512bf16")]
    #[inline]
    fn splat_pair(p: u32) -> __m512bh {
        // SAFETY: both are 512 bits of plain data.
        unsafe { std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(p as i32)) }
    }

    /// `st[j * ld + r] = scale Σ_dp kp[j * dkp + dp] · qp[dp * ld + r]` for `j < kb`,
    /// `r < ld` (a multiple of `QUERY_TILE`).
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,avx512bf16")]
    #[allow(clippy::too_many_arguments)]
    pub(in super::super) fn scores(
        st: &mut [f32],
        kp: &[u32],
        qp: &[u32],
        kb: usize,
        dkp: usize,
        ld: usize,
        scale: f32,
    ) {
        for r0 in (0..ld).step_by(QUERY_TILE) {
            let mut j = 0;
            while j + SMR <= kb {
                score_tile::<SMR>(st, kp, qp, j, r0, dkp, ld, scale);
                j += SMR;
            }
            while j < kb {
                score_tile::<1>(st, kp, qp, j, r0, dkp, ld, scale);
                j += 1;
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,avx512bf16")]
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn score_tile<const MR: usize>(
        st: &mut [f32],
        kp: &[u32],
        qp: &[u32],
        j: usize,
        r0: usize,
        dkp: usize,
        ld: usize,
        scale: f32,
    ) {
        let mut acc = [[_mm512_setzero_ps(); SNV]; MR];
        let keys = &kp[j * dkp..][..MR * dkp];
        for dp in 0..dkp {
            let row = &qp[dp * ld + r0..][..QUERY_TILE];
            let q: [__m512bh; SNV] = std::array::from_fn(|c| load_pairs(&row[c * LANES..]));
            for (i, a) in acc.iter_mut().enumerate() {
                let k = splat_pair(keys[i * dkp + dp]);
                for (y, &qc) in a.iter_mut().zip(&q) {
                    *y = _mm512_dpbf16_ps(*y, k, qc);
                }
            }
        }
        let s = _mm512_set1_ps(scale);
        for (i, a) in acc.iter().enumerate() {
            let out = &mut st[(j + i) * ld + r0..][..QUERY_TILE];
            for (c, &y) in a.iter().enumerate() {
                store_f32(&mut out[c * LANES..], _mm512_mul_ps(y, s));
            }
        }
    }

    /// `o[r * ldo + c] += Σ_jp pp[jp * ld + r] · vp[jp * ldo + c]` for `r < rows`,
    /// `c < ldo` (a multiple of `LANES`), `jp < pairs`.
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,avx512bf16")]
    pub(in super::super) fn accumulate(
        o: &mut [f32],
        pp: &[u32],
        vp: &[u32],
        rows: usize,
        pairs: usize,
        ldo: usize,
        ld: usize,
    ) {
        let mut c0 = 0;
        while c0 + ONV * LANES <= ldo {
            // A few keys at a time over all rows: their values stay in the L1 cache (head
            // dim 128: 340 to 430 GFLOP/s on a Zen 5 core).
            let per_pass = KEYS_PER_PASS / 2;
            for j0 in (0..pairs).step_by(per_pass) {
                let n = per_pass.min(pairs - j0);
                let (p, v) = (&pp[j0 * ld..], &vp[j0 * ldo..]);
                accumulate_cols::<ONV>(o, p, v, rows, n, ldo, ld, c0);
            }
            c0 += ONV * LANES;
        }
        while c0 < ldo {
            accumulate_cols::<1>(o, pp, vp, rows, pairs, ldo, ld, c0);
            c0 += LANES;
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,avx512bf16")]
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn accumulate_cols<const NV: usize>(
        o: &mut [f32],
        pp: &[u32],
        vp: &[u32],
        rows: usize,
        pairs: usize,
        ldo: usize,
        ld: usize,
        c0: usize,
    ) {
        let mut r = 0;
        while r + OMR <= rows {
            accumulate_tile::<OMR, NV>(o, pp, vp, r, pairs, ldo, ld, c0);
            r += OMR;
        }
        while r < rows {
            accumulate_tile::<1, NV>(o, pp, vp, r, pairs, ldo, ld, c0);
            r += 1;
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,avx512bf16")]
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn accumulate_tile<const MR: usize, const NV: usize>(
        o: &mut [f32],
        pp: &[u32],
        vp: &[u32],
        r: usize,
        pairs: usize,
        ldo: usize,
        ld: usize,
        c0: usize,
    ) {
        let mut acc = [[_mm512_setzero_ps(); NV]; MR];
        for (i, a) in acc.iter_mut().enumerate() {
            let orow = &o[(r + i) * ldo + c0..][..NV * LANES];
            for (c, y) in a.iter_mut().enumerate() {
                *y = load_f32(&orow[c * LANES..]);
            }
        }
        for jp in 0..pairs {
            let vrow = &vp[jp * ldo + c0..][..NV * LANES];
            let v: [__m512bh; NV] = std::array::from_fn(|c| load_pairs(&vrow[c * LANES..]));
            let p = &pp[jp * ld + r..][..MR];
            for (a, &pr) in acc.iter_mut().zip(p) {
                let pr = splat_pair(pr);
                for (y, &vc) in a.iter_mut().zip(&v) {
                    *y = _mm512_dpbf16_ps(*y, pr, vc);
                }
            }
        }
        for (i, a) in acc.iter().enumerate() {
            let orow = &mut o[(r + i) * ldo + c0..][..NV * LANES];
            for (c, &y) in a.iter().enumerate() {
                store_f32(&mut orow[c * LANES..], y);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_put_the_first_value_low() {
        assert_eq!(pair(1, 2), 0x0002_0001);
    }

    #[test]
    fn products_match_float32() {
        if !supported() {
            return;
        }
        let bf = |x: f32| half::bf16::from_f32(x).to_bits();
        let val = |b: u16| f32::from_bits(u32::from(b) << 16);
        let (kb, dk, rows) = (13usize, 7usize, 40usize);
        let (dkp, ld) = (dk.div_ceil(2), rows.next_multiple_of(QUERY_TILE));
        let gen = |i: usize| bf(((i * 37 % 101) as f32 - 50.0) / 16.0);
        let k: Vec<u16> = (0..kb * dk).map(gen).collect();
        let q: Vec<u16> = (0..rows * dk).map(|i| gen(i + 7)).collect();
        let at = |x: &[u16], row: usize, d: usize| if d < dk { x[row * dk + d] } else { 0 };
        let kp: Vec<u32> = (0..kb * dkp)
            .map(|i| pair(at(&k, i / dkp, 2 * (i % dkp)), at(&k, i / dkp, 2 * (i % dkp) + 1)))
            .collect();
        let mut qp = vec![0u32; dkp * ld];
        for r in 0..rows {
            for dp in 0..dkp {
                qp[dp * ld + r] = pair(at(&q, r, 2 * dp), at(&q, r, 2 * dp + 1));
            }
        }
        let mut st = vec![0f32; kb * ld];
        // SAFETY: `supported` checked the CPU's features.
        unsafe { scores(&mut st, &kp, &qp, kb, dkp, ld, 0.5) };
        for j in 0..kb {
            for r in 0..rows {
                let want: f64 =
                    (0..dk).map(|d| val(k[j * dk + d]) as f64 * val(q[r * dk + d]) as f64).sum();
                assert!((st[j * ld + r] as f64 - 0.5 * want).abs() < 1e-5, "{j} {r}");
            }
        }
        // o (rows x 32) += p (rows x kb, as pairs) v (kb x 32).
        let (ldo, pairs) = (32usize, kb.div_ceil(2));
        let v: Vec<u16> = (0..kb * ldo).map(|i| gen(i + 3)).collect();
        let p: Vec<u16> = (0..rows * kb).map(|i| gen(i + 11)).collect();
        let pv = |j: usize, r: usize| if j < kb { p[r * kb + j] } else { 0 };
        let vv = |j: usize, c: usize| if j < kb { v[j * ldo + c] } else { 0 };
        let mut pp = vec![0u32; pairs * ld];
        let mut vp = vec![0u32; pairs * ldo];
        for jp in 0..pairs {
            for r in 0..rows {
                pp[jp * ld + r] = pair(pv(2 * jp, r), pv(2 * jp + 1, r));
            }
            for c in 0..ldo {
                vp[jp * ldo + c] = pair(vv(2 * jp, c), vv(2 * jp + 1, c));
            }
        }
        let mut o = vec![1f32; rows * ldo];
        // SAFETY: as above.
        unsafe { accumulate(&mut o, &pp, &vp, rows, pairs, ldo, ld) };
        for r in 0..rows {
            for c in 0..ldo {
                let want: f64 =
                    1.0 + (0..kb).map(|j| val(pv(j, r)) as f64 * val(vv(j, c)) as f64).sum::<f64>();
                assert!((o[r * ldo + c] as f64 - want).abs() < 1e-4, "{r} {c}");
            }
        }
    }
}
