//! 4-bit planar units on AVX-512 by table: a group's 16 possible weights (`scale * q + bias`,
//! rounded as `dequantize` rounds them) sit in one register and `vpermps` looks each value's
//! weight up by its nibble, in place of converting, scaling and offsetting every value (about
//! 7 vector operations a unit of 32 values instead of 11). The lanes, their order and the
//! accumulators are the portable planar kernel's (`quantized.rs`), so the sums are the same
//! bits.

use super::quantized::UNIT;
use crate::simd::Level;
use std::arch::x86_64::*;

/// Whether this process takes the table kernel (the CPU has AVX-512 and kiln runs at it).
pub(super) fn available() -> bool {
    crate::simd::level() == Level::Avx512
}

/// 16 floats from `s[at..]`.
#[target_feature(enable = "avx512f")]
#[inline]
fn load(s: &[f32], at: usize) -> __m512 {
    let s: &[f32; 16] = s[at..at + 16].try_into().unwrap();
    // SAFETY: `s` holds 16 floats (checked above); the load is unaligned.
    unsafe { _mm512_loadu_ps(s.as_ptr()) }
}

/// The 16 bytes of unit `u` as 16 integers.
#[target_feature(enable = "avx512f")]
#[inline]
fn unit_bytes(bytes: &[u8], u: usize) -> __m512i {
    let b: &[u8; 16] = bytes[u * 16..u * 16 + 16].try_into().unwrap();
    // SAFETY: `b` holds 16 bytes (checked above); the load is unaligned.
    unsafe { _mm512_cvtepu8_epi32(_mm_loadu_si128(b.as_ptr().cast())) }
}

/// A group's 16 weights, `scale * q + bias` for q = 0..15 (a multiply, then an add).
#[target_feature(enable = "avx512f")]
#[inline]
fn table(scale: f32, bias: f32) -> __m512 {
    let iota = _mm512_setr_ps(
        0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0,
    );
    _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(scale), iota), _mm512_set1_ps(bias))
}

/// `acc[r] += w * x[r]` for unit `u`'s two planes (low nibbles, then high), weights looked
/// up in `table`.
#[target_feature(enable = "avx512f,fma")]
#[inline]
fn unit<const R: usize>(
    table: __m512,
    bytes: &[u8],
    u: usize,
    (x, k): (&[f32], usize),
    acc: &mut [[__m512; 2]; R],
) {
    let q = unit_bytes(bytes, u);
    // `vpermps` reads each lane's low 4 bits: the low nibble as it is, the high one shifted.
    let lo = _mm512_permutexvar_ps(q, table);
    let hi = _mm512_permutexvar_ps(_mm512_srli_epi32::<4>(q), table);
    for (r, a) in acc.iter_mut().enumerate() {
        let at = r * k + u * UNIT;
        a[0] = _mm512_fmadd_ps(lo, load(x, at), a[0]);
        a[1] = _mm512_fmadd_ps(hi, load(x, at + 16), a[1]);
    }
}

/// `R` rows of one feature's 4-bit units (`bytes`, `k / 2` of them) against x permuted into
/// the planes' order, each row's 32 lanes into `lanes[r]` for the caller's fixed-order sum.
/// One row takes the units two at a time into two accumulators, as the portable kernel.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
pub(super) fn rows<const R: usize>(
    (k, group_size): (usize, usize),
    (scales, biases): (&[f32], &[f32]),
    bytes: &[u8],
    x: &[f32],
    lanes: &mut [[f32; UNIT]; R],
) {
    let shift = (group_size / UNIT).trailing_zeros();
    let units = k / UNIT;
    let zero = _mm512_setzero_ps();
    let mut acc = [[zero; 2]; R];
    let mut u = 0;
    if R == 1 {
        let mut other = [[zero; 2]; R];
        while u + 1 < units {
            unit::<R>(table(scales[u >> shift], biases[u >> shift]), bytes, u, (x, k), &mut acc);
            unit::<R>(
                table(scales[(u + 1) >> shift], biases[(u + 1) >> shift]),
                bytes,
                u + 1,
                (x, k),
                &mut other,
            );
            u += 2;
        }
        for (a, o) in acc[0].iter_mut().zip(other[0]) {
            *a = _mm512_add_ps(*a, o);
        }
    }
    while u < units {
        unit::<R>(table(scales[u >> shift], biases[u >> shift]), bytes, u, (x, k), &mut acc);
        u += 1;
    }
    for (out, a) in lanes.iter_mut().zip(acc) {
        for (half, v) in out.chunks_exact_mut(16).zip(a) {
            let half: &mut [f32; 16] = half.try_into().unwrap();
            // SAFETY: `half` holds 16 floats; the store is unaligned.
            unsafe { _mm512_storeu_ps(half.as_mut_ptr(), v) }
        }
    }
}
