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
K_INLINE float k_exp(float x) { return expf(x); }
K_INLINE float k_log(float x) { return logf(x); }
K_INLINE float k_sqrt(float x) { return sqrtf(x); }
K_INLINE float k_sin(float x) { return sinf(x); }
K_INLINE float k_cos(float x) { return cosf(x); }
K_INLINE float k_tan(float x) { return tanf(x); }
K_INLINE float k_tanh(float x) { return tanhf(x); }
K_INLINE float k_erf(float x) { return erff(x); }
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
