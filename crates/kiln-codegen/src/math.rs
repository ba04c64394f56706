//! kiln's float32 math, the one definition the eager kernels (kiln-cpu `vecmath.rs`), the
//! generated C kernels and the CUDA kernels share: the constants live here, [`c_vector_math`]
//! writes the C vector functions from them and [`cuda_math`] CUDA's tanh and erf, operation for operation as `vecmath.rs` computes (same
//! multiplies, fused multiply-adds, selects and bit operations in the same order), so a
//! compiled kernel gives the eager kernel's bits. kiln-cpu's `fused_vectors` test checks that
//! on every kernel shape and on sweeps of each function.
//!
//! Coefficients are listed highest degree first, for Horner's rule with FMA.

use std::fmt::Write;

/// ln 2 split for Cody-Waite reduction: `LN2_HI` has 16 significant bits, so `n * LN2_HI` is
/// exact for |n| < 2^8 and `x - n ln 2` loses nothing to cancellation.
pub const LN2_HI: f32 = 0.693_145_75;
pub const LN2_LO: f32 = 1.428_606_8e-6;
/// Adding 1.5 * 2^23 rounds a float of magnitude < 2^22 to an integer held in the low
/// mantissa bits.
pub const ROUND_SHIFT: f32 = 12_582_912.0;
/// exp's clamps: past them e^x rounds to inf / 0 anyway.
pub const EXP_HI: f32 = 89.0;
pub const EXP_LO: f32 = -104.0;

/// e^r for |r| <= ln2/2: Taylor series through r^7 (truncation below 5e-9 relative).
pub const EXP_TAYLOR: [f32; 8] =
    [1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0];

/// (e^x - 1) / x for |x| < 0.5: Taylor series through x^8 (truncation below 3e-9 relative).
pub const EXPM1_TAYLOR: [f32; 9] = [
    1.0 / 362_880.0,
    1.0 / 40_320.0,
    1.0 / 5040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
    1.0,
];

/// log m = 2 atanh(s) = 2 (s + s^3/3 + ... + s^9/9 + ...), s = (m-1)/(m+1), |s| <= 0.1716:
/// coefficients of s^2 .. s^8 in (atanh(s)/s - 1)/s^2 (truncation below 3e-9 relative).
pub const LOG_ATANH: [f32; 4] = [1.0 / 9.0, 1.0 / 7.0, 1.0 / 5.0, 1.0 / 3.0];

/// log1p's interval for the series on x / (2 + x).
pub const LOG1P_NEAR: (f32, f32) = (-0.29, 0.41);

/// erf(x) = x P(x^2) / Q(x^2) on |x| <= `ERF_CLAMP` (past it erf rounds to ±1), P of degree
/// 5 and Q of degree 6, a rational fitted for least relative error (2.2e-9;
/// `scripts/fit_vecmath.py`). One division and
/// eleven multiply-adds for every x, no exp: gelu_erf's kernels are compute-bound on it. In
/// float32 the rounding of the steps dominates: 5.35 ulp at most, near erf = 1 (vecmath.rs).
/// P's constant term came out as 2/sqrt(pi) rounded to float32 (erf's slope at 0).
pub const ERF_CLAMP: f32 = 3.925;
pub const ERF_P: [f32; 6] = [
    6.585_888_5e-6,
    4.056_702_3e-4,
    4.194_339_7e-3,
    5.558_09e-2,
    1.924_591_2e-1,
    std::f32::consts::FRAC_2_SQRT_PI,
];
pub const ERF_Q: [f32; 7] = [
    2.488_486e-7,
    7.109_145_4e-5,
    1.407_402_2e-3,
    1.621_254_3e-2,
    1.172_220_1e-1,
    5.038_959e-1,
    1.0,
];

/// tanh(x) / x = P(t) / Q(t) in t = x^2 for |x| <= 9: a rational fit in relative error
/// (2.2e-8); P(0) = Q(0) = 1 exactly, so tiny x gives tanh(x) = x. All coefficients are
/// positive, so Horner's rule on t >= 0 never cancels.
pub const TANH_P: [f32; 5] = [1.341_966_2e-8, 2.066_124_4e-5, 3.498_996_1e-3, 1.338_398_2e-1, 1.0];
pub const TANH_Q: [f32; 5] = [7.804_702e-7, 3.291_037_6e-4, 2.589_021e-2, 4.671_730_4e-1, 1.0];

/// A float32 as an exact C literal (shortest round-trip digits).
fn lit(v: f32) -> String {
    format!("{v:e}f")
}

/// Horner's rule in C over a vector `x` (`k_vfma`, highest degree first), as `poly`.
fn horner(x: &str, c: &[f32]) -> String {
    let mut s = format!("((kv_f32){{}} + {})", lit(c[0]));
    for &k in &c[1..] {
        s = format!("k_vfma({s}, {x}, (kv_f32){{}} + {})", lit(k));
    }
    s
}

/// The C vector functions of the float32 math: `k_vexp`, `k_vexpm1`, `k_vlog`, `k_vlog1p`,
/// `k_vtanh`, `k_vsigmoid`, `k_verf` (over `kv_f32`, after `vector.c`'s helpers).
pub fn c_vector_math() -> String {
    let mut s = String::from(
        "\n/* ---- float32 math: kiln-codegen math.rs, as kiln-cpu vecmath.rs ---- */\n",
    );
    let sel = "K_SEL(kv_i32, ";
    let _ = write!(
        s,
        r#"K_INLINE kv_f32 k_vexp(kv_f32 x) {{
    x = k_vlitmax({lo}, k_vlitmin({hi}, x));
    const kv_f32 t = k_vfma(x, (kv_f32){{}} + {log2e}, (kv_f32){{}} + {shift});
    const kv_f32 n = t - {shift};
    const kv_i32 ni = (kv_i32)((kv_u32)t - {shift_bits}u);
    kv_f32 r = k_vfma(n, (kv_f32){{}} + {mln2hi}, x);
    r = k_vfma(n, (kv_f32){{}} + {mln2lo}, r);
    const kv_f32 p = {poly};
    const kv_i32 k1 = ni >> 1, k2 = ni - k1;
    return p * (kv_f32)((kv_u32)(k1 + 127) << 23) * (kv_f32)((kv_u32)(k2 + 127) << 23);
}}
K_INLINE kv_f32 k_vexpm1(kv_f32 x) {{
    const kv_f32 small = x * {expm1};
    const kv_f32 big = k_vexp(x) - 1.0f;
    return {sel}k_vabs_f32(x) < 0.5f, small, big);
}}
K_INLINE kv_f32 k_vlog_series(kv_f32 s) {{
    const kv_f32 s2 = s + s, z = s * s;
    return k_vfma(s2, {atanh} * z, s2);
}}
K_INLINE kv_f32 k_vlog(kv_f32 x) {{
    const kv_i32 tiny = x < 1.17549435e-38f;
    const kv_f32 xs = {sel}tiny, x * 8388608.0f, x);
    const kv_i32 bits = (kv_i32)xs;
    const kv_i32 e = (kv_i32)((kv_u32)bits - 0x3f3504f3u) >> 23;
    const kv_f32 m = (kv_f32)((kv_u32)bits - ((kv_u32)e << 23));
    const kv_f32 ef = __builtin_convertvector(e, kv_f32) - {sel}tiny, (kv_f32){{}} + 23.0f, (kv_f32){{}});
    const kv_f32 log_m = k_vlog_series((m - 1.0f) / (m + 1.0f));
    kv_f32 r = k_vfma(ef, (kv_f32){{}} + {ln2hi}, k_vfma(ef, (kv_f32){{}} + {ln2lo}, log_m));
    r = {sel}x == INFINITY, x, r);
    r = {sel}x == 0.0f, (kv_f32){{}} + (-INFINITY), r);
    return {sel}(x < 0.0f) | (x != x), (kv_f32){{}} + NAN, r);
}}
K_INLINE kv_f32 k_vlog1p(kv_f32 x) {{
    const kv_f32 u = 1.0f + x;
    const kv_f32 near = k_vlog_series(x / (2.0f + x));
    const kv_f32 far = k_vlog(u) * (x / (u - 1.0f));
    kv_f32 r = {sel}(x > {near_lo}) & (x < {near_hi}), near, far);
    r = {sel}u == 1.0f, x, r);
    return {sel}u == INFINITY, u, r);
}}
K_INLINE kv_f32 k_vtanh(kv_f32 x) {{
    const kv_f32 a = k_vabs_f32(x), t = a * a;
    kv_f32 r = a * {tanh_p} / {tanh_q};
    r = {sel}(r > 1.0f) | (a > 9.0f), (kv_f32){{}} + 1.0f, r);
    return k_vcopysign_f32(r, x);
}}
K_INLINE kv_f32 k_vsigmoid(kv_f32 x) {{
    const kv_f32 t = k_vexp(-k_vabs_f32(x));
    const kv_f32 num = {sel}x < 0.0f, t, (kv_f32){{}} + 1.0f);
    return num / (1.0f + t);
}}
K_INLINE kv_f32 k_verf(kv_f32 x) {{
    const kv_f32 c = k_vlitmin({clamp}, k_vlitmax(-{clamp}, x)), z = c * c;
    const kv_f32 r = c * ({erf_p} / {erf_q});
    return k_vlitmax(-1.0f, k_vlitmin(1.0f, r));
}}
"#,
        hi = lit(EXP_HI),
        lo = lit(EXP_LO),
        log2e = lit(std::f32::consts::LOG2_E),
        shift = lit(ROUND_SHIFT),
        shift_bits = ROUND_SHIFT.to_bits(),
        mln2hi = lit(-LN2_HI),
        mln2lo = lit(-LN2_LO),
        ln2hi = lit(LN2_HI),
        ln2lo = lit(LN2_LO),
        poly = horner("r", &EXP_TAYLOR),
        expm1 = horner("x", &EXPM1_TAYLOR),
        atanh = horner("z", &LOG_ATANH),
        near_lo = lit(LOG1P_NEAR.0),
        near_hi = lit(LOG1P_NEAR.1),
        tanh_p = horner("t", &TANH_P),
        tanh_q = horner("t", &TANH_Q),
        clamp = lit(ERF_CLAMP),
        erf_p = horner("z", &ERF_P),
        erf_q = horner("z", &ERF_Q),
    );
    s
}

/// Horner's rule in CUDA C over a float `x` (`fmaf`, highest degree first).
fn horner_scalar(x: &str, c: &[f32]) -> String {
    let mut s = lit(c[0]);
    for &k in &c[1..] {
        s = format!("fmaf({s}, {x}, {})", lit(k));
    }
    s
}

/// CUDA's `k_tanh`, `k_erf` and `k_erf_unclamped`: the rationals above, step for step as the
/// CPU computes them, except that the division is CUDA's fast one (`__fdividef`, within 2 ulp;
/// on the H200 bf16 gelu_erf ran at 0.89 of the copy floor with it and 0.80 with erff).
/// exp, log and the rest stay CUDA's own (libdevice) functions.
///
/// `k_erf_unclamped` is for results rounded to a half float next (packed kernels): past the
/// input clamp the rational exceeds 1 by at most 2.4e-7, far below half an ulp of 1 in
/// float16 (2^-11), so rounding clamps it (dropping the output clamp took bf16 gelu_erf from
/// 0.83 to 0.88 of the copy floor). Selects, not fminf, keep NaN.
pub fn cuda_math() -> String {
    format!(
        r#"
/* ---- float32 math: kiln-codegen math.rs (the CPU's rationals, fast division) ---- */
K_INLINE float k_tanh(float x) {{
    const float a = fabsf(x), t = a * a;
    float r = __fdividef(a * {tanh_p}, {tanh_q});
    r = (r > 1.0f) | (a > 9.0f) ? 1.0f : r;
    return copysignf(r, x);
}}
K_INLINE float k_erf_unclamped(float x) {{
    const float lo = x < -{clamp} ? -{clamp} : x;
    const float c = lo > {clamp} ? {clamp} : lo, z = c * c;
    return c * __fdividef({erf_p}, {erf_q});
}}
K_INLINE float k_erf(float x) {{
    const float r = k_erf_unclamped(x);
    const float hi = r > 1.0f ? 1.0f : r;
    return hi < -1.0f ? -1.0f : hi;
}}
"#,
        tanh_p = horner_scalar("t", &TANH_P),
        tanh_q = horner_scalar("t", &TANH_Q),
        clamp = lit(ERF_CLAMP),
        erf_p = horner_scalar("z", &ERF_P),
        erf_q = horner_scalar("z", &ERF_Q),
    )
}
