
/* ---- vectors: kernels compute K_LANES elements at a time in GCC/Clang vector types ----
 * Every step of a kernel is a vector of K_LANES values (the widest fills one register:
 * float32 kernels run 16 lanes with AVX-512, 8 with AVX/AVX2, 4 with SSE2 and NEON), so the loop is vector code
 * by construction, whatever the C compiler's if-conversion heuristics would do. Selects are
 * bit operations on comparison masks, never branches; ops without a vector form here compute
 * lane by lane with the scalar helpers above (c.rs decides; docs/compile.md lists them). */
/* Vectors wider than the target's registers (float64 lanes) pass between inlined helpers. */
#pragma GCC diagnostic ignored "-Wpsabi"
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif
#if defined(__AVX512F__)
#define K_VBYTES 64
#elif defined(__AVX__)
#define K_VBYTES 32
#else
#define K_VBYTES 16
#endif
/* K_LANE_BYTES (set before this part by each kernel: its widest lane, half floats counting
 * as float) fills one register with the widest vectors: comparisons and selects on vectors
 * wider than a register would be expanded lane by lane. */
#define K_LANES (K_VBYTES / K_LANE_BYTES)
#define K_VT(T, S) typedef T kv_##S __attribute__((vector_size(K_LANES * sizeof(T))))
K_VT(int8_t, i8); K_VT(uint8_t, u8); K_VT(int16_t, i16); K_VT(uint16_t, u16);
K_VT(int32_t, i32); K_VT(uint32_t, u32); K_VT(int64_t, i64); K_VT(uint64_t, u64);
K_VT(float, f32); K_VT(double, f64);
typedef kv_u8 kv_b; /* bool: 0 or 1 per lane, as stored */

/* Unaligned loads and stores of whole vectors. */
#define K_LDST(S, T)                                                                          \
    K_INLINE kv_##S k_ld_##S(const void *p) { kv_##S v; memcpy(&v, p, sizeof v); return v; } \
    K_INLINE void k_st_##S(void *p, kv_##S v) { memcpy(p, &v, sizeof v); }
K_LDST(i8, int8_t) K_LDST(u8, uint8_t) K_LDST(i16, int16_t) K_LDST(u16, uint16_t)
K_LDST(i32, int32_t) K_LDST(u32, uint32_t) K_LDST(i64, int64_t) K_LDST(u64, uint64_t)
K_LDST(f32, float) K_LDST(f64, double)
#define k_ld_b k_ld_u8
#define k_st_b k_st_u8

/* Lane-wise select: m is a comparison mask (all ones or zero per lane) of the int type IT. */
#define K_SEL(IT, m, a, b) ((__typeof__(a))((((IT)(a)) & (m)) | (((IT)(b)) & ~(m))))

/* k_nr_<w>_<s> (narrowing, modulo as C's: the low part of each lane) and k_wd_<s>_<w>
 * (widening with zeros) between unsigned lanes of w and s bits, and K_REP(x) (x once per lane,
 * an exact splat), are shuffles written by c_vector.rs for this K_LANES (gcc 12 expands
 * __builtin_convertvector between integer widths lane by lane). */
/* @LANE_HELPERS@ */
/* Comparison masks <-> bool lanes. */
K_INLINE kv_b k_b_from_m8(kv_i64 m) { return k_nr_64_8((kv_u64)m & 1); }
K_INLINE kv_b k_b_from_m4(kv_i32 m) { return k_nr_32_8((kv_u32)m & 1); }
K_INLINE kv_b k_b_from_m2(kv_i16 m) { return k_nr_16_8((kv_u16)m & 1); }
K_INLINE kv_b k_b_from_m1(kv_i8 m) { return (kv_b)m & 1; }
K_INLINE kv_i64 k_m8_from_b(kv_b c) { return -(kv_i64)k_wd_8_64(c); }
K_INLINE kv_i32 k_m4_from_b(kv_b c) { return -(kv_i32)k_wd_8_32(c); }
K_INLINE kv_i16 k_m2_from_b(kv_b c) { return -(kv_i16)k_wd_8_16(c); }
K_INLINE kv_i8 k_m1_from_b(kv_b c) { return -(kv_i8)c; }

/* Fused multiply-add (the math below uses it exactly where kiln-cpu's vecmath.rs calls
 * mul_add, so both round alike) and square roots, with the target's instructions on
 * register-sized pieces (k_r*: one register). */
typedef float k_rf32 __attribute__((vector_size(K_VBYTES)));
typedef double k_rf64 __attribute__((vector_size(K_VBYTES)));
K_INLINE k_rf32 k_rfma(k_rf32 a, k_rf32 b, k_rf32 c) {
#if defined(__AVX512F__)
    return (k_rf32)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif defined(__FMA__)
    return (k_rf32)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#elif defined(__aarch64__)
    return (k_rf32)vfmaq_f32((float32x4_t)c, (float32x4_t)a, (float32x4_t)b);
#else
    k_rf32 r;
    for (int l = 0; l < (int)(K_VBYTES / 4); ++l) r[l] = fmaf(a[l], b[l], c[l]);
    return r;
#endif
}
K_INLINE k_rf32 k_rsqrt32(k_rf32 a) {
#if defined(__AVX512F__)
    return (k_rf32)_mm512_sqrt_ps((__m512)a);
#elif defined(__AVX__)
    return (k_rf32)_mm256_sqrt_ps((__m256)a);
#elif defined(__SSE2__)
    return (k_rf32)_mm_sqrt_ps((__m128)a);
#elif defined(__aarch64__)
    return (k_rf32)vsqrtq_f32((float32x4_t)a);
#else
    k_rf32 r;
    for (int l = 0; l < (int)(K_VBYTES / 4); ++l) r[l] = sqrtf(a[l]);
    return r;
#endif
}
K_INLINE k_rf64 k_rsqrt64(k_rf64 a) {
#if defined(__AVX512F__)
    return (k_rf64)_mm512_sqrt_pd((__m512d)a);
#elif defined(__AVX__)
    return (k_rf64)_mm256_sqrt_pd((__m256d)a);
#elif defined(__SSE2__)
    return (k_rf64)_mm_sqrt_pd((__m128d)a);
#elif defined(__aarch64__)
    return (k_rf64)vsqrtq_f64((float64x2_t)a);
#else
    k_rf64 r;
    for (int l = 0; l < (int)(K_VBYTES / 8); ++l) r[l] = sqrt(a[l]);
    return r;
#endif
}
/* k_rlitmin(c, x) = c < x ? c : x and k_rlitmax(c, x) = c > x ? c : x, for c neither NaN nor
 * zero: one instruction (x86's min/max return their second operand, x, when x is NaN; NEON's
 * return the NaN; the generic form is the definition), where a compare and a blend took two. */
#define K_RLIT(NAME, X86, NEON, OP)                                                           \
    K_INLINE k_rf32 NAME(k_rf32 c, k_rf32 x) {                                               \
        K_RLIT_BODY(X86, NEON, OP)                                                            \
    }
#if defined(__AVX512F__)
#define K_RLIT_BODY(X86, NEON, OP) return (k_rf32)_mm512_##X86##_ps((__m512)c, (__m512)x);
#elif defined(__AVX__)
#define K_RLIT_BODY(X86, NEON, OP) return (k_rf32)_mm256_##X86##_ps((__m256)c, (__m256)x);
#elif defined(__SSE2__)
#define K_RLIT_BODY(X86, NEON, OP) return (k_rf32)_mm_##X86##_ps((__m128)c, (__m128)x);
#elif defined(__aarch64__)
#define K_RLIT_BODY(X86, NEON, OP) return (k_rf32)NEON((float32x4_t)c, (float32x4_t)x);
#else
#define K_RLIT_BODY(X86, NEON, OP)                                                            \
    k_rf32 r;                                                                                 \
    for (int l = 0; l < (int)(K_VBYTES / 4); ++l) r[l] = c[l] OP x[l] ? c[l] : x[l];          \
    return r;
#endif
K_RLIT(k_rlitmin, min, vminq_f32, <)
K_RLIT(k_rlitmax, max, vmaxq_f32, >)
/* VT's value in NP registers (at least one; a short vector is zero-padded). */
#define K_PIECES(VT, RT) (sizeof(VT) > sizeof(RT) ? sizeof(VT) / sizeof(RT) : 1)
K_INLINE kv_f32 k_vfma(kv_f32 a, kv_f32 b, kv_f32 c) {
    enum { NP = K_PIECES(kv_f32, k_rf32) };
    k_rf32 x[NP], y[NP], z[NP];
    memset(x, 0, sizeof x); memset(y, 0, sizeof y); memset(z, 0, sizeof z);
    memcpy(x, &a, sizeof a); memcpy(y, &b, sizeof b); memcpy(z, &c, sizeof c);
    for (int k = 0; k < NP; ++k) x[k] = k_rfma(x[k], y[k], z[k]);
    kv_f32 r; memcpy(&r, x, sizeof r); return r;
}
K_INLINE kv_f32 k_vsqrt_f32(kv_f32 a) {
    enum { NP = K_PIECES(kv_f32, k_rf32) };
    k_rf32 x[NP];
    memset(x, 0, sizeof x); memcpy(x, &a, sizeof a);
    for (int k = 0; k < NP; ++k) x[k] = k_rsqrt32(x[k]);
    kv_f32 r; memcpy(&r, x, sizeof r); return r;
}
K_INLINE kv_f64 k_vsqrt_f64(kv_f64 a) {
    enum { NP = K_PIECES(kv_f64, k_rf64) };
    k_rf64 x[NP];
    memset(x, 0, sizeof x); memcpy(x, &a, sizeof a);
    for (int k = 0; k < NP; ++k) x[k] = k_rsqrt64(x[k]);
    kv_f64 r; memcpy(&r, x, sizeof r); return r;
}

/* x clamped by a literal c (neither NaN nor zero) from above (k_vlitmin) or below
 * (k_vlitmax), NaN passing through; the math below clamps with these. */
#define K_VLIT(NAME, RNAME)                                                                   \
    K_INLINE kv_f32 NAME(float c, kv_f32 v) {                                                 \
        enum { NP = K_PIECES(kv_f32, k_rf32) };                                               \
        k_rf32 x[NP];                                                                         \
        memset(x, 0, sizeof x); memcpy(x, &v, sizeof v);                                      \
        for (int k = 0; k < NP; ++k) x[k] = RNAME((k_rf32){} + c, x[k]);                      \
        kv_f32 r; memcpy(&r, x, sizeof r); return r; }
K_VLIT(k_vlitmin, k_rlitmin)
K_VLIT(k_vlitmax, k_rlitmax)

/* ---- float vector helpers for float (f32) and double (f64): NaN-aware max/min, abs,
 * copysign, sign and rounding to integers, as the scalar helpers ---- */
#define K_VFLOAT_FNS(S, VT, IT, UT, SIGN, BIG)                                                \
    K_INLINE VT k_vabs_##S(VT x) { return (VT)((UT)x & ~((UT){} + SIGN)); }                   \
    K_INLINE VT k_vcopysign_##S(VT m, VT s) {                                                 \
        const UT sign = (UT){} + SIGN;                                                        \
        return (VT)(((UT)m & ~sign) | ((UT)s & sign)); }                                      \
    K_INLINE VT k_vmax_##S(VT a, VT b) { return K_SEL(IT, (a != a) | (a > b), a, b); }        \
    K_INLINE VT k_vmin_##S(VT a, VT b) { return K_SEL(IT, (a != a) | (a < b), a, b); }        \
    K_INLINE VT k_vsign_##S(VT x) {                                                           \
        const VT one = (VT){} + 1, zero = (VT){};                                             \
        return K_SEL(IT, x > 0, one, K_SEL(IT, x < 0, -one, zero)); }                         \
    /* round half to even: (|x| + 2^p) - 2^p is exact below 2^p (p: the mantissa bits) */    \
    K_INLINE VT k_vrint_##S(VT x) {                                                           \
        const VT a = k_vabs_##S(x), big = (VT){} + BIG;                                        \
        const VT r = k_vcopysign_##S((a + big) - big, x);                                     \
        return K_SEL(IT, a < big, r, x); }                                                    \
    K_INLINE VT k_vfloor_##S(VT x) {                                                          \
        const VT r = k_vrint_##S(x);                                                          \
        return k_vcopysign_##S(K_SEL(IT, r > x, r - 1, r), x); }                              \
    K_INLINE VT k_vceil_##S(VT x) {                                                           \
        const VT r = k_vrint_##S(x);                                                          \
        return k_vcopysign_##S(K_SEL(IT, r < x, r + 1, r), x); }
K_VFLOAT_FNS(f32, kv_f32, kv_i32, kv_u32, 0x80000000u, 8388608.0f)
K_VFLOAT_FNS(f64, kv_f64, kv_i64, kv_u64, 0x8000000000000000ull, 4503599627370496.0)

/* ---- conversions ---- */
/* float -> int32 as x86's cvtt: NaN and out of range give INT32_MIN (scalar k_f2i32). */
K_INLINE kv_i32 k_vf2i32_f32(kv_f32 x) {
    const kv_i32 ok = (x >= -2147483648.0f) & (x < 2147483648.0f);
    const kv_i32 v = __builtin_convertvector(K_SEL(kv_i32, ok, x, (kv_f32){}), kv_i32);
    return K_SEL(kv_i32, ok, v, (kv_i32){} + INT32_MIN);
}
K_INLINE kv_i32 k_vf2i32_f64(kv_f64 x) {
    const kv_i64 ok = (x > -2147483649.0) & (x < 2147483648.0);
    const kv_i32 v = __builtin_convertvector(K_SEL(kv_i64, ok, x, (kv_f64){}), kv_i32);
    return K_SEL(kv_i32, (kv_i32)k_nr_64_32((kv_u64)ok), v, (kv_i32){} + INT32_MIN);
}
/* uint32 -> float / double, rounded once: the high and low halves are exact. */
K_INLINE kv_f32 k_vu32_to_f32(kv_u32 x) {
    const kv_f32 hi = __builtin_convertvector((kv_i32)(x >> 16), kv_f32) * 65536.0f;
    return hi + __builtin_convertvector((kv_i32)(x & 0xffffu), kv_f32);
}
K_INLINE kv_f64 k_vu32_to_f64(kv_u32 x) {
    return __builtin_convertvector((kv_i32)(x ^ 0x80000000u), kv_f64) + 2147483648.0;
}

/* float16 / bfloat16 bits <-> float, with the scalar helpers' rounding (to nearest even,
 * overflow to inf, NaN quiet and signed, subnormals exact). */
K_INLINE kv_f32 k_vf16_to_f32(kv_u16 h16) {
    const kv_u32 h = k_wd_16_32(h16);
    const kv_u32 sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    const kv_u32 normal = sign | ((e + 112u) << 23) | (m << 13);
    const kv_u32 special = sign | 0x7f800000u | (m << 13) | (kv_u32)((kv_i32)(m != 0u) & 0x400000);
    const kv_f32 subf = __builtin_convertvector((kv_i32)m, kv_f32) * 5.9604644775390625e-8f;
    const kv_u32 sub = sign | (kv_u32)subf;
    const kv_i32 is_special = (kv_i32)(e == 0x1fu), is_sub = (kv_i32)(e == 0u);
    return (kv_f32)K_SEL(kv_i32, is_special, special, K_SEL(kv_i32, is_sub, sub, normal));
}
K_INLINE kv_f32 k_vbf16_to_f32(kv_u16 h) {
    const kv_u16 nan = (kv_u16)((kv_i16)((h & 0x7fff) > 0x7f80) & 0x40);
    return (kv_f32)(k_wd_16_32(h | nan) << 16);
}
K_INLINE kv_u16 k_vf32_to_f16(kv_f32 x) {
    const kv_u32 b = (kv_u32)x, sign = (b >> 16) & 0x8000u, ax = b & 0x7fffffffu;
    /* NaN: quiet, the payload's top bits kept (as the half crate the eager kernels use) */
    const kv_u32 special = (kv_u32)K_SEL(kv_i32, (kv_i32)(ax > 0x7f800000u),
                                         (kv_i32)(0x7e00u | ((ax & 0x7fffffu) >> 13)), (kv_i32){} + 0x7c00);
    /* normal: rebias the exponent, round the 13 dropped bits to nearest even (a carry moves
     * into the exponent, as it should) */
    const kv_u32 normal = (ax + 0x0fffu + ((ax >> 13) & 1u) - 0x38000000u) >> 13;
    /* subnormal: adding 0.5 (ulp 2^-24) rounds |x| once to a multiple of 2^-24 */
    const kv_u32 sub = (kv_u32)(k_vabs_f32(x) + 0.5f) - 0x3f000000u;
    const kv_i32 is_special = (kv_i32)(ax >= 0x477ff000u), is_normal = (kv_i32)(ax >= 0x38800000u);
    const kv_u32 h = K_SEL(kv_i32, is_special, special, K_SEL(kv_i32, is_normal, normal, sub));
    return k_nr_32_16(sign | h);
}
K_INLINE kv_u16 k_vf32_to_bf16(kv_f32 x) {
    const kv_u32 b = (kv_u32)x, sign = (b >> 16) & 0x8000u, ax = b & 0x7fffffffu;
    const kv_u32 special = (kv_u32)K_SEL(kv_i32, (kv_i32)(ax > 0x7f800000u), (kv_i32)((ax >> 16) | 0x40u),
                                         (kv_i32){} + 0x7f80);
    const kv_u32 rounded = (ax + 0x7fffu + ((ax >> 16) & 1u)) >> 16;
    const kv_u32 h = K_SEL(kv_i32, (kv_i32)(ax >= 0x7f800000u), special, rounded);
    return k_nr_32_16(sign | h);
}
K_INLINE kv_f32 k_vround_f16(kv_f32 x) { return k_vf16_to_f32(k_vf32_to_f16(x)); }
K_INLINE kv_f32 k_vround_bf16(kv_f32 x) { return k_vbf16_to_f32(k_vf32_to_bf16(x)); }
