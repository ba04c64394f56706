/* kiln generated CUDA kernel preamble (headerless: NVRTC needs no include path). The scalar
 * math of every elementwise op as C++ overloads, so the facts rows' expressions (k_exp(a),
 * k_maximum(a, b)) work for any operand type, with the same semantics as the C preamble
 * (preamble.c) and kiln-cpu: integer division never traps, shifts behave as x86, float -> int
 * conversions give x86's results for NaN and out-of-range values. float16 / bfloat16 are
 * stored as raw bits and converted by PTX instructions (round to nearest even). */
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#define INT32_MIN (-2147483647 - 1)
#define INT64_MIN (-9223372036854775807ll - 1)
#define NAN __int_as_float(0x7fc00000)
#define INFINITY __int_as_float(0x7f800000)
#define K_INLINE static __device__ __forceinline__

/* A run of N elements moved as one 16-byte (or smaller) access. */
template <typename T, int N> struct __align__(sizeof(T) * N) KVec { T v[N]; };

/* ---- half precision storage ---- */
K_INLINE float k_f16_to_f32(uint16_t h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
K_INLINE uint16_t k_f32_to_f16(float f) { uint16_t h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
K_INLINE float k_bf16_to_f32(uint16_t h) { return __uint_as_float(((uint32_t)h) << 16); }
K_INLINE uint16_t k_f32_to_bf16(float f) { uint16_t h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
/* The generated code widens computed floats to double before storing (the C backend's one
 * rounding from double); values reaching here are floats, so narrowing back is exact and the
 * compiler folds the pair away. The GPU has no float64 arrays. */
K_INLINE uint16_t k_f64_to_f16(double x) { return k_f32_to_f16((float)x); }
K_INLINE uint16_t k_f64_to_bf16(double x) { return k_f32_to_bf16((float)x); }
K_INLINE float k_round_f16(float x) { return k_f16_to_f32(k_f32_to_f16(x)); }
K_INLINE float k_round_bf16(float x) { return k_bf16_to_f32(k_f32_to_bf16(x)); }

/* ---- float -> int conversions as x86 (cvtt): NaN / out of range give the minimum ---- */
K_INLINE int32_t k_f2i32(double v) {
    return (v > -2147483649.0 && v < 2147483648.0) ? (int32_t)v : INT32_MIN;
}
K_INLINE int64_t k_f2i64(double v) {
    return (v >= -9223372036854775808.0 && v < 9223372036854775808.0) ? (int64_t)v : INT64_MIN;
}
K_INLINE uint64_t k_f2u64(double v) {
    if (v >= 9223372036854775808.0)
        return (uint64_t)k_f2i64(v - 9223372036854775808.0) ^ (1ull << 63);
    return (uint64_t)k_f2i64(v);
}

/* ---- float math ---- */
/* A real function of the math library by its double name (`k_libm(exp2, a)`), in float
 * as every computed value here: op rows whose math is the library's need no helper. */
#define k_libm(fn, a) fn##f(a)
K_INLINE float k_exp(float x) { return expf(x); }
K_INLINE float k_log(float x) { return logf(x); }
K_INLINE float k_sqrt(float x) { return sqrtf(x); }
K_INLINE float k_sin(float x) { return sinf(x); }
K_INLINE float k_cos(float x) { return cosf(x); }
K_INLINE float k_tan(float x) { return tanf(x); }
/* k_tanh, k_erf, k_erf_unclamped: math.rs (cuda_math), ahead of this file. */
K_INLINE float k_expm1(float x) { return expm1f(x); }
K_INLINE float k_log1p(float x) { return log1pf(x); }
K_INLINE float k_log2(float x) { return log2f(x); }
K_INLINE float k_log10(float x) { return log10f(x); }
K_INLINE float k_asin(float x) { return asinf(x); }
K_INLINE float k_acos(float x) { return acosf(x); }
K_INLINE float k_atan(float x) { return atanf(x); }
K_INLINE float k_sinh(float x) { return sinhf(x); }
K_INLINE float k_cosh(float x) { return coshf(x); }
K_INLINE float k_asinh(float x) { return asinhf(x); }
K_INLINE float k_acosh(float x) { return x < 1.0f ? NAN : acoshf(x); }
K_INLINE float k_atanh(float x) { return atanhf(x); }
K_INLINE float k_atan2(float a, float b) { return atan2f(a, b); }
K_INLINE float k_rsqrt(float x) { return 1.0f / sqrtf(x); }
K_INLINE float k_sigmoid(float x) { float y = 1.0f / (1.0f + expf(fabsf(x))); return x < 0.0f ? y : 1.0f - y; }
K_INLINE float k_abs(float x) { return fabsf(x); }
K_INLINE float k_sign(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); }
K_INLINE float k_floor(float x) { return floorf(x); }
K_INLINE float k_ceil(float x) { return ceilf(x); }
K_INLINE float k_rint(float x) { return rintf(x); }
K_INLINE float k_maximum(float a, float b) { return (isnan(a) || a > b) ? a : b; }
K_INLINE float k_minimum(float a, float b) { return (isnan(a) || a < b) ? a : b; }
K_INLINE float k_power(float a, float b) { return powf(a, b); }
K_INLINE float k_floor_divide(float a, float b) { return floorf(a / b); }
K_INLINE float k_remainder(float a, float b) {
    float r = fmodf(a, b); return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
}
K_INLINE float k_logaddexp(float a, float b) {
    float hi = k_maximum(a, b), lo = k_minimum(a, b);
    if (lo == -INFINITY || hi == INFINITY) return hi;
    return hi + log1pf(expf(lo - hi));
}
/* a / c for a literal c with r = RN(1/c) (c.rs `divide_by_literal`), rounded exactly:
 * q = RN(a r) is within an ulp of a / c, the residual a - c q is exact in one FMA, and
 * RN(q + residual * r) is the correctly rounded quotient (Markstein's theorem; checked
 * against the division over every float significand by kiln-codegen's test
 * `markstein_division_by_literals_is_exact`). Where a residual could leave the normal range
 * (|a| outside [2^-60, 2^60], zeros, infinities, NaN) the division itself. */
K_INLINE float k_div_lit(float a, float c, float r) {
    const float m = fabsf(a);
    if (m >= 8.673617379884035e-19f && m <= 1.152921504606847e18f) { /* 2^-60, 2^60 */
        const float q = a * r;
        return fmaf(fmaf(-c, q, a), r, q);
    }
    return a / c;
}

/* erfinv: the two-branch polynomial in log(1 - a^2) (single precision, as eager). */
K_INLINE float k_erfinv(float a) {
    float t = logf(fmaf(a, -a, 1.0f)), p;
    if (fabsf(t) > 6.125f) {
        p = 3.03697567e-10f; p = fmaf(p, t, 2.93243101e-8f); p = fmaf(p, t, 1.22150334e-6f);
        p = fmaf(p, t, 2.84108955e-5f); p = fmaf(p, t, 3.93552968e-4f); p = fmaf(p, t, 3.02698812e-3f);
        p = fmaf(p, t, 4.83185798e-3f); p = fmaf(p, t, -2.64646143e-1f); p = fmaf(p, t, 8.40016484e-1f);
    } else {
        p = 5.43877832e-9f; p = fmaf(p, t, 1.43285448e-7f); p = fmaf(p, t, 1.22774793e-6f);
        p = fmaf(p, t, 1.12963626e-7f); p = fmaf(p, t, -5.61530760e-5f); p = fmaf(p, t, -1.47697632e-4f);
        p = fmaf(p, t, 2.31468678e-3f); p = fmaf(p, t, 1.15392581e-2f); p = fmaf(p, t, -2.32015476e-1f);
        p = fmaf(p, t, 8.86226892e-1f);
    }
    return a * p;
}

/* ---- integer math: never traps; shifts as x86 (narrow types promote to int32) ---- */
template <typename T> struct KWide { typedef int32_t S; typedef uint32_t U; static const int MASK = 31; };
template <> struct KWide<uint32_t> { typedef uint32_t S; typedef uint32_t U; static const int MASK = 31; };
template <> struct KWide<int64_t> { typedef int64_t S; typedef uint64_t U; static const int MASK = 63; };
template <> struct KWide<uint64_t> { typedef uint64_t S; typedef uint64_t U; static const int MASK = 63; };
template <typename T> K_INLINE bool k_signed() { return (T)(-1) < (T)0; }
template <typename T> K_INLINE T k_abs(T x) { return (k_signed<T>() && x < (T)0) ? (T)(-x) : x; }
template <typename T> K_INLINE T k_sign(T x) { return (T)((x > (T)0) - (x < (T)0)); }
template <typename T> K_INLINE T k_floor(T x) { return x; }
template <typename T> K_INLINE T k_ceil(T x) { return x; }
template <typename T> K_INLINE T k_rint(T x) { return x; }
template <typename T> K_INLINE T k_maximum(T a, T b) { return a > b ? a : b; }
template <typename T> K_INLINE T k_minimum(T a, T b) { return a < b ? a : b; }
template <typename T> K_INLINE T k_invert(T a) { return (T)~a; }
K_INLINE bool k_invert(bool a) { return !a; }
template <typename T> K_INLINE T k_floor_divide(T a, T b) {
    if (b == (T)0) return (T)0;
    if (k_signed<T>()) {
        if (b == (T)(-1)) return (T)(-a);
        T q = (T)(a / b);
        return ((T)(a % b) != (T)0 && ((a < (T)0) != (b < (T)0))) ? (T)(q - (T)1) : q;
    }
    return (T)(a / b);
}
template <typename T> K_INLINE T k_remainder(T a, T b) {
    if (b == (T)0) return a;
    if (k_signed<T>()) {
        if (b == (T)(-1)) return (T)0;
        T r = (T)(a % b);
        return (r != (T)0 && ((r < (T)0) != (b < (T)0))) ? (T)(r + b) : r;
    }
    return (T)(a % b);
}
template <typename T> K_INLINE T k_power(T base, T e) {
    if (k_signed<T>() && e < (T)0) return (T)0;
    T acc = (T)1;
    while (e != (T)0) { if (e & (T)1) acc = (T)(acc * base); e = (T)(e >> 1); base = (T)(base * base); }
    return acc;
}
template <typename T> K_INLINE T k_left_shift(T a, T b) {
    typedef typename KWide<T>::S W; typedef typename KWide<T>::U UW;
    return (T)(W)((UW)(W)a << ((uint32_t)b & KWide<T>::MASK));
}
template <typename T> K_INLINE T k_right_shift(T a, T b) {
    typedef typename KWide<T>::S W;
    return (T)((W)a >> ((uint32_t)b & KWide<T>::MASK));
}
/* bool: arithmetic on 0/1 */
K_INLINE bool k_abs(bool a) { return a; }
K_INLINE bool k_sign(bool a) { return a; }
K_INLINE bool k_maximum(bool a, bool b) { return a | b; }
K_INLINE bool k_minimum(bool a, bool b) { return a & b; }
K_INLINE bool k_power(bool a, bool b) { return a | !b; }
K_INLINE bool k_floor_divide(bool a, bool b) { return a & b; }
K_INLINE bool k_remainder(bool a, bool b) { return a & !b; }

/* ---- packed half pairs (generated by cuda_packed.rs) ----
 * Two float16 / bfloat16 values in one 32-bit register, the lower-addressed element in the low
 * half. + - * of two half values with one native instruction equal the float result rounded
 * once more to half (what the per-element code computes): float has at least 2p+2 bits for
 * both types, so the double rounding is innocuous. Subnormals are kept (no .ftz). Older
 * architectures without an instruction compute the same thing through float. */
K_INLINE float k_bf16x2_lo(uint32_t p) { return __uint_as_float(p << 16); }
K_INLINE float k_bf16x2_hi(uint32_t p) { return __uint_as_float(p & 0xffff0000u); }
K_INLINE float k_f16x2_lo(uint32_t p) { return k_f16_to_f32((uint16_t)(p & 0xffffu)); }
K_INLINE float k_f16x2_hi(uint32_t p) { return k_f16_to_f32((uint16_t)(p >> 16)); }
/* Both floats rounded to nearest even with one instruction (cvt puts its first source in the
 * high half). */
K_INLINE uint32_t k_bf16x2_pack(float lo, float hi) {
#if __CUDA_ARCH__ >= 800
    uint32_t d; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo)); return d;
#else
    return (uint32_t)k_f32_to_bf16(lo) | ((uint32_t)k_f32_to_bf16(hi) << 16);
#endif
}
K_INLINE uint32_t k_f16x2_pack(float lo, float hi) {
#if __CUDA_ARCH__ >= 800
    uint32_t d; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo)); return d;
#else
    return (uint32_t)k_f32_to_f16(lo) | ((uint32_t)k_f32_to_f16(hi) << 16);
#endif
}
/* add / sub / mul .rn on pairs: bf16x2 needs sm_90, f16x2 sm_53 (else through float). */
#define K_HALF2_NATIVE(T, NAME, OP, PTX)                                                     \
    K_INLINE uint32_t k_##NAME##_##T##x2(uint32_t a, uint32_t b) {                          \
        uint32_t d; asm(PTX " %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b)); return d;           \
    }
#define K_HALF2_FLOAT(T, NAME, OP, PTX)                                                      \
    K_INLINE uint32_t k_##NAME##_##T##x2(uint32_t a, uint32_t b) {                          \
        return k_##T##x2_pack(k_##T##x2_lo(a) OP k_##T##x2_lo(b),                           \
                              k_##T##x2_hi(a) OP k_##T##x2_hi(b));                          \
    }
#if __CUDA_ARCH__ >= 900
#define K_BF16X2 K_HALF2_NATIVE
#else
#define K_BF16X2 K_HALF2_FLOAT
#endif
#if __CUDA_ARCH__ >= 530
#define K_F16X2 K_HALF2_NATIVE
#else
#define K_F16X2 K_HALF2_FLOAT
#endif
K_BF16X2(bf16, add, +, "add.rn.bf16x2")
K_BF16X2(bf16, sub, -, "sub.rn.bf16x2")
K_BF16X2(bf16, mul, *, "mul.rn.bf16x2")
K_F16X2(f16, add, +, "add.rn.f16x2")
K_F16X2(f16, sub, -, "sub.rn.f16x2")
K_F16X2(f16, mul, *, "mul.rn.f16x2")
/* Each half of a or of b by its own condition (where; max / min pick an operand's bits), as
 * one byte permute: prmt takes bytes 0-3 from a and 4-7 from b, so the selector 0x7654 is b
 * and each condition moves its half's two nibbles by 4 onto a. Not `(hi ? a : b) & 0xffff0000`:
 * ptxas (CUDA 13.5, sm_90) turns that select, when the condition compares the bfloat16 high
 * half's float (which is the register itself) with a constant arm, into a float min / max
 * (`p <= 0 ? p : 0` -> FMNMX.NAN): a NaN there comes back as 0x7fffffff, whose low 16 bits
 * made the other element NaN (minimum(0, x), maximum(8, x), where(!(x > 0), x, 0)). */
K_INLINE uint32_t k_pick_h2(bool lo, bool hi, uint32_t a, uint32_t b) {
    const uint32_t sel = 0x7654u - (lo ? 0x0044u : 0u) - (hi ? 0x4400u : 0u);
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}
/* k_maximum / k_minimum per half: a where a is NaN or wins, else b. */
#define K_HALF2_MINMAX(T)                                                                    \
    K_INLINE uint32_t k_maximum_##T##x2(uint32_t a, uint32_t b) {                           \
        const float al = k_##T##x2_lo(a), bl = k_##T##x2_lo(b);                              \
        const float ah = k_##T##x2_hi(a), bh = k_##T##x2_hi(b);                              \
        return k_pick_h2(isnan(al) || al > bl, isnan(ah) || ah > bh, a, b);                  \
    }                                                                                        \
    K_INLINE uint32_t k_minimum_##T##x2(uint32_t a, uint32_t b) {                           \
        const float al = k_##T##x2_lo(a), bl = k_##T##x2_lo(b);                              \
        const float ah = k_##T##x2_hi(a), bh = k_##T##x2_hi(b);                              \
        return k_pick_h2(isnan(al) || al < bl, isnan(ah) || ah < bh, a, b);                  \
    }
K_HALF2_MINMAX(bf16)
K_HALF2_MINMAX(f16)
/* k_maximum(a, +0.0) per half on the bits (relu): a where its sign is clear (positive, +0,
 * +NaN) or it is a NaN, else +0. `low` = 0x7fff - the infinity's bits, so a magnitude above
 * the infinity's (a NaN) carries into bit 15 of its half, and never beyond it. */
K_INLINE uint32_t k_relu_h2(uint32_t a, uint32_t low) {
    const uint32_t nan = ((a & 0x7fff7fffu) + low * 0x10001u) & 0x80008000u;
    const uint32_t drop = a & ~nan & 0x80008000u;
    return a & ~((drop >> 15) * 0xffffu);
}
K_INLINE uint32_t k_relu_bf16x2(uint32_t a) { return k_relu_h2(a, 0x007fu); }
K_INLINE uint32_t k_relu_f16x2(uint32_t a) { return k_relu_h2(a, 0x03ffu); }

/* ---- complex64: two floats, real part first (numpy's and MLX's layout) ----
 * The same formulas as kiln-cpu (complex.rs over num-complex 0.4), step for step, so special
 * values (signed zeros, infinities, NaN) and branch cuts come out the same; only the float
 * functions themselves (sinf, expf...) may differ from the host's libm by an ulp or two. */
struct __align__(8) kc64 { float re, im; };
K_INLINE kc64 k_c64(float re, float im) { kc64 z; z.re = re; z.im = im; return z; }
K_INLINE bool k_isnan(kc64 z) { return isnan(z.re) || isnan(z.im); }
K_INLINE kc64 operator-(kc64 a) { return k_c64(-a.re, -a.im); }
K_INLINE kc64 operator+(kc64 a, kc64 b) { return k_c64(a.re + b.re, a.im + b.im); }
K_INLINE kc64 operator-(kc64 a, kc64 b) { return k_c64(a.re - b.re, a.im - b.im); }
K_INLINE kc64 operator*(kc64 a, kc64 b) {
    return k_c64(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re);
}
/* num-complex's plain quotient (used inside its functions: atan, acosh, atanh). */
K_INLINE kc64 k_cdiv_plain(kc64 a, kc64 b) {
    const float n = b.re * b.re + b.im * b.im;
    return k_c64((a.re * b.re + a.im * b.im) / n, (a.im * b.re - a.re * b.im) / n);
}
/* The divide op: C99 Annex G in double (no overflow of |b|^2), infinities recovered where
 * the plain formula gives NaN (kiln-cpu complex::div). */
K_INLINE kc64 operator/(kc64 a, kc64 b) {
    const double ar = a.re, ai = a.im, br = b.re, bi = b.im;
    const double denom = br * br + bi * bi;
    double x = (ar * br + ai * bi) / denom, y = (ai * br - ar * bi) / denom;
    if (isnan(x) && isnan(y)) {
        const double inf = (double)INFINITY;
        if (denom == 0.0 && (!isnan(ar) || !isnan(ai))) {
            x = copysign(inf, br) * ar;
            y = copysign(inf, br) * ai;
        } else if ((isinf(ar) || isinf(ai)) && isfinite(br) && isfinite(bi)) {
            const double ar1 = copysign(isinf(ar) ? 1.0 : 0.0, ar);
            const double ai1 = copysign(isinf(ai) ? 1.0 : 0.0, ai);
            x = inf * (ar1 * br + ai1 * bi);
            y = inf * (ai1 * br - ar1 * bi);
        } else if ((isinf(br) || isinf(bi)) && isfinite(ar) && isfinite(ai)) {
            const double br1 = copysign(isinf(br) ? 1.0 : 0.0, br);
            const double bi1 = copysign(isinf(bi) ? 1.0 : 0.0, bi);
            x = 0.0 * (ar * br1 + ai * bi1);
            y = 0.0 * (ai * br1 - ar * bi1);
        }
    }
    return k_c64((float)x, (float)y);
}
/* Equality of both parts; order lexicographic (real, then imaginary) as MLX; NaN unordered. */
K_INLINE bool operator==(kc64 a, kc64 b) { return a.re == b.re && a.im == b.im; }
K_INLINE bool operator!=(kc64 a, kc64 b) { return !(a == b); }
K_INLINE bool operator<(kc64 a, kc64 b) { return a.re < b.re || (a.re == b.re && a.im < b.im); }
K_INLINE bool operator<=(kc64 a, kc64 b) { return a.re < b.re || (a.re == b.re && a.im <= b.im); }
K_INLINE bool operator>(kc64 a, kc64 b) { return b < a; }
K_INLINE bool operator>=(kc64 a, kc64 b) { return b <= a; }
/* Warp shuffles move both parts (reductions over complex64). */
K_INLINE kc64 __shfl_down_sync(unsigned mask, kc64 v, unsigned delta) {
    return k_c64(__shfl_down_sync(mask, v.re, delta), __shfl_down_sync(mask, v.im, delta));
}
K_INLINE float k_cabs(kc64 z) { return hypotf(z.re, z.im); }
K_INLINE float k_carg(kc64 z) { return atan2f(z.im, z.re); }
K_INLINE kc64 k_polar(float r, float t) { return k_c64(r * cosf(t), r * sinf(t)); }
K_INLINE kc64 k_cscale_div(kc64 z, float d) { return k_c64(z.re / d, z.im / d); }
K_INLINE kc64 k_exp(kc64 z) {
    float re = z.re, im = z.im;
    if (isinf(re)) {
        if (re < 0.0f) {
            if (!isfinite(im)) return k_c64(0.0f, 0.0f);
        } else if (im == 0.0f || !isfinite(im)) {
            if (isinf(im)) im = NAN;
            return k_c64(re, im);
        }
    } else if (isnan(re) && im == 0.0f) {
        return z;
    }
    return k_polar(expf(re), im);
}
K_INLINE kc64 k_log(kc64 z) { return k_c64(logf(k_cabs(z)), k_carg(z)); }
K_INLINE kc64 k_log2(kc64 z) { return k_cscale_div(k_log(z), 0.693147180559945309f); }
K_INLINE kc64 k_log10(kc64 z) { return k_cscale_div(k_log(z), 2.30258509299404568f); }
K_INLINE kc64 k_log1p(kc64 z) { return k_log(k_c64(z.re + 1.0f, z.im)); }
K_INLINE kc64 k_sqrt(kc64 z) {
    if (z.im == 0.0f) {
        if (!signbit(z.re)) return k_c64(sqrtf(z.re), z.im);
        const float im = sqrtf(-z.re);
        return k_c64(0.0f, signbit(z.im) ? -im : im);
    }
    if (z.re == 0.0f) {
        const float x = sqrtf(fabsf(z.im) / 2.0f);
        return k_c64(x, signbit(z.im) ? -x : x);
    }
    return k_polar(sqrtf(k_cabs(z)), k_carg(z) / 2.0f);
}
K_INLINE kc64 k_rsqrt(kc64 z) { return k_c64(1.0f, 0.0f) / k_sqrt(z); }
K_INLINE kc64 k_sin(kc64 z) { return k_c64(sinf(z.re) * coshf(z.im), cosf(z.re) * sinhf(z.im)); }
K_INLINE kc64 k_cos(kc64 z) { return k_c64(cosf(z.re) * coshf(z.im), -sinf(z.re) * sinhf(z.im)); }
K_INLINE kc64 k_sinh(kc64 z) { return k_c64(sinhf(z.re) * cosf(z.im), coshf(z.re) * sinf(z.im)); }
K_INLINE kc64 k_cosh(kc64 z) { return k_c64(coshf(z.re) * cosf(z.im), sinhf(z.re) * sinf(z.im)); }
K_INLINE kc64 k_tan(kc64 z) {
    const float r2 = z.re + z.re, i2 = z.im + z.im;
    return k_cscale_div(k_c64(sinf(r2), sinhf(i2)), cosf(r2) + coshf(i2));
}
K_INLINE kc64 k_tanh(kc64 z) {
    const float r2 = z.re + z.re, i2 = z.im + z.im;
    return k_cscale_div(k_c64(sinhf(r2), sinf(i2)), coshf(r2) + cosf(i2));
}
/* The inverse functions by num-complex's logarithm formulas (its branch cuts). */
K_INLINE kc64 k_asin(kc64 z) {
    const kc64 i = k_c64(0.0f, 1.0f), one = k_c64(1.0f, 0.0f);
    return -i * k_log(k_sqrt(one - z * z) + i * z);
}
K_INLINE kc64 k_acos(kc64 z) {
    const kc64 i = k_c64(0.0f, 1.0f), one = k_c64(1.0f, 0.0f);
    return -i * k_log(i * k_sqrt(one - z * z) + z);
}
K_INLINE kc64 k_atan(kc64 z) {
    const kc64 i = k_c64(0.0f, 1.0f), one = k_c64(1.0f, 0.0f), two = k_c64(2.0f, 0.0f);
    if (z == i) return k_c64(0.0f, INFINITY);
    if (z == -i) return k_c64(0.0f, -INFINITY);
    return k_cdiv_plain(k_log(one + i * z) - k_log(one - i * z), two * i);
}
K_INLINE kc64 k_asinh(kc64 z) {
    const kc64 one = k_c64(1.0f, 0.0f);
    return k_log(z + k_sqrt(one + z * z));
}
K_INLINE kc64 k_acosh(kc64 z) {
    const kc64 one = k_c64(1.0f, 0.0f), two = k_c64(2.0f, 0.0f);
    return two * k_log(k_sqrt(k_cdiv_plain(z + one, two)) + k_sqrt(k_cdiv_plain(z - one, two)));
}
K_INLINE kc64 k_atanh(kc64 z) {
    const kc64 one = k_c64(1.0f, 0.0f), two = k_c64(2.0f, 0.0f);
    if (z == one) return k_c64(INFINITY, 0.0f);
    if (z == -one) return k_c64(-INFINITY, 0.0f);
    return k_cdiv_plain(k_log(one + z) - k_log(one - z), two);
}
/* z / |z|, 0 at 0 (MLX's sign). */
K_INLINE kc64 k_sign(kc64 z) {
    const float r = k_cabs(z);
    return r == 0.0f ? k_c64(0.0f, 0.0f) : k_c64(z.re / r, z.im / r);
}
/* Each part rounds half to even. */
K_INLINE kc64 k_rint(kc64 z) { return k_c64(rintf(z.re), rintf(z.im)); }
K_INLINE kc64 k_maximum(kc64 a, kc64 b) { return (k_isnan(a) || a > b) ? a : b; }
K_INLINE kc64 k_minimum(kc64 a, kc64 b) { return (k_isnan(a) || a < b) ? a : b; }
/* MLX's floor_divide on complex64 is plain division. */
K_INLINE kc64 k_floor_divide(kc64 a, kc64 b) { return a / b; }
K_INLINE kc64 k_power(kc64 a, kc64 b) {
    if (b.re == 0.0f && b.im == 0.0f) return k_c64(1.0f, 0.0f);
    /* 0^b: 0 for b with a positive real part, else undefined (NaN), as numpy. */
    if (a.re == 0.0f && a.im == 0.0f) return b.re > 0.0f ? k_c64(0.0f, 0.0f) : k_c64(NAN, NAN);
    return k_exp(b * k_log(a));
}
/* log(exp(a) + exp(b)) with the larger (lexicographic) operand factored out, as MLX. */
K_INLINE kc64 k_logaddexp(kc64 a, kc64 b) {
    if (k_isnan(a) || k_isnan(b)) return k_c64(NAN, NAN);
    const kc64 hi = a > b ? a : b, lo = a > b ? b : a;
    if (lo.re == -INFINITY || hi.re == INFINITY) return hi;
    const kc64 e = k_exp(lo - hi);
    return hi + k_log(k_c64(e.re + 1.0f, e.im));
}
/* Either part nonzero (or NaN) is true, as kiln-cpu's cast. */
K_INLINE bool k_c64_nonzero(kc64 z) { return z.re != 0.0f || z.im != 0.0f; }
