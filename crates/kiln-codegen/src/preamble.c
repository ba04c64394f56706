/* kiln generated kernel preamble: the scalar math of every elementwise op, one definition
 * per C type, chosen by _Generic so the facts rows' expressions (k_exp(a), k_maximum(a, b))
 * work for any operand type. Semantics follow kiln-cpu's scalar.rs, math.rs and cast.rs
 * (MLX's edge cases): integer division never traps, shifts behave as x86, float -> int
 * conversions give x86's results for NaN and out-of-range values. Built with -fwrapv, so
 * signed overflow wraps. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

/* complex64 storage (the C backend fuses no complex ops; the name matches the CUDA preamble). */
typedef float _Complex kc64;

#define K_INLINE static inline __attribute__((always_inline))
/* Before a scalar kernel loop (complex moves): its iterations are independent. */
#if defined(__clang__)
#define K_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define K_IVDEP _Pragma("GCC ivdep")
#else
#define K_IVDEP
#endif

/* ---- half precision storage: float16 / bfloat16 bits <-> float, round to nearest even ---- */
K_INLINE float k_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1fu) bits = sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0u); /* NaN quiet */
    else if (exp != 0) bits = sign | ((exp + 112u) << 23) | (man << 13);
    else if (man == 0) bits = sign;
    else { /* subnormal: exact as a float */
        float f = (float)man * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    float f; memcpy(&f, &bits, 4); return f;
}
K_INLINE float k_bf16_to_f32(uint16_t h) {
    if ((h & 0x7fffu) > 0x7f80u) h |= 0x40u; /* NaN quiet */
    uint32_t bits = (uint32_t)h << 16; float f; memcpy(&f, &bits, 4); return f;
}
/* double -> binary16 with one rounding (also exact for float inputs, widened first). */
K_INLINE uint16_t k_f64_to_f16(double x) {
    uint64_t b; memcpy(&b, &x, 8);
    uint16_t sign = (uint16_t)((b >> 48) & 0x8000u);
    uint64_t ax = b & 0x7fffffffffffffffull;
    if (ax >= 0x7ff0000000000000ull)   /* inf or NaN (quiet, the payload's top bits kept) */
        return sign | (ax > 0x7ff0000000000000ull
                       ? (uint16_t)(0x7e00u | ((ax & 0xfffffffffffffull) >> 42)) : 0x7c00u);
    int e = (int)(ax >> 52) - 1023;
    uint64_t m = (ax & 0xfffffffffffffull) | 0x10000000000000ull;
    if (e > 15) return sign | 0x7c00u;
    if (e < -25) return sign;                       /* below half the smallest subnormal */
    int shift = e >= -14 ? 42 : 42 + (-14 - e);      /* bits dropped from the 53-bit mantissa */
    uint64_t q = m >> shift, rem = m & ((1ull << shift) - 1), half = 1ull << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    if (e >= -14) { /* normal: q has 11 bits (12 after rounding up) */
        uint32_t exp = (uint32_t)(e + 15);
        if (q >> 11) { q >>= 1; exp++; }
        if (exp >= 31) return sign | 0x7c00u;
        return sign | (uint16_t)(exp << 10) | (uint16_t)(q & 0x3ffu);
    }
    return sign | (uint16_t)q;                       /* subnormal (q may round up to 0x400) */
}
K_INLINE uint16_t k_f64_to_bf16(double x) {
    uint64_t b; memcpy(&b, &x, 8);
    uint16_t sign = (uint16_t)((b >> 48) & 0x8000u);
    uint64_t ax = b & 0x7fffffffffffffffull;
    if (ax >= 0x7ff0000000000000ull)
        return sign | (ax > 0x7ff0000000000000ull
                       ? (uint16_t)(0x7fc0u | ((ax & 0xfffffffffffffull) >> 45)) : 0x7f80u);
    int e = (int)(ax >> 52) - 1023;
    uint64_t m = (ax & 0xfffffffffffffull) | 0x10000000000000ull;
    if (e > 127) return sign | 0x7f80u;
    if (e < -134) return sign;
    int shift = e >= -126 ? 45 : 45 + (-126 - e);
    if (shift > 63) return sign;
    uint64_t q = m >> shift, rem = m & ((1ull << shift) - 1), half = 1ull << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    if (e >= -126) {
        uint32_t exp = (uint32_t)(e + 127);
        if (q >> 8) { q >>= 1; exp++; }
        if (exp >= 255) return sign | 0x7f80u;
        return sign | (uint16_t)(exp << 7) | (uint16_t)(q & 0x7fu);
    }
    return sign | (uint16_t)q;
}
/* The float value of a float computed for a half result: rounded as eager rounds. */
K_INLINE float k_round_f16(float x) { return k_f16_to_f32(k_f64_to_f16((double)x)); }
K_INLINE float k_round_bf16(float x) { return k_bf16_to_f32(k_f64_to_bf16((double)x)); }

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

/* ---- float math (float and double) ---- */
#define K_FLOAT_FNS(T, S, EXP, LOG, ABS, FLOOR, FMOD, LOG1P)                                   \
    K_INLINE T k_sigmoid_##S(T x) { T y = (T)1 / ((T)1 + EXP(ABS(x))); return x < 0 ? y : (T)1 - y; } \
    K_INLINE T k_sign_##S(T x) { return x > 0 ? (T)1 : (x < 0 ? (T)-1 : (T)0); }             \
    K_INLINE T k_max_##S(T a, T b) { return (__builtin_isnan(a) || a > b) ? a : b; }                     \
    K_INLINE T k_min_##S(T a, T b) { return (__builtin_isnan(a) || a < b) ? a : b; }                     \
    K_INLINE T k_fdiv_##S(T a, T b) { return FLOOR(a / b); }                                  \
    K_INLINE T k_frem_##S(T a, T b) {                                                         \
        T r = FMOD(a, b); return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }             \
    K_INLINE T k_logaddexp_##S(T a, T b) {                                                    \
        T hi = k_max_##S(a, b), lo = k_min_##S(a, b);                                         \
        if (lo == -(T)INFINITY || hi == (T)INFINITY) return hi;                               \
        return hi + LOG1P(EXP(lo - hi)); }                                                    \
    K_INLINE T k_rsqrt_##S(T x) { return (T)1 / (sizeof(T) == 4 ? sqrtf((float)x) : sqrt((double)x)); }
K_FLOAT_FNS(float, f32, expf, logf, fabsf, floorf, fmodf, log1pf)
K_FLOAT_FNS(double, f64, exp, log, fabs, floor, fmod, log1p)
K_INLINE float k_acosh_f32(float x) { return x < 1.0f ? NAN : acoshf(x); }
K_INLINE double k_acosh_f64(double x) { return x < 1.0 ? NAN : acosh(x); }

/* a / c for a literal c with r = RN(1/c) (c.rs `divide_by_literal`): the division itself. */
K_INLINE float k_div_lit(float a, float c, float r) { (void)r; return a / c; }

/* erfinv: the two-branch polynomial in log(1 - a^2) (single precision, as eager). */
K_INLINE float k_erfinv_f32(float a) {
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


/* float32 exp, expm1, log, log1p, tanh, sigmoid and erf (k_expf ... k_erff) are one lane of
 * the vector math that follows (math.rs, as the eager kernels' vecmath.rs). */
K_INLINE float k_expf(float x);
K_INLINE float k_expm1f(float x);
K_INLINE float k_logf(float x);
K_INLINE float k_log1pf(float x);
K_INLINE float k_tanhf(float x);
K_INLINE float k_sigmoidf(float x);
K_INLINE float k_erff(float x);

/* ---- integer math: never traps; shifts as x86 (narrow types promote to int32) ---- */
#define K_SIGNED_FNS(T, S, W, UW, MASK)                                                       \
    K_INLINE T k_abs_##S(T x) { return x < 0 ? (T)(-x) : x; }                               \
    K_INLINE T k_sign_##S(T x) { return (T)((x > 0) - (x < 0)); }                             \
    K_INLINE T k_fdiv_##S(T a, T b) {                                                         \
        if (b == 0) return 0;                                                                 \
        if (b == -1) return (T)(-a);                                                          \
        T q = (T)(a / b); return ((T)(a % b) != 0 && ((a < 0) != (b < 0))) ? (T)(q - 1) : q; } \
    K_INLINE T k_frem_##S(T a, T b) {                                                         \
        if (b == 0) return a;                                                                 \
        if (b == -1) return 0;                                                                \
        T r = (T)(a % b); return (r != 0 && ((r < 0) != (b < 0))) ? (T)(r + b) : r; }        \
    K_INLINE T k_pow_##S(T base, T e) {                                                       \
        if (e < 0) return 0;                                                                  \
        T acc = 1;                                                                            \
        while (e != 0) { if (e & 1) acc = (T)(acc * base); e = (T)(e >> 1); base = (T)(base * base); } \
        return acc; }                                                                         \
    K_INLINE T k_shl_##S(T a, T b) { return (T)(W)((UW)(W)a << ((uint32_t)b & MASK)); }       \
    K_INLINE T k_shr_##S(T a, T b) { return (T)((W)a >> ((uint32_t)b & MASK)); }
#define K_UNSIGNED_FNS(T, S, W, UW, MASK)                                                     \
    K_INLINE T k_abs_##S(T x) { return x; }                                                   \
    K_INLINE T k_sign_##S(T x) { return (T)(x != 0); }                                        \
    K_INLINE T k_fdiv_##S(T a, T b) { return b == 0 ? 0 : (T)(a / b); }                       \
    K_INLINE T k_frem_##S(T a, T b) { return b == 0 ? a : (T)(a % b); }                       \
    K_INLINE T k_pow_##S(T base, T e) {                                                       \
        T acc = 1;                                                                            \
        while (e != 0) { if (e & 1) acc = (T)(acc * base); e = (T)(e >> 1); base = (T)(base * base); } \
        return acc; }                                                                         \
    K_INLINE T k_shl_##S(T a, T b) { return (T)(W)((UW)(W)a << ((uint32_t)b & MASK)); }       \
    K_INLINE T k_shr_##S(T a, T b) { return (T)((W)a >> ((uint32_t)b & MASK)); }
K_SIGNED_FNS(int8_t, i8, int32_t, uint32_t, 31)
K_SIGNED_FNS(int16_t, i16, int32_t, uint32_t, 31)
K_SIGNED_FNS(int32_t, i32, int32_t, uint32_t, 31)
K_SIGNED_FNS(int64_t, i64, int64_t, uint64_t, 63)
K_UNSIGNED_FNS(uint8_t, u8, int32_t, uint32_t, 31)
K_UNSIGNED_FNS(uint16_t, u16, int32_t, uint32_t, 31)
K_UNSIGNED_FNS(uint32_t, u32, uint32_t, uint32_t, 31)
K_UNSIGNED_FNS(uint64_t, u64, uint64_t, uint64_t, 63)
#define K_INT_MINMAX(T, S)                                                                    \
    K_INLINE T k_max_##S(T a, T b) { return a > b ? a : b; }                                  \
    K_INLINE T k_min_##S(T a, T b) { return a < b ? a : b; }                                  \
    K_INLINE T k_same_##S(T a) { return a; }                                                  \
    K_INLINE T k_not_##S(T a) { return (T)~a; }
K_INT_MINMAX(int8_t, i8) K_INT_MINMAX(int16_t, i16) K_INT_MINMAX(int32_t, i32)
K_INT_MINMAX(int64_t, i64) K_INT_MINMAX(uint8_t, u8) K_INT_MINMAX(uint16_t, u16)
K_INT_MINMAX(uint32_t, u32) K_INT_MINMAX(uint64_t, u64)
/* bool: arithmetic on 0/1 */
K_INLINE bool k_same_b(bool a) { return a; }
K_INLINE bool k_not_b(bool a) { return !a; }
K_INLINE bool k_max_b(bool a, bool b) { return a | b; }
K_INLINE bool k_min_b(bool a, bool b) { return a & b; }
K_INLINE bool k_pow_b(bool a, bool b) { return a | !b; }
K_INLINE bool k_fdiv_b(bool a, bool b) { return a & b; }
K_INLINE bool k_frem_b(bool a, bool b) { return a & !b; }

#define K_ALL(x, fn)                                                                          \
    _Generic((x), bool: fn##_b, int8_t: fn##_i8, int16_t: fn##_i16, int32_t: fn##_i32,       \
             int64_t: fn##_i64, uint8_t: fn##_u8, uint16_t: fn##_u16, uint32_t: fn##_u32,     \
             uint64_t: fn##_u64, float: fn##_f32, double: fn##_f64)
#define K_INTS(x, fn)                                                                         \
    _Generic((x), int8_t: fn##_i8, int16_t: fn##_i16, int32_t: fn##_i32, int64_t: fn##_i64,  \
             uint8_t: fn##_u8, uint16_t: fn##_u16, uint32_t: fn##_u32, uint64_t: fn##_u64)
#define K_FLOATS(x, f, d) _Generic((x), float: f, double: d)

/* identities and float forms the integer table does not cover */
K_INLINE bool k_abs_b(bool a) { return a; }
K_INLINE bool k_sign_b(bool a) { return a; }
K_INLINE float k_abs_f32(float a) { return fabsf(a); }
K_INLINE double k_abs_f64(double a) { return fabs(a); }
K_INLINE float k_pow_f32(float a, float b) { return powf(a, b); }
K_INLINE double k_pow_f64(double a, double b) { return pow(a, b); }

#define k_abs(a) K_ALL(a, k_abs)(a)
#define k_sign(a) K_ALL(a, k_sign)(a)
#define k_maximum(a, b) K_ALL(a, k_max)(a, b)
#define k_minimum(a, b) K_ALL(a, k_min)(a, b)
#define k_power(a, b) K_ALL(a, k_pow)(a, b)
#define k_floor_divide(a, b) K_ALL(a, k_fdiv)(a, b)
#define k_remainder(a, b) K_ALL(a, k_frem)(a, b)
#define k_floor(a) _Generic((a), float: floorf, double: floor, default: K_INT_ID(a))(a)
#define k_ceil(a) _Generic((a), float: ceilf, double: ceil, default: K_INT_ID(a))(a)
#define k_rint(a) _Generic((a), float: rintf, double: rint, default: K_INT_ID(a))(a)
#define K_INT_ID(a) _Generic((a), bool: k_same_b, int8_t: k_same_i8, int16_t: k_same_i16,     \
    int32_t: k_same_i32, int64_t: k_same_i64, uint8_t: k_same_u8, uint16_t: k_same_u16,      \
    uint32_t: k_same_u32, uint64_t: k_same_u64, default: k_same_b)
#define k_invert(a) _Generic((a), bool: k_not_b, int8_t: k_not_i8, int16_t: k_not_i16,          \
    int32_t: k_not_i32, int64_t: k_not_i64, uint8_t: k_not_u8, uint16_t: k_not_u16,          \
    uint32_t: k_not_u32, uint64_t: k_not_u64)(a)
#define k_left_shift(a, b) K_INTS(a, k_shl)(a, b)
#define k_right_shift(a, b) K_INTS(a, k_shr)(a, b)

/* A real function of the C math library by its double name (`k_libm(exp2, a)`): op rows
 * whose math is the library's need no helper of their own. */
#define k_libm(fn, a) K_FLOATS(a, fn##f, fn)(a)
#define k_exp(a) K_FLOATS(a, k_expf, exp)(a)
#define k_log(a) K_FLOATS(a, k_logf, log)(a)
#define k_sqrt(a) K_FLOATS(a, sqrtf, sqrt)(a)
#define k_sin(a) K_FLOATS(a, sinf, sin)(a)
#define k_cos(a) K_FLOATS(a, cosf, cos)(a)
#define k_tan(a) K_FLOATS(a, tanf, tan)(a)
#define k_tanh(a) K_FLOATS(a, k_tanhf, tanh)(a)
#define k_sigmoid(a) K_FLOATS(a, k_sigmoidf, k_sigmoid_f64)(a)
#define k_erf(a) K_FLOATS(a, k_erff, erf)(a)
#define k_erfinv(a) k_erfinv_f32(a)
#define k_rsqrt(a) K_FLOATS(a, k_rsqrt_f32, k_rsqrt_f64)(a)
#define k_expm1(a) K_FLOATS(a, k_expm1f, expm1)(a)
#define k_log1p(a) K_FLOATS(a, k_log1pf, log1p)(a)
#define k_log2(a) K_FLOATS(a, log2f, log2)(a)
#define k_log10(a) K_FLOATS(a, log10f, log10)(a)
#define k_asin(a) K_FLOATS(a, asinf, asin)(a)
#define k_acos(a) K_FLOATS(a, acosf, acos)(a)
#define k_atan(a) K_FLOATS(a, atanf, atan)(a)
#define k_sinh(a) K_FLOATS(a, sinhf, sinh)(a)
#define k_cosh(a) K_FLOATS(a, coshf, cosh)(a)
#define k_asinh(a) K_FLOATS(a, asinhf, asinh)(a)
#define k_acosh(a) K_FLOATS(a, k_acosh_f32, k_acosh_f64)(a)
#define k_atanh(a) K_FLOATS(a, atanhf, atanh)(a)
#define k_logaddexp(a, b) K_FLOATS(a, k_logaddexp_f32, k_logaddexp_f64)(a, b)
#define k_atan2(a, b) K_FLOATS(a, atan2f, atan2)(a, b)
