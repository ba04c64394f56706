//! The paired body of the contiguous CUDA kernel for programs with float16 / bfloat16 steps.
//!
//! Eager semantics round every half-precision node to its dtype; computed per element that
//! costs a float op, a conversion and a shift per node. Here each thread takes its vector of
//! elements two at a time (`u` runs over pairs; element `2u` in the low half of a register):
//! - a half step's value lives packed (`p{i}`: two half values in one `uint32_t`);
//! - `+ - *` of two half values (and `/` by a power of two, which is `*` by its exact
//!   reciprocal) is one native bf16x2 / f16x2 instruction: float has at least 2p+2 bits for
//!   both half types, so rounding the float result once more to half (what eager does) equals
//!   the correctly rounded half result (double rounding is innocuous for + - * /);
//! - negate / abs are sign-bit masks, max / min / where select each half's bits;
//! - any other half op unpacks its operands to floats (`t{i}_0`, `t{i}_1`), computes the
//!   same expression as the per-element kernel and rounds both results with one
//!   `cvt.rn.{bf16,f16}x2.f32`;
//! - every other dtype computes as two lanes of the per-element expression.
//!
//! Float forms of half values are made only where a consumer needs them. The scalar tail and
//! the strided variant stay per element; the result is bit-identical to them (NaN payloads
//! aside), which the GPU tests check against `KILN_CUDA_PACKED=0`.

use crate::c::{step_expr, InputKind};
use crate::{binary_expr, c_type, unary_expr};
use kiln_base::{BinaryOp, DType, FusedOp, FusedProgram, Scalar, UnaryOp};
use std::fmt::Write;

fn is_half(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::BF16)
}

/// Whether the contiguous kernel of `program` with `vector` elements per thread gets the
/// paired body: pairs must tile the vector, some step must be half precision, and no step is
/// float64 (float64 -> half rounds once from double, which the float pair form would not).
pub fn packs(program: &FusedProgram, vector: usize) -> bool {
    vector >= 2
        && vector.is_multiple_of(2)
        && program.steps.iter().any(|s| is_half(s.dtype))
        && program.steps.iter().all(|s| s.dtype != DType::F64)
}

/// The preamble helpers' type tag (`k_add_bf16x2`).
fn tag(dtype: DType) -> &'static str {
    if dtype == DType::F16 {
        "f16"
    } else {
        "bf16"
    }
}

/// The half value of `v` as the packed literal of two copies (`0x3f003f00u`).
fn packed_literal(v: Scalar, dtype: DType) -> String {
    let bits = half_bits(v.as_f64(), dtype);
    format!("0x{bits:04x}{bits:04x}u")
}

fn half_bits(v: f64, dtype: DType) -> u16 {
    if dtype == DType::F16 {
        half::f16::from_f64(v).to_bits()
    } else {
        half::bf16::from_f64(v).to_bits()
    }
}

/// `1 / v` as half bits where multiplying by it is exactly dividing by `v` in every rounding:
/// `v` a power of two whose reciprocal is a normal half value.
fn exact_reciprocal(v: Scalar, dtype: DType) -> Option<u16> {
    let x = v.as_f64();
    let mantissa = x.to_bits() & ((1u64 << 52) - 1);
    if !x.is_normal() || mantissa != 0 {
        return None;
    }
    let r = 1.0 / x;
    let bits = half_bits(r, dtype);
    let (back, normal) = if dtype == DType::F16 {
        let h = half::f16::from_bits(bits);
        (h.to_f64(), h.is_normal())
    } else {
        let h = half::bf16::from_bits(bits);
        (h.to_f64(), h.is_normal())
    };
    (back == r && normal).then_some(bits)
}

/// `RN(1 / c)` for the bfloat16 value `c` of a divisor literal, where multiplying a bfloat16
/// by it in float and rounding to bfloat16 gives exactly the rounded quotient (a multiply in
/// place of a correctly rounded float division, about 15 instructions). Why it is exact:
/// both operands have 8-bit significands, so the quotient is never a bfloat16 rounding
/// midpoint and, when inexact, lies at least 2^-17 (relative) from one, while `x * RN(1/c)`
/// is within 2^-23 of it. float16's 11-bit significands leave no such margin: it divides.
fn bf16_reciprocal(v: Scalar) -> Option<f32> {
    let c = half::bf16::from_bits(half_bits(v.as_f64(), DType::BF16)).to_f32();
    let r = (1.0 / c as f64) as f32;
    (c.is_normal() && r.is_normal()).then_some(r)
}

/// The reciprocal a bfloat16 step `i` divides by, when it is a division by a literal that
/// `bf16_reciprocal` covers (and not a power of two, which `rule` packs).
fn divisor_reciprocal(program: &FusedProgram, i: usize) -> Option<f32> {
    let step = &program.steps[i];
    match step.op {
        FusedOp::Binary(BinaryOp::Divide, a, b) if step.dtype == DType::BF16 => {
            match program.steps[b].op {
                FusedOp::Literal(v)
                    if program.steps[a].dtype == DType::BF16
                        && program.steps[b].dtype == DType::BF16
                        && exact_reciprocal(v, DType::BF16).is_none() =>
                {
                    bf16_reciprocal(v)
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// Whether step `k` is a literal whose half bits are `bits`.
fn is_literal_bits(program: &FusedProgram, k: usize, bits: u16) -> bool {
    let step = &program.steps[k];
    matches!(step.op, FusedOp::Literal(v) if half_bits(v.as_f64(), step.dtype) == bits)
}

/// How a step's value is made.
enum Rule {
    /// A half step computed packed: the expression, the steps whose packed forms it reads
    /// and those whose float forms it reads (where's condition).
    Packed { expr: String, packed: Vec<usize>, float: Vec<usize> },
    /// Computed per lane from the operands' float forms (rounded once per pair if half).
    Lanes,
    /// A half input or literal: both forms are free.
    Leaf,
}

fn packed(expr: String, packed: Vec<usize>) -> Rule {
    Rule::Packed { expr, packed, float: vec![] }
}

fn rule(program: &FusedProgram, i: usize) -> Rule {
    let step = &program.steps[i];
    let d = step.dtype;
    if !is_half(d) {
        return Rule::Lanes;
    }
    let same = |k: usize| program.steps[k].dtype == d;
    let h = tag(d);
    match &step.op {
        FusedOp::Input(_) | FusedOp::Literal(_) => Rule::Leaf,
        FusedOp::Binary(op, a, b) if same(*a) && same(*b) => {
            let (a, b) = (*a, *b);
            let both = |name: &str| packed(format!("k_{name}_{h}x2(p{a}, p{b})"), vec![a, b]);
            match op {
                BinaryOp::Add => both("add"),
                BinaryOp::Subtract => both("sub"),
                BinaryOp::Multiply => both("mul"),
                // max(x, +0.0): bit operations only (NaN and -0.0 as k_maximum).
                BinaryOp::Maximum if is_literal_bits(program, b, 0) => {
                    packed(format!("k_relu_{h}x2(p{a})"), vec![a])
                }
                BinaryOp::Maximum => both("maximum"),
                BinaryOp::Minimum => both("minimum"),
                BinaryOp::Divide => match program.steps[b].op {
                    FusedOp::Literal(v) => match exact_reciprocal(v, d) {
                        Some(r) => packed(format!("k_mul_{h}x2(p{a}, 0x{r:04x}{r:04x}u)"), vec![a]),
                        None => Rule::Lanes,
                    },
                    _ => Rule::Lanes,
                },
                _ => Rule::Lanes,
            }
        }
        // Exact on the bits: the sign flipped or cleared in both halves.
        FusedOp::Unary(UnaryOp::Negative, a) if same(*a) => {
            packed(format!("(p{a} ^ 0x80008000u)"), vec![*a])
        }
        FusedOp::Unary(UnaryOp::Abs, a) if same(*a) => {
            packed(format!("(p{a} & 0x7fff7fffu)"), vec![*a])
        }
        FusedOp::Where(c, a, b) if same(*a) && same(*b) => Rule::Packed {
            expr: format!("k_pick_h2(t{c}_0, t{c}_1, p{a}, p{b})"),
            packed: vec![*a, *b],
            float: vec![*c],
        },
        FusedOp::AsType(a) if same(*a) => packed(format!("p{a}"), vec![*a]),
        _ => Rule::Lanes,
    }
}

/// The steps whose packed form (`.0`) or float form (`.1`) step `i` reads.
fn operands(program: &FusedProgram, i: usize) -> (Vec<usize>, Vec<usize>) {
    match rule(program, i) {
        Rule::Packed { packed, float, .. } => (packed, float),
        Rule::Leaf => (vec![], vec![]),
        Rule::Lanes => {
            let all = match program.steps[i].op {
                FusedOp::Input(_) | FusedOp::Literal(_) => vec![],
                FusedOp::Unary(_, a) | FusedOp::AsType(a) => vec![a],
                FusedOp::Binary(_, a, b) => vec![a, b],
                FusedOp::Where(c, a, b) => vec![c, a, b],
            };
            (vec![], all)
        }
    }
}

/// `expr` with each local `t{k}` (a whole token) renamed to `t{k}_{lane}`.
fn lane_locals(expr: &str, lane: usize) -> String {
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let b = expr.as_bytes();
    let mut out = String::with_capacity(expr.len() + 8);
    let mut i = 0;
    while i < b.len() {
        if b[i] == b't' && (i == 0 || !ident(b[i - 1])) {
            let mut j = i + 1;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            if j > i + 1 && (j == b.len() || !ident(b[j])) {
                let _ = write!(out, "{}_{lane}", &expr[i..j]);
                i = j;
                continue;
            }
        }
        out.push(b[i] as char);
        i += 1;
    }
    out
}

/// Broadcast (scalar) half inputs read packed: `sp{k}` from `element(k)`, declared before the
/// loop (contiguous kernels) or per vector (`Rows`).
pub(crate) fn scalar_prelude(
    program: &FusedProgram,
    kinds: &[InputKind],
    element: &dyn Fn(usize) -> String,
    indent: &str,
) -> String {
    let (need_packed, _) = needs(program);
    let mut s = String::new();
    for (i, step) in program.steps.iter().enumerate() {
        if let FusedOp::Input(k) = step.op {
            if is_half(step.dtype) && need_packed[i] && kinds.get(k) == Some(&InputKind::Scalar) {
                let _ = writeln!(
                    s,
                    "{indent}const uint32_t sp{k} = (uint32_t){} * 0x10001u;",
                    element(k)
                );
            }
        }
    }
    s
}

/// Which steps' packed and float forms are read (by consumers or as outputs).
fn needs(program: &FusedProgram) -> (Vec<bool>, Vec<bool>) {
    let n = program.steps.len();
    let (mut packed, mut float) = (vec![false; n], vec![false; n]);
    for i in 0..n {
        let (p, f) = operands(program, i);
        p.into_iter().for_each(|k| packed[k] = true);
        f.into_iter().for_each(|k| float[k] = true);
    }
    for &o in &program.outputs {
        if is_half(program.steps[o].dtype) {
            packed[o] = true;
        } else {
            float[o] = true;
        }
    }
    (packed, float)
}

/// The type one access of `v` elements of `d` moves in a paired kernel: half data as uint32_t
/// pairs (the same bytes and alignment as `v` uint16_t).
pub(crate) fn access_type(d: DType, v: usize) -> String {
    if is_half(d) {
        format!("KVec<uint32_t, {}>", v / 2)
    } else {
        format!("KVec<{}, {v}>", c_type(d))
    }
}

/// The full-vector part of the contiguous kernel (`base + v <= n`): loads, the paired
/// body over `v / 2` pairs, stores. `indent` is the `if`'s body indentation.
pub(crate) fn paired_vector(
    s: &mut String,
    program: &FusedProgram,
    kinds: &[InputKind],
    v: usize,
    src: &dyn Fn(usize) -> String,
    indent: &str,
) {
    let pairs = v / 2;
    let scalar = |k: usize| kinds.get(k) == Some(&InputKind::Scalar);
    let vec_type = |d: DType| access_type(d, v);
    for (k, &d) in program.inputs.iter().enumerate() {
        if !scalar(k) {
            let ty = vec_type(d);
            let _ = writeln!(s, "{indent}const {ty} v{k} = *(const {ty} *)({});", src(k));
        }
    }
    for (k, d) in program.output_dtypes().into_iter().enumerate() {
        let _ = writeln!(s, "{indent}{} r{k};", vec_type(d));
    }
    let _ = writeln!(s, "#pragma unroll\n{indent}for (int u = 0; u < {pairs}; ++u) {{");
    let ind = format!("{indent}    ");
    let (need_packed, need_float) = needs(program);
    for i in 0..program.steps.len() {
        let step = &program.steps[i];
        let d = step.dtype;
        let ct = crate::c::compute_type(d);
        let lane_value = |lane: usize| -> String {
            match &step.op {
                FusedOp::Input(k) if scalar(*k) => format!("s{k}"),
                FusedOp::Input(k) if is_half(d) => {
                    format!("k_{}x2_{}(v{k}.v[u])", tag(d), ["lo", "hi"][lane])
                }
                FusedOp::Input(k) => format!("v{k}.v[2 * u + {lane}]"),
                _ => lane_locals(&step_expr(program, i, &|k| format!("in{k}")), lane),
            }
        };
        match rule(program, i) {
            Rule::Leaf => {
                if need_packed[i] {
                    let p = match step.op {
                        FusedOp::Input(k) if scalar(k) => format!("sp{k}"),
                        FusedOp::Input(k) => format!("v{k}.v[u]"),
                        FusedOp::Literal(v) => packed_literal(v, d),
                        _ => unreachable!("leaves are inputs and literals"),
                    };
                    let _ = writeln!(s, "{ind}const uint32_t p{i} = {p};");
                }
                if need_float[i] {
                    for lane in 0..2 {
                        let _ = writeln!(s, "{ind}const float t{i}_{lane} = {};", lane_value(lane));
                    }
                }
                continue;
            }
            Rule::Packed { expr, .. } => {
                let _ = writeln!(s, "{ind}const uint32_t p{i} = {expr};");
            }
            Rule::Lanes if is_half(d) => {
                let lane = |l: usize| half_lane_expr(program, i, l);
                let _ = writeln!(
                    s,
                    "{ind}const uint32_t p{i} = k_{}x2_pack((float)({}), (float)({}));",
                    tag(d),
                    lane(0),
                    lane(1)
                );
            }
            Rule::Lanes => {
                for lane in 0..2 {
                    let _ = writeln!(s, "{ind}const {ct} t{i}_{lane} = {};", lane_value(lane));
                }
                continue;
            }
        }
        // A computed half value read as floats: unpacked once.
        if need_float[i] {
            let h = tag(d);
            let _ = writeln!(s, "{ind}const float t{i}_0 = k_{h}x2_lo(p{i});");
            let _ = writeln!(s, "{ind}const float t{i}_1 = k_{h}x2_hi(p{i});");
        }
    }
    for (k, &o) in program.outputs.iter().enumerate() {
        if is_half(program.steps[o].dtype) {
            let _ = writeln!(s, "{ind}r{k}.v[u] = p{o};");
        } else {
            for lane in 0..2 {
                let _ = writeln!(s, "{ind}r{k}.v[2 * u + {lane}] = t{o}_{lane};");
            }
        }
    }
    let _ = writeln!(s, "{indent}}}");
    for (k, d) in program.output_dtypes().into_iter().enumerate() {
        let ty = vec_type(d);
        let _ = writeln!(s, "{indent}*({ty} *)(out{k} + base) = r{k};");
    }
}

/// The unrounded float value of half step `i` in `lane`: the per-element kernel's expression
/// before its rounding (c.rs `round`), on the operands' float forms.
fn half_lane_expr(program: &FusedProgram, i: usize, lane: usize) -> String {
    let t = |k: usize| format!("t{k}_{lane}");
    match &program.steps[i].op {
        // Rounded to a half float next: the clamp of erf to [-1, 1] is not needed.
        FusedOp::Unary(UnaryOp::Erf, a) => format!("k_erf_unclamped({})", t(*a)),
        FusedOp::Unary(op, a) => unary_expr(*op, &t(*a)),
        FusedOp::Binary(op, a, b) => match divisor_reciprocal(program, i) {
            Some(r) => format!("({} * __int_as_float(0x{:08x}))", t(*a), r.to_bits()),
            None => crate::c::divide_by_literal(program, i, &t(*a), &t(*b))
                .unwrap_or_else(|| binary_expr(*op, &t(*a), &t(*b))),
        },
        FusedOp::Where(c, a, b) => format!("({} ? {} : {})", t(*c), t(*a), t(*b)),
        // c.rs `convert`: complex64 reaches a half type through its real part as a float,
        // every other dtype but float64 (excluded by `packs`) through float.
        FusedOp::AsType(a) if program.steps[*a].dtype == DType::C64 => format!("({}).re", t(*a)),
        FusedOp::AsType(a) => t(*a),
        FusedOp::Input(_) | FusedOp::Literal(_) => unreachable!("leaves have Rule::Leaf"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_locals_renames_whole_tokens_only() {
        assert_eq!(
            lane_locals("(int32_t)(k_tanh((t12)) + t3 * tt4 + t5x + true)", 1),
            "(int32_t)(k_tanh((t12_1)) + t3_1 * tt4 + t5x + true)"
        );
        assert_eq!(lane_locals("t0", 0), "t0_0");
    }

    /// `bf16_reciprocal`'s claim, checked: every bfloat16 numerator (all 65536 bit patterns)
    /// times RN(1/c) rounds to the same bfloat16 as the correctly rounded float quotient, for
    /// every divisor significand (c in [1, 2)) and divisors near both ends of the range.
    #[test]
    fn bf16_reciprocal_multiply_rounds_as_division() {
        let bf = |f: f32| half::bf16::from_f32(f).to_bits();
        let mut divisors: Vec<f32> =
            (0..128u32).map(|m| f32::from_bits(0x3f80_0000 | (m << 16))).collect();
        for scale in [2f32.powi(-125), 2f32.powi(-60), 2f32.powi(60), 2f32.powi(125)] {
            divisors.extend(
                [1.0078125f32, 1.4140625, 1.99, 1.0 + 2f32.powi(-7)]
                    .map(|c| half::bf16::from_f32(c * scale).to_f32()),
            );
        }
        divisors.extend(divisors.clone().iter().map(|c| -c));
        let mut checked = 0;
        for c in divisors {
            let Some(r) = bf16_reciprocal(Scalar::Float(c as f64)) else { continue };
            for bits in 0..=u16::MAX {
                let x = half::bf16::from_bits(bits).to_f32();
                let (want, got) = (bf(x / c), bf(x * r));
                assert!(want == got || (x / c).is_nan(), "{x:e} / {c:e}: {want:04x} != {got:04x}");
            }
            checked += 1;
        }
        assert!(checked >= 250, "{checked}");
        // A subnormal divisor, or one whose reciprocal overflows, keeps the division.
        assert_eq!(bf16_reciprocal(Scalar::Float(1e-39)), None);
        assert_eq!(bf16_reciprocal(Scalar::Float(0.0)), None);
        assert_eq!(bf16_reciprocal(Scalar::Float(3.0)), Some(1.0 / 3.0));
    }

    #[test]
    fn reciprocals_are_exact_powers_of_two() {
        assert_eq!(exact_reciprocal(Scalar::Float(2.0), DType::BF16), Some(0x3f00));
        assert_eq!(exact_reciprocal(Scalar::Float(-0.25), DType::F16), Some(0xc400));
        assert_eq!(exact_reciprocal(Scalar::Int(4), DType::BF16), Some(0x3e80));
        assert_eq!(exact_reciprocal(Scalar::Float(3.0), DType::BF16), None);
        assert_eq!(exact_reciprocal(Scalar::Float(0.0), DType::BF16), None);
        assert_eq!(exact_reciprocal(Scalar::Float(f64::INFINITY), DType::BF16), None);
        // 1/2^-20 = 2^20 overflows float16 (max 65504); 2^-16 is subnormal there.
        assert_eq!(exact_reciprocal(Scalar::Float(2f64.powi(-20)), DType::F16), None);
        assert_eq!(exact_reciprocal(Scalar::Float(2f64.powi(16)), DType::F16), None);
        assert_eq!(exact_reciprocal(Scalar::Float(2f64.powi(14)), DType::F16), Some(0x0400));
    }
}
