//! kiln's float32 math, the one definition the eager kernels (kiln-cpu `vecmath.rs`) and the
//! generated C kernels share: the constants live here, and [`c_vector_math`] writes the C
//! vector functions from them, operation for operation as `vecmath.rs` computes (same
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

/// erf(x) / x as a polynomial in t = x^2 on [0, 1] (fit error 1.2e-9).
// The constant term is fitted, not 2/sqrt(pi) rounded: it trades an ulp for a smaller error.
#[allow(clippy::approx_constant)]
pub const ERF_SMALL: [f32; 7] = [
    7.882_497_5e-5,
    -8.018_855e-4,
    5.189_312e-3,
    -2.685_432_9e-2,
    1.128_359_7e-1,
    -3.761_262_6e-1,
    1.128_379_1,
];

/// erfc(x) e^(x^2) as a polynomial in u = x - 2 on x in [1, 4] (fit error 4.4e-8 on values
/// in [0.14, 0.43]; it scales erfc <= 0.16, so erf's absolute error stays below 1e-8).
pub const ERF_TAIL: [f32; 11] = [
    1.671_801_8e-6,
    -1.474_509_5e-5,
    6.189_882e-5,
    -1.935_522_6e-4,
    5.899_943_6e-4,
    -1.823_170_8e-3,
    5.439_987_4e-3,
    -1.546_352_2e-2,
    4.180_314e-2,
    -1.067_961_9e-1,
    2.553_956_5e-1,
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
    x = {sel}x > {hi}, (kv_f32){{}} + {hi}, x);
    x = {sel}x < {lo}, (kv_f32){{}} + {lo}, x);
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
    const kv_f32 a = k_vabs_f32(x);
    const kv_f32 small = a * {erf_small};
    const kv_f32 b = {sel}a > 4.0f, (kv_f32){{}} + 4.0f, a);
    const kv_f32 big = 1.0f - k_vexp(-b * b) * {erf_tail};
    return k_vcopysign_f32({sel}a < 1.0f, small, big), x);
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
        erf_small = horner("(a * a)", &ERF_SMALL),
        erf_tail = horner("(b - 2.0f)", &ERF_TAIL),
    );
    s
}
