//! Register-tiled products of the attention kernel. Scores are kept transposed (`sᵀ`, one
//! row per key, one column per query), so both products are broadcast-FMA loops over
//! contiguous vectors, with no horizontal sums and no packing:
//! - `scores`: `sᵀ[j, r] = Σ_d k[j, d] qᵀ[d, r]`: an `MR x NC` tile of accumulators, each step
//!   broadcasts `MR` key values against `NC` contiguous queries of `qᵀ`;
//! - `accumulate`: `o[r, c] += Σ_j sᵀ[j, r] v[j, c]`: `MR` output rows by `NC` value columns,
//!   each step broadcasts `MR` probabilities against `NC` contiguous values of `v`.
//!
//! The tiles are fixed-size arrays, so under `simd::run` LLVM keeps them in vector registers;
//! the caller picks `MR`/`NC` per SIMD level so they fit the register file.

use super::Real;

/// `st[j * ld + r] = Σ_d k[j * dk + d] * qt[d * ld + r]` for `j < kb`, `r < ld`; `ld` is a
/// multiple of `NC`.
#[inline(always)]
pub(super) fn scores<C: Real, const MR: usize, const NC: usize>(
    st: &mut [C],
    k: &[C],
    qt: &[C],
    kb: usize,
    dk: usize,
    ld: usize,
) {
    for r0 in (0..ld).step_by(NC) {
        let mut j = 0;
        while j + MR <= kb {
            score_tile::<C, MR, NC>(st, k, qt, j, r0, dk, ld);
            j += MR;
        }
        while j < kb {
            score_tile::<C, 1, NC>(st, k, qt, j, r0, dk, ld);
            j += 1;
        }
    }
}

// Index loops on purpose: this form is the one LLVM keeps in registers.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn score_tile<C: Real, const MR: usize, const NC: usize>(
    st: &mut [C],
    k: &[C],
    qt: &[C],
    j: usize,
    r0: usize,
    dk: usize,
    ld: usize,
) {
    let mut acc = [[C::ZERO; NC]; MR];
    let keys = &k[j * dk..][..MR * dk];
    let mut x = [C::ZERO; MR];
    for d in 0..dk {
        // `unwrap`, not `expect`: with a message LLVM stopped keeping the tile in registers
        // (measured, 15x slower). The slice has NC elements, so it cannot fail.
        let q: &[C; NC] = qt[d * ld + r0..][..NC].try_into().unwrap();
        for i in 0..MR {
            x[i] = keys[i * dk + d];
        }
        for i in 0..MR {
            let xi = x[i];
            let a = &mut acc[i];
            for c in 0..NC {
                a[c] = xi.mul_add(q[c], a[c]);
            }
        }
    }
    for (i, a) in acc.iter().enumerate() {
        st[(j + i) * ld + r0..][..NC].copy_from_slice(a);
    }
}

/// Keys whose values `accumulate` visits per pass over the output rows (measured on a Zen 5
/// core: head dim 128 went from 184 to 240 GFLOP/s, 64 from 245 to 258).
pub(super) const KEYS_PER_PASS: usize = 64;

/// `o[r * dv + c] += Σ_j pt[j * ld + r] * v[j * dv + c]` for `r < rows`, `c < dv`, `j < kb`.
#[inline(always)]
pub(super) fn accumulate<C: Real, const MR: usize, const NC: usize>(
    o: &mut [C],
    pt: &[C],
    v: &[C],
    rows: usize,
    kb: usize,
    dv: usize,
    ld: usize,
) {
    let mut c0 = 0;
    while c0 + NC <= dv {
        // A few keys at a time over all rows: their values stay in the L1 cache.
        for j0 in (0..kb).step_by(KEYS_PER_PASS) {
            let n = KEYS_PER_PASS.min(kb - j0);
            let (p, vj) = (&pt[j0 * ld..], &v[j0 * dv..]);
            accumulate_cols::<C, MR, NC>(o, p, vj, rows, n, dv, ld, c0);
        }
        c0 += NC;
    }
    // Narrower value rows (or a remainder): 8 columns at a time, then one by one.
    while c0 + 8 <= dv {
        accumulate_cols::<C, MR, 8>(o, pt, v, rows, kb, dv, ld, c0);
        c0 += 8;
    }
    if c0 < dv {
        for r in 0..rows {
            for j in 0..kb {
                let p = pt[j * ld + r];
                let (orow, vrow) = (&mut o[r * dv..][c0..dv], &v[j * dv..][c0..dv]);
                for (y, &x) in orow.iter_mut().zip(vrow) {
                    *y = p.mul_add(x, *y);
                }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn accumulate_cols<C: Real, const MR: usize, const NC: usize>(
    o: &mut [C],
    pt: &[C],
    v: &[C],
    rows: usize,
    kb: usize,
    dv: usize,
    ld: usize,
    c0: usize,
) {
    let mut r = 0;
    while r + MR <= rows {
        accumulate_tile::<C, MR, NC>(o, pt, v, r, kb, dv, ld, c0);
        r += MR;
    }
    while r < rows {
        accumulate_tile::<C, 1, NC>(o, pt, v, r, kb, dv, ld, c0);
        r += 1;
    }
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn accumulate_tile<C: Real, const MR: usize, const NC: usize>(
    o: &mut [C],
    pt: &[C],
    v: &[C],
    r: usize,
    kb: usize,
    dv: usize,
    ld: usize,
    c0: usize,
) {
    let mut acc = [[C::ZERO; NC]; MR];
    for (i, a) in acc.iter_mut().enumerate() {
        a.copy_from_slice(&o[(r + i) * dv + c0..][..NC]);
    }
    for j in 0..kb {
        let vrow = &v[j * dv + c0..][..NC];
        let p = &pt[j * ld + r..][..MR];
        for (a, &pv) in acc.iter_mut().zip(p) {
            for (y, &x) in a.iter_mut().zip(vrow) {
                *y = pv.mul_add(x, *y);
            }
        }
    }
    for (i, a) in acc.iter().enumerate() {
        o[(r + i) * dv + c0..][..NC].copy_from_slice(a);
    }
}
