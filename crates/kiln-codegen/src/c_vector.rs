//! The vector body of generated C kernels: each step of a fused program becomes one vector
//! of `K_LANES` values (GCC/Clang vector extensions, `vector.c`), computed with vector
//! arithmetic, comparison masks and bit-operation selects, so the kernel loop is vector code
//! by construction on any target (AVX-512, AVX2, SSE2, NEON). A step without a vector form
//! here (libm functions, integer division, 64-bit integer conversions: [`vector_form`]
//! says which) computes lane by lane with the scalar expression of `c.rs`, so every value is
//! the one the scalar kernels and the eager kernels compute.

use crate::c::{compute_type, step_expr_with};
use crate::c_type;
use kiln_base::{BinaryOp, DType, FusedOp, FusedProgram, UnaryOp};
use std::fmt::Write;

/// The vector type holding `dtype`'s computed values (half floats compute in float).
pub(crate) fn vtype(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "kv_b",
        DType::U8 => "kv_u8",
        DType::U16 => "kv_u16",
        DType::U32 => "kv_u32",
        DType::U64 => "kv_u64",
        DType::I8 => "kv_i8",
        DType::I16 => "kv_i16",
        DType::I32 => "kv_i32",
        DType::I64 => "kv_i64",
        DType::F16 | DType::BF16 | DType::F32 => "kv_f32",
        DType::F64 => "kv_f64",
        DType::C64 => unreachable!("complex steps take the scalar kernel"),
    }
}

/// Bytes of one computed lane.
fn lane_bytes(dtype: DType) -> usize {
    match dtype {
        DType::F16 | DType::BF16 => 4,
        d => d.size(),
    }
}

/// The signed integer vector type of a lane's width (comparison masks, selects).
fn mask_type(dtype: DType) -> &'static str {
    match lane_bytes(dtype) {
        1 => "kv_i8",
        2 => "kv_i16",
        4 => "kv_i32",
        _ => "kv_i64",
    }
}

/// `f32` or `f64` for the float dtypes (the vector helpers' suffix).
fn float_suffix(dtype: DType) -> Option<&'static str> {
    match dtype {
        DType::F16 | DType::BF16 | DType::F32 => Some("f32"),
        DType::F64 => Some("f64"),
        _ => None,
    }
}

fn is_int(dtype: DType) -> bool {
    !dtype.is_float() && dtype != DType::Bool && dtype != DType::C64
}

fn is_signed_int(dtype: DType) -> bool {
    matches!(dtype, DType::I8 | DType::I16 | DType::I32 | DType::I64)
}

/// A float value (f32 compute) rounded to a half dtype, as the scalar `round`.
fn round(dtype: DType, expr: String) -> String {
    match dtype {
        DType::F16 => format!("k_vround_f16({expr})"),
        DType::BF16 => format!("k_vround_bf16({expr})"),
        _ => expr,
    }
}

/// A comparison mask of lanes of `bytes` as bool lanes.
fn mask_to_bool(bytes: usize, mask: &str) -> String {
    format!("k_b_from_m{bytes}({mask})")
}

/// The splat of a scalar C expression `value` into vector type `vt` (every lane initialised:
/// exact, -0.0 and NaN payloads included).
pub(crate) fn splat(vt: &str, value: &str) -> String {
    format!("(({vt}){{K_REP({value})}})")
}

/// The widest computed lane of `program` in bytes (half floats compute in float, bool is a
/// byte): the kernel's `K_LANE_BYTES`.
pub(crate) fn lane_bytes_of(program: &FusedProgram) -> usize {
    program
        .inputs
        .iter()
        .chain(program.steps.iter().map(|s| &s.dtype))
        .map(|&d| lane_bytes(d))
        .max()
        .unwrap_or(4)
}

/// The shuffle helpers for every lane count a kernel can have (`#if K_LANES == n`): `K_REP`,
/// `k_nr_<w>_<s>` (narrowing) and `k_wd_<s>_<w>` (widening with zeros) between unsigned
/// lanes of 8, 16, 32 and 64 bits. Pairs whose byte shuffle would not fit (never used by a
/// kernel: a lane never exceeds the kernel's `K_LANE_BYTES`) get a plain lane loop.
pub(crate) fn lane_helpers() -> String {
    let mut s = String::new();
    let ut = |b: usize| ["uint8_t", "uint16_t", "", "uint32_t", "", "", "", "uint64_t"][b - 1];
    for (n_i, n) in [2usize, 4, 8, 16, 32, 64].into_iter().enumerate() {
        let _ = writeln!(s, "#{} K_LANES == {n}", if n_i == 0 { "if" } else { "elif" });
        let rep: Vec<&str> = vec!["(x)"; n];
        let _ = writeln!(s, "#define K_REP(x) {}", rep.join(", "));
        for (sb, wb) in [(1, 2), (1, 4), (1, 8), (2, 4), (2, 8), (4, 8)] {
            let (sv, wv) = (unsigned_type(sb), unsigned_type(wb));
            let (sbits, wbits) = (8 * sb, 8 * wb);
            let r = wb / sb;
            // elements of the narrow type in one wide vector
            let m = n * r;
            let fits = m * 2 <= 1usize << (8 * sb).min(16) && n * wb <= 64;
            if !fits {
                let _ = writeln!(
                    s,
                    "K_INLINE {sv} k_nr_{wbits}_{sbits}({wv} v) {{ {sv} r; for (int l = 0; l < K_LANES; ++l) r[l] = ({})v[l]; return r; }}",
                    ut(sb)
                );
                let _ = writeln!(
                    s,
                    "K_INLINE {wv} k_wd_{sbits}_{wbits}({sv} v) {{ {wv} r; for (int l = 0; l < K_LANES; ++l) r[l] = v[l]; return r; }}"
                );
                continue;
            }
            let narrow: Vec<String> =
                (0..m).map(|j| if j < n { (j * r).to_string() } else { "0".into() }).collect();
            let widen: Vec<String> = (0..m)
                .map(|j| if j % r == 0 { (j / r).to_string() } else { m.to_string() })
                .collect();
            let e = ut(sb);
            let _ = writeln!(
                s,
                "K_INLINE {sv} k_nr_{wbits}_{sbits}({wv} v) {{\n    typedef {e} k_w __attribute__((vector_size(sizeof({wv}))));\n#if defined(__clang__)\n    const k_w t = __builtin_shufflevector((k_w)v, (k_w)v, {nl});\n#else\n    const k_w idx = {{{nl}}};\n    const k_w t = __builtin_shuffle((k_w)v, idx);\n#endif\n    {sv} r; memcpy(&r, &t, sizeof r); return r;\n}}",
                nl = narrow.join(", ")
            );
            let _ = writeln!(
                s,
                "K_INLINE {wv} k_wd_{sbits}_{wbits}({sv} v) {{\n    typedef {e} k_w __attribute__((vector_size(sizeof({wv}))));\n    k_w b; memset(&b, 0, sizeof b); memcpy(&b, &v, sizeof v);\n#if defined(__clang__)\n    const k_w t = __builtin_shufflevector(b, (k_w){{}}, {wl});\n#else\n    const k_w idx = {{{wl}}};\n    const k_w t = __builtin_shuffle(b, (k_w){{}}, idx);\n#endif\n    {wv} r; memcpy(&r, &t, sizeof r); return r;\n}}",
                wl = widen.join(", ")
            );
        }
    }
    s.push_str(
        "#else
#error \"unsupported K_LANES\"
#endif
",
    );
    s
}

/// Narrows (modulo) integer lanes of `from_bytes` to `to_bytes`; `v` has the unsigned type.
fn narrow(from_bytes: usize, to_bytes: usize, v: &str) -> String {
    format!("k_nr_{}_{}({v})", 8 * from_bytes, 8 * to_bytes)
}

fn unsigned_type(bytes: usize) -> &'static str {
    match bytes {
        1 => "kv_u8",
        2 => "kv_u16",
        4 => "kv_u32",
        _ => "kv_u64",
    }
}

/// Integer (or bool) lanes of `from` converted to the integer type `to`, as C converts.
fn int_to_int(from: DType, to: DType, v: &str) -> String {
    let (fb, tb) = (from.size(), to.size());
    let to_vt = vtype(to);
    if tb > fb {
        // Zero-extend; sign-extend a signed source with a shift pair.
        let wide = format!("k_wd_{}_{}(({})({v}))", 8 * fb, 8 * tb, unsigned_type(fb));
        let shift = 8 * (tb - fb);
        if is_signed_int(from) {
            let st = mask_type(to);
            format!("(({to_vt})((({st})({wide}) << {shift}) >> {shift}))")
        } else {
            format!("(({to_vt})({wide}))")
        }
    } else if tb == fb && from == to {
        v.to_string()
    } else if tb == fb {
        format!("(({to_vt})({v}))")
    } else {
        format!("(({to_vt}){})", narrow(fb, tb, &format!("(({})({v}))", unsigned_type(fb))))
    }
}

/// The vector expression of step `i`, or `None` when it computes lane by lane.
pub(crate) fn vector_form(program: &FusedProgram, i: usize) -> Option<String> {
    let step = &program.steps[i];
    let d = step.dtype;
    let t = |k: usize| format!("t{k}");
    let dt = |k: usize| program.steps[k].dtype;
    Some(match &step.op {
        FusedOp::Input(_) | FusedOp::Literal(_) => unreachable!("inputs and literals are loads"),
        FusedOp::Unary(op, a) => {
            if dt(*a) != d && *op != UnaryOp::LogicalNot {
                return None;
            }
            let x = t(*a);
            let f = float_suffix(d);
            let vt = vtype(d);
            let e = match (op, f) {
                (UnaryOp::Negative, _) if d != DType::Bool => format!("(-{x})"),
                (UnaryOp::Abs, Some(f)) => format!("k_vabs_{f}({x})"),
                (UnaryOp::Abs, None) if is_signed_int(d) => {
                    format!("K_SEL({}, {x} < 0, -{x}, {x})", mask_type(d))
                }
                (UnaryOp::Abs, None) => x,
                (UnaryOp::Exp, Some("f32")) => format!("k_vexp({x})"),
                (UnaryOp::Expm1, Some("f32")) => format!("k_vexpm1({x})"),
                (UnaryOp::Log, Some("f32")) => format!("k_vlog({x})"),
                (UnaryOp::Log1p, Some("f32")) => format!("k_vlog1p({x})"),
                (UnaryOp::Tanh, Some("f32")) => format!("k_vtanh({x})"),
                (UnaryOp::Sigmoid, Some("f32")) => format!("k_vsigmoid({x})"),
                (UnaryOp::Erf, Some("f32")) => format!("k_verf({x})"),
                (UnaryOp::Sqrt, Some(f)) => format!("k_vsqrt_{f}({x})"),
                (UnaryOp::Rsqrt, Some(f)) => format!("({} / k_vsqrt_{f}({x}))", splat(vt, "1")),
                (UnaryOp::Sign, Some(f)) => format!("k_vsign_{f}({x})"),
                (UnaryOp::Sign, None) if is_signed_int(d) => {
                    format!("(({vt})({x} < 0) - ({vt})({x} > 0))")
                }
                (UnaryOp::Sign, None) if is_int(d) => format!("(({vt})(-({x} != 0)))"),
                (UnaryOp::Sign, None) => x,
                (UnaryOp::Floor, Some(f)) => format!("k_vfloor_{f}({x})"),
                (UnaryOp::Ceil, Some(f)) => format!("k_vceil_{f}({x})"),
                (UnaryOp::Round, Some(f)) => format!("k_vrint_{f}({x})"),
                (UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round, None) => x,
                (UnaryOp::LogicalNot, _) if d == DType::Bool && dt(*a) == DType::Bool => {
                    format!("({x} ^ 1)")
                }
                (UnaryOp::BitwiseInvert, None) if d == DType::Bool => format!("({x} ^ 1)"),
                (UnaryOp::BitwiseInvert, None) => format!("(~{x})"),
                _ => return None,
            };
            round(d, e)
        }
        FusedOp::Binary(op, a, b) => {
            let o = dt(*a);
            if dt(*b) != o {
                return None;
            }
            let (x, y) = (t(*a), t(*b));
            let f = float_suffix(o);
            let cmp = |sym: &str| mask_to_bool(lane_bytes(o), &format!("({x} {sym} {y})"));
            if op.facts().bool_output {
                if d != DType::Bool {
                    return None;
                }
                return Some(match op {
                    BinaryOp::Equal => cmp("=="),
                    BinaryOp::NotEqual => cmp("!="),
                    BinaryOp::Less => cmp("<"),
                    BinaryOp::LessEqual => cmp("<="),
                    BinaryOp::Greater => cmp(">"),
                    BinaryOp::GreaterEqual => cmp(">="),
                    BinaryOp::LogicalAnd if o == DType::Bool => format!("({x} & {y})"),
                    BinaryOp::LogicalOr if o == DType::Bool => format!("({x} | {y})"),
                    _ => return None,
                });
            }
            if o != d {
                return None;
            }
            let arith = |sym: &str| {
                if d == DType::Bool {
                    // C's bool conversion of the int result: nonzero is true.
                    mask_to_bool(1, &format!("(({x} {sym} {y}) != 0)"))
                } else {
                    format!("({x} {sym} {y})")
                }
            };
            let e = match (op, f) {
                (BinaryOp::Add, _) => arith("+"),
                (BinaryOp::Subtract, _) => arith("-"),
                (BinaryOp::Multiply, _) => arith("*"),
                // By other literals the division instruction (Markstein's multiply and
                // correction was slower on AVX2 and AVX-512: docs/compile.md).
                (BinaryOp::Divide, Some("f32")) => crate::c::divide_by_power_of_two(program, i, &x)
                    .unwrap_or_else(|| format!("({x} / {y})")),
                (BinaryOp::Divide, Some(_)) => format!("({x} / {y})"),
                (BinaryOp::Maximum, Some(f)) => format!("k_vmax_{f}({x}, {y})"),
                (BinaryOp::Minimum, Some(f)) => format!("k_vmin_{f}({x}, {y})"),
                (BinaryOp::Maximum, None) if d == DType::Bool => format!("({x} | {y})"),
                (BinaryOp::Minimum, None) if d == DType::Bool => format!("({x} & {y})"),
                (BinaryOp::Maximum, None) => {
                    format!("K_SEL({}, {x} > {y}, {x}, {y})", mask_type(d))
                }
                (BinaryOp::Minimum, None) => {
                    format!("K_SEL({}, {x} < {y}, {x}, {y})", mask_type(d))
                }
                (BinaryOp::FloorDivide, Some(f)) => format!("k_vfloor_{f}({x} / {y})"),
                (BinaryOp::FloorDivide, None) if d == DType::Bool => format!("({x} & {y})"),
                (BinaryOp::BitwiseAnd, None) => format!("({x} & {y})"),
                (BinaryOp::BitwiseOr, None) => format!("({x} | {y})"),
                (BinaryOp::BitwiseXor, None) => format!("({x} ^ {y})"),
                _ => return None,
            };
            round(d, e)
        }
        FusedOp::Where(c, a, b) => {
            if dt(*c) != DType::Bool || dt(*a) != d || dt(*b) != d {
                return None;
            }
            let bytes = lane_bytes(d);
            format!("K_SEL({}, k_m{bytes}_from_b(t{c}), t{a}, t{b})", mask_type(d))
        }
        FusedOp::AsType(a) => return convert(dt(*a), d, &t(*a)),
    })
}

/// `v` (computed values of `from`) converted to `to` with eager's rules (the scalar `convert`
/// in c.rs), or `None` where only the lane-by-lane form has them.
fn convert(from: DType, to: DType, v: &str) -> Option<String> {
    let wide_int = |d: DType| matches!(d, DType::I64 | DType::U64);
    Some(match (from, to) {
        (f, t) if f == t => v.to_string(),
        (DType::C64, _) | (_, DType::C64) => return None,
        (f, DType::Bool) => mask_to_bool(lane_bytes(f), &format!("({v} != 0)")),
        // Bool lanes are 0 / 1 bytes: as uint8.
        (DType::Bool, t) => return convert(DType::U8, t, v),
        (f, t) if !f.is_float() && !t.is_float() => int_to_int(f, t, v),
        // Integers to floats: through int32 (exact) for the narrow types.
        (f, t) if !f.is_float() => {
            let fl = match f {
                DType::U32 => match t {
                    DType::F64 => return Some(format!("k_vu32_to_f64({v})")),
                    _ => format!("k_vu32_to_f32({v})"),
                },
                f if wide_int(f) => return None,
                DType::I32 => format!("__builtin_convertvector({v}, {})", vtype(t)),
                _ => format!(
                    "__builtin_convertvector({}, {})",
                    int_to_int(f, DType::I32, v),
                    vtype(t)
                ),
            };
            round(t, fl)
        }
        // Floats to integers: x86's cvtt through int32, then modulo to narrow types.
        (f, t) if !t.is_float() => {
            if matches!(t, DType::U32) || wide_int(t) {
                return None;
            }
            let i32v = format!("k_vf2i32_{}({v})", float_suffix(f)?);
            int_to_int(DType::I32, t, &i32v)
        }
        // f64 to a half type rounds once, straight from double: lane by lane.
        (DType::F64, DType::F16 | DType::BF16) => return None,
        (DType::F64, _) => format!("__builtin_convertvector({v}, kv_f32)"),
        (_, DType::F64) => format!("__builtin_convertvector({v}, kv_f64)"),
        // Between float32 and the half types: the float value, rounded.
        (_, t) => round(t, v.to_string()),
    })
}

/// The vector body: every step as a vector local (inputs through `input(k)`, a vector
/// expression), then each output stored through `store(k, value)`.
pub(crate) fn vector_body(
    program: &FusedProgram,
    input: &dyn Fn(usize) -> String,
    store: &dyn Fn(usize, (String, &'static str)) -> String,
    indent: &str,
) -> String {
    let mut s = String::new();
    for (i, step) in program.steps.iter().enumerate() {
        let vt = vtype(step.dtype);
        match &step.op {
            FusedOp::Input(k) => {
                let _ = writeln!(s, "{indent}const {vt} t{i} = {};", input(*k));
            }
            FusedOp::Literal(_) => {
                let value = step_expr_with(program, i, &|_| unreachable!(), &|_| unreachable!());
                let _ = writeln!(s, "{indent}const {vt} t{i} = {};", splat(vt, &value));
            }
            _ => match vector_form(program, i) {
                Some(e) => {
                    let _ = writeln!(s, "{indent}const {vt} t{i} = {e};");
                }
                None => {
                    // Lane by lane: the scalar expression on each lane's values.
                    // Bool operands as uint8_t (0 / 1: the helpers give the bool results):
                    // gcc 12 for aarch64 vectorises `bool` lane expressions into all-ones lanes.
                    let lane = |k: usize| match program.steps[k].dtype {
                        DType::Bool => format!("((uint8_t)t{k}[l])"),
                        d => format!("(({})t{k}[l])", compute_type(d)),
                    };
                    let e = step_expr_with(program, i, &|_| unreachable!(), &lane);
                    let _ = writeln!(s, "{indent}{vt} t{i};");
                    if step.dtype == DType::Bool {
                        // gcc 12 for aarch64 vectorises such bool lanes into all-ones bytes
                        // and drops a `& 1` it thinks redundant: the empty asm hides the
                        // value, so the mask stays (and the loop stays scalar: rare ops).
                        let _ = writeln!(
                            s,
                            "{indent}for (int l = 0; l < K_LANES; ++l) {{ uint8_t v = (uint8_t)({e}); __asm__(\"\" : \"+r\"(v)); t{i}[l] = v & 1; }} /* lane by lane */"
                        );
                    } else {
                        let _ = writeln!(
                            s,
                            "{indent}for (int l = 0; l < K_LANES; ++l) t{i}[l] = ({})({e}); /* lane by lane */",
                            lane_ctype(step.dtype)
                        );
                    }
                }
            },
        }
    }
    for (k, &step) in program.outputs.iter().enumerate() {
        let dtype = program.steps[step].dtype;
        let _ = writeln!(s, "{indent}{};", store(k, vstore_value(dtype, &format!("t{step}"))));
    }
    s
}

/// The element type of one vector lane of `dtype`'s computed values.
fn lane_ctype(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "uint8_t",
        d => compute_type(d),
    }
}

/// A vector of stored elements of `dtype` read from `ptr` (as computed values).
pub(crate) fn vload(dtype: DType, ptr: &str) -> String {
    match dtype {
        DType::F16 => format!("k_vf16_to_f32(k_ld_u16({ptr}))"),
        DType::BF16 => format!("k_vbf16_to_f32(k_ld_u16({ptr}))"),
        d => format!("k_ld_{}({ptr})", &vtype(d)[3..]),
    }
}

/// The stored form of computed values `v` of `dtype`, and the store helper's suffix.
pub(crate) fn vstore_value(dtype: DType, v: &str) -> (String, &'static str) {
    match dtype {
        DType::F16 => (format!("k_vf32_to_f16({v})"), "u16"),
        DType::BF16 => (format!("k_vf32_to_bf16({v})"), "u16"),
        d => (v.to_string(), &vtype(d)[3..]),
    }
}

/// `store(k, value)` for a pointer expression: `k_st_<suffix>(ptr, value)`.
pub(crate) fn vstore(ptr: &str, value: (String, &'static str)) -> String {
    format!("k_st_{}({ptr}, {})", value.1, value.0)
}

/// A scalar input read once (element 0) and splat, converted as a vector load would.
pub(crate) fn vsplat_input(dtype: DType, ptr: &str) -> String {
    match dtype {
        DType::F16 => format!("k_vf16_to_f32({})", splat("kv_u16", &format!("{ptr}[0]"))),
        DType::BF16 => format!("k_vbf16_to_f32({})", splat("kv_u16", &format!("{ptr}[0]"))),
        DType::Bool => splat("kv_b", &format!("(uint8_t){ptr}[0]")),
        d => splat(vtype(d), &format!("{ptr}[0]")),
    }
}

/// The C element type stored for `dtype` (staging buffers).
pub(crate) fn storage(dtype: DType) -> &'static str {
    c_type(dtype)
}
