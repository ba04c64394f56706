//! C source for a fused elementwise program (kiln_base::FusedProgram). One kernel function,
//! `kiln_kernel`, computes the outputs for flat indices `[begin, end)`, so the caller splits
//! the range over threads. The body is vector code (`c_vector.rs`: GCC/Clang vector
//! extensions, `K_LANES` elements per step), in two variants:
//! - contiguous: every input is either row-contiguous of the output's shape (a vector,
//!   loaded at `i`) or a single broadcast value (a scalar, read once and splat); whole
//!   vectors first, then the last `end - i < K_LANES` elements through staging arrays by the
//!   same vector body (so the tail computes the same bits);
//! - strided: any layout (broadcast = stride 0, negative strides); `K_LANES` elements are
//!   gathered at a time with per-input strides (the multi-index advanced per element, the
//!   offsets decomposed again at each row end), computed as vectors, stored contiguously.
//!
//! Each step becomes one typed local, so integer results wrap to their width and
//! float16/bfloat16 results are rounded at every node, exactly as the eager kernels do.
//! Programs with complex values (moves only) keep the scalar loop.

use crate::c_vector::{storage, vector_body, vload, vsplat_input, vstore, vtype};
use crate::{binary_expr, c_type, unary_expr};
use kiln_base::{BinaryOp, DType, FusedOp, FusedProgram, Scalar, UnaryOp};
use std::fmt::Write;

/// The kernel function's name in every generated source.
pub const KERNEL_SYMBOL: &str = "kiln_kernel";

/// The scalar helpers (`preamble.c`: integer division without traps, x86 conversions, libm
/// wrappers) and the vector ones (`vector.c`, then the float32 math of `math.rs`).
const SCALAR_PREAMBLE: &str = include_str!("preamble.c");
const VECTOR_PREAMBLE: &str = include_str!("vector.c");

/// What the source of a kernel whose widest lane is `lane_bytes` (1, 2, 4 or 8) starts with:
/// the helpers of `preamble.c`, `K_LANE_BYTES`, `vector.c` (with `c_vector.rs`'s shuffles)
/// and the float32 math of `math.rs`.
pub fn preamble_for(lane_bytes: usize) -> &'static str {
    static TEXT: std::sync::OnceLock<[String; 4]> = std::sync::OnceLock::new();
    let all = TEXT.get_or_init(|| {
        [1usize, 2, 4, 8].map(|lb| {
            let (head, tail) = VECTOR_PREAMBLE.split_once("/* @LANE_HELPERS@ */\n").unwrap();
            let mut s = String::from(SCALAR_PREAMBLE);
            s.push_str(&format!("\n#define K_LANE_BYTES {lb}\n"));
            s.push_str(head);
            s.push_str(&crate::c_vector::lane_helpers());
            s.push_str(tail);
            s.push_str(&crate::math::c_vector_math());
            s.push_str(SCALAR_MATH);
            s
        })
    });
    &all[lane_bytes.trailing_zeros().min(3) as usize]
}

/// The preamble of float32 kernels ([`preamble_for`] 4-byte lanes).
pub fn preamble() -> &'static str {
    preamble_for(4)
}

/// The preamble `c_kernel` starts `program`'s source with.
pub fn kernel_preamble(program: &FusedProgram) -> &'static str {
    preamble_for(crate::c_vector::lane_bytes_of(program))
}

/// Scalar float32 forms of the vector math (lane-by-lane steps of other ops never need them,
/// but `k_exp(x)` and friends must name something for float): one lane of the vector code.
const SCALAR_MATH: &str = "
K_INLINE float k_expf(float x) { return k_vexp((kv_f32){K_REP(x)})[0]; }
K_INLINE float k_expm1f(float x) { return k_vexpm1((kv_f32){K_REP(x)})[0]; }
K_INLINE float k_logf(float x) { return k_vlog((kv_f32){K_REP(x)})[0]; }
K_INLINE float k_log1pf(float x) { return k_vlog1p((kv_f32){K_REP(x)})[0]; }
K_INLINE float k_tanhf(float x) { return k_vtanh((kv_f32){K_REP(x)})[0]; }
K_INLINE float k_sigmoidf(float x) { return k_vsigmoid((kv_f32){K_REP(x)})[0]; }
K_INLINE float k_erff(float x) { return k_verf((kv_f32){K_REP(x)})[0]; }
";

/// How the contiguous variant reads one input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InputKind {
    /// Row-contiguous with the output's shape: element `i`.
    Vector,
    /// One value for every element (a broadcast scalar).
    Scalar,
}

/// Which kernel to generate.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Variant {
    Contiguous(Vec<InputKind>),
    /// `kiln_kernel(begin, end, in, out, ndim, shape, strides)`; `strides` holds each
    /// input's element strides, `ndim` per input.
    Strided,
}

/// Whether generated C computes `op` on `dtype` exactly as the eager kernel does (or within
/// the documented ulp bound of libm). Compile leaves other ops out of fused regions.
pub fn supports_unary(op: UnaryOp, dtype: DType) -> bool {
    // The f64 inverse error function refines with Newton steps in eager; not mirrored.
    !(op == UnaryOp::ErfInv && dtype == DType::F64)
}

/// The type a value is computed in: half floats compute in float.
pub(crate) fn compute_type(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 | DType::BF16 => "float",
        d => c_type(d),
    }
}

/// A stored element as its compute type.
pub(crate) fn load(dtype: DType, expr: &str) -> String {
    match dtype {
        DType::F16 => format!("k_f16_to_f32({expr})"),
        DType::BF16 => format!("k_bf16_to_f32({expr})"),
        _ => expr.to_string(),
    }
}

/// A computed value as its stored element.
pub(crate) fn store(dtype: DType, expr: &str) -> String {
    match dtype {
        DType::F16 => format!("k_f64_to_f16((double)({expr}))"),
        DType::BF16 => format!("k_f64_to_bf16((double)({expr}))"),
        _ => expr.to_string(),
    }
}

/// A computed float result rounded to its dtype (a no-op cast for native types).
fn round(dtype: DType, expr: &str) -> String {
    match dtype {
        DType::F16 => format!("k_round_f16((float)({expr}))"),
        DType::BF16 => format!("k_round_bf16((float)({expr}))"),
        d => format!("({})({expr})", c_type(d)),
    }
}

/// `value` converted from dtype `from` to `to`, with eager's rules (kiln-cpu cast.rs).
fn convert(from: DType, to: DType, value: &str) -> String {
    let is_float = |d: DType| d.is_float();
    match (from, to) {
        (f, t) if f == t => value.to_string(),
        // complex64 (generated CUDA only: the C backend fuses no complex ops). To bool: either
        // part nonzero; to other reals: the real part, converted as a float32; from reals:
        // the value as float32 (one rounding, as kiln-cpu's `as f32`) and a zero imaginary.
        (DType::C64, DType::Bool) => format!("k_c64_nonzero({value})"),
        (DType::C64, t) => convert(DType::F32, t, &format!("({value}).re")),
        (_, DType::C64) => format!("k_c64((float)({value}), 0.0f)"),
        (_, DType::Bool) => format!("((bool)(({value}) != 0))"),
        (f, t) if is_float(f) && !is_float(t) => {
            let v = format!("(double)({value})");
            match t {
                DType::I64 => format!("k_f2i64({v})"),
                DType::U32 => format!("(uint32_t)k_f2i64({v})"),
                DType::U64 => format!("k_f2u64({v})"),
                t => format!("({})k_f2i32({v})", c_type(t)),
            }
        }
        // f64 -> half rounds once, straight from double.
        (DType::F64, DType::F16) => format!("k_f16_to_f32(k_f64_to_f16({value}))"),
        (DType::F64, DType::BF16) => format!("k_bf16_to_f32(k_f64_to_bf16({value}))"),
        // Everything else reaches a half type through float (as eager: ints via f32).
        (_, DType::F16 | DType::BF16) => round(to, &format!("(float)({value})")),
        (_, t) => format!("(({})({value}))", c_type(t)),
    }
}

/// A literal of `dtype` with the value eager's `arange(value, 0, dtype)` stores.
fn literal(value: Scalar, dtype: DType) -> String {
    let float = |v: f64, suffix: &str| {
        if v.is_nan() {
            "NAN".to_string()
        } else if v.is_infinite() {
            if v > 0.0 { "INFINITY" } else { "(-INFINITY)" }.to_string()
        } else {
            format!("{v:e}{suffix}")
        }
    };
    match dtype {
        DType::Bool => (if value.as_f64() != 0.0 { "true" } else { "false" }).to_string(),
        DType::C64 => {
            let (re, im) = match value {
                Scalar::Complex(re, im) => (re, im),
                v => (v.as_f64(), 0.0),
            };
            format!("k_c64({}, {})", float(re as f32 as f64, "f"), float(im as f32 as f64, "f"))
        }
        DType::F32 => float(value.as_f64() as f32 as f64, "f"),
        DType::F64 => float(value.as_f64(), ""),
        DType::F16 => float(half::f16::from_f64(value.as_f64()).to_f64(), "f"),
        DType::BF16 => float(half::bf16::from_f64(value.as_f64()).to_f64(), "f"),
        d => {
            // Integers: the wrapped bits of the i64 value, cast to the type (gcc: modulo).
            let bits = value.as_i64() as u64;
            let mask = if d.size() == 8 { u64::MAX } else { (1u64 << (8 * d.size())) - 1 };
            format!("(({})0x{:x}ull)", c_type(d), bits & mask)
        }
    }
}

/// The expression computing step `i` from earlier locals `t0..`.
pub(crate) fn step_expr(
    program: &FusedProgram,
    i: usize,
    input: &dyn Fn(usize) -> String,
) -> String {
    step_expr_with(program, i, input, &|k| format!("t{k}"))
}

/// As [`step_expr`], with the earlier values spelled by `t` (the vector body's lanes).
pub(crate) fn step_expr_with(
    program: &FusedProgram,
    i: usize,
    input: &dyn Fn(usize) -> String,
    t: &dyn Fn(usize) -> String,
) -> String {
    let step = &program.steps[i];
    match &step.op {
        FusedOp::Input(k) => input(*k),
        FusedOp::Literal(v) => literal(*v, step.dtype),
        FusedOp::Unary(op, a) => round(step.dtype, &unary_expr(*op, &t(*a))),
        FusedOp::Binary(op, a, b) => {
            let value = divide_by_literal(program, i, &t(*a), &t(*b))
                .unwrap_or_else(|| binary_expr(*op, &t(*a), &t(*b)));
            round(step.dtype, &value)
        }
        FusedOp::Where(c, a, b) => format!("({} ? {} : {})", t(*c), t(*a), t(*b)),
        FusedOp::AsType(a) => convert(program.steps[*a].dtype, step.dtype, &t(*a)),
    }
}

/// RN(1/c) when step `i` divides float math by a literal `c` whose reciprocal is a normal
/// float (|c| in [2^-64, 2^64]).
pub(crate) fn literal_reciprocal(program: &FusedProgram, i: usize) -> Option<f32> {
    let step = &program.steps[i];
    let FusedOp::Binary(BinaryOp::Divide, _, k) = step.op else { return None };
    let FusedOp::Literal(v) = program.steps[k].op else { return None };
    if compute_type(step.dtype) != "float" || program.steps[k].dtype != step.dtype {
        return None;
    }
    let c = match step.dtype {
        DType::F16 => half::f16::from_f64(v.as_f64()).to_f32(),
        DType::BF16 => half::bf16::from_f64(v.as_f64()).to_f32(),
        _ => v.as_f64() as f32,
    };
    let r = (1.0 / c as f64) as f32;
    let in_range = c.is_normal() && (2f32.powi(-64)..=2f32.powi(64)).contains(&c.abs());
    (in_range && r.is_normal()).then_some(r)
}

/// `(a * r)` when step `i` divides by a power of two `c` (a r is the same real number as
/// a / c, so it rounds alike).
pub(crate) fn divide_by_power_of_two(program: &FusedProgram, i: usize, a: &str) -> Option<String> {
    let r = literal_reciprocal(program, i)?;
    (r.to_bits() & 0x7f_ffff == 0).then(|| format!("({a} * {:e}f)", r as f64))
}

/// Step `i` as `k_div_lit(a, c, RN(1/c))` when it divides float math by a literal `c`
/// (`literal_reciprocal`): each preamble computes the exactly rounded quotient its fastest
/// way (C: the division; CUDA: a multiply and Markstein's correction, a third of a
/// division's instructions); `(a * r)` when c is a power of two.
pub(crate) fn divide_by_literal(
    program: &FusedProgram,
    i: usize,
    a: &str,
    b: &str,
) -> Option<String> {
    let r = literal_reciprocal(program, i)?;
    Some(
        divide_by_power_of_two(program, i, a)
            .unwrap_or_else(|| format!("k_div_lit({a}, {b}, {:e}f)", r as f64)),
    )
}

/// The loop body: every step as a typed local, then each output stored to `output(k)`
/// (shared by the C and CUDA generators).
pub(crate) fn body(
    program: &FusedProgram,
    input: &dyn Fn(usize) -> String,
    output: &dyn Fn(usize) -> String,
    indent: &str,
) -> String {
    let mut s = String::new();
    for i in 0..program.steps.len() {
        let ty = compute_type(program.steps[i].dtype);
        let _ = writeln!(s, "{indent}const {ty} t{i} = {};", step_expr(program, i, input));
    }
    for (k, &step) in program.outputs.iter().enumerate() {
        let dtype = program.steps[step].dtype;
        let _ = writeln!(s, "{indent}{} = {};", output(k), store(dtype, &format!("t{step}")));
    }
    s
}

/// The C source of `program` as `variant` (preamble included).
pub fn c_kernel(program: &FusedProgram, variant: &Variant) -> String {
    let complex = |d: &DType| *d == DType::C64;
    if program.inputs.iter().any(complex) || program.steps.iter().any(|s| complex(&s.dtype)) {
        return scalar_kernel(program, variant);
    }
    let mut s = String::from(kernel_preamble(program));
    let _ = writeln!(s, "\n/* {} */", program.name());
    let params = match variant {
        Variant::Contiguous(_) => "",
        Variant::Strided => ", int64_t ndim, const int64_t *shape, const int64_t *strides",
    };
    let _ = writeln!(
        s,
        "void {KERNEL_SYMBOL}(int64_t begin, int64_t end, void *const *in, void *const *out{params}) {{"
    );
    // No `restrict`: a donated input is also an output. Each block of lanes loads all of its
    // inputs before it stores an output, so element i is read before it is written.
    for (k, &dtype) in program.inputs.iter().enumerate() {
        let ty = c_type(dtype);
        let _ = writeln!(s, "    const {ty} *in{k} = (const {ty} *)in[{k}];");
    }
    let out_dtypes = program.output_dtypes();
    for (k, dtype) in out_dtypes.iter().enumerate() {
        let ty = c_type(*dtype);
        let _ = writeln!(s, "    {ty} *out{k} = ({ty} *)out[{k}];");
    }
    let n_in = program.inputs.len();
    // Staging arrays: a partial block's inputs (zero-filled past its end) and outputs.
    let staging = |s: &mut String, ind: &str| {
        for (k, &dtype) in program.inputs.iter().enumerate() {
            let _ = writeln!(s, "{ind}{} b{k}[K_LANES];", storage(dtype));
            let _ = writeln!(s, "{ind}memset(b{k}, 0, sizeof b{k});");
        }
        for (k, dtype) in out_dtypes.iter().enumerate() {
            let _ = writeln!(s, "{ind}{} c{k}[K_LANES];", storage(*dtype));
        }
    };
    let staged_body = |s: &mut String, kinds: Option<&[InputKind]>, ind: &str| {
        let input = |k: usize| match kinds.and_then(|kinds| kinds.get(k)) {
            Some(InputKind::Scalar) => format!("S{k}"),
            _ => vload(program.inputs[k], &format!("b{k}")),
        };
        s.push_str(&vector_body(program, &input, &|k, v| vstore(&format!("c{k}"), v), ind));
    };
    match variant {
        Variant::Contiguous(kinds) => {
            let scalar = |k: usize| kinds.get(k) == Some(&InputKind::Scalar);
            for (k, &dtype) in program.inputs.iter().enumerate() {
                if scalar(k) {
                    let vt = vtype(dtype);
                    let _ = writeln!(
                        s,
                        "    const {vt} S{k} = {};",
                        vsplat_input(dtype, &format!("in{k}"))
                    );
                }
            }
            s.push_str("    int64_t i = begin;\n");
            s.push_str("    for (; i + K_LANES <= end; i += K_LANES) {\n");
            let input = |k: usize| {
                if scalar(k) {
                    format!("S{k}")
                } else {
                    vload(program.inputs[k], &format!("in{k} + i"))
                }
            };
            let store = |k: usize, v| vstore(&format!("out{k} + i"), v);
            s.push_str(&vector_body(program, &input, &store, "        "));
            s.push_str("    }\n    if (i < end) {\n        const int64_t n = end - i;\n");
            staging(&mut s, "        ");
            for k in (0..n_in).filter(|&k| !scalar(k)) {
                let _ = writeln!(s, "        memcpy(b{k}, in{k} + i, n * sizeof *in{k});");
            }
            staged_body(&mut s, Some(kinds), "        ");
            for k in 0..out_dtypes.len() {
                let _ = writeln!(s, "        memcpy(out{k} + i, c{k}, n * sizeof *out{k});");
            }
            s.push_str("    }\n}\n");
        }
        Variant::Strided => {
            // The element offsets of flat index `at`, and its column in the last axis.
            let decompose = |s: &mut String, at: &str, ind: &str| {
                let _ = writeln!(s, "{ind}{{\n{ind}    int64_t rest = {at};");
                for k in 0..n_in {
                    let _ = writeln!(s, "{ind}    o{k} = 0;");
                }
                let _ = writeln!(s, "{ind}    for (int64_t d = ndim - 1; d >= 0; --d) {{");
                let _ = writeln!(s, "{ind}        const int64_t c = rest % shape[d];");
                let _ = writeln!(s, "{ind}        rest /= shape[d];");
                let _ = writeln!(s, "{ind}        if (d == ndim - 1) col = c;");
                for k in 0..n_in {
                    let _ = writeln!(s, "{ind}        o{k} += c * strides[{k} * ndim + d];");
                }
                let _ = writeln!(s, "{ind}    }}\n{ind}}}");
            };
            s.push_str("    const int64_t last = shape[ndim - 1];\n    int64_t col = 0;\n");
            for k in 0..n_in {
                let _ = writeln!(s, "    int64_t o{k} = 0;");
                let _ = writeln!(s, "    const int64_t st{k} = strides[{k} * ndim + ndim - 1];");
            }
            decompose(&mut s, "begin", "    ");
            s.push_str("    for (int64_t i = begin; i < end; i += K_LANES) {\n");
            s.push_str("        const int64_t n = end - i < K_LANES ? end - i : K_LANES;\n");
            staging(&mut s, "        ");
            s.push_str("        for (int64_t l = 0; l < n; ++l) {\n");
            for k in 0..n_in {
                let _ = writeln!(s, "            b{k}[l] = in{k}[o{k}];");
            }
            s.push_str("            if (++col < last) {\n");
            for k in 0..n_in {
                let _ = writeln!(s, "                o{k} += st{k};");
            }
            s.push_str("            } else if (i + l + 1 < end) {\n");
            decompose(&mut s, "i + l + 1", "                ");
            s.push_str("            }\n        }\n");
            staged_body(&mut s, None, "        ");
            for k in 0..out_dtypes.len() {
                let _ = writeln!(s, "        memcpy(out{k} + i, c{k}, n * sizeof *out{k});");
            }
            s.push_str("    }\n}\n");
        }
    }
    s
}

/// How many steps of `program` have no vector form and compute lane by lane (libm
/// functions, integer division and powers, shifts, 64-bit integer conversions).
pub fn lane_steps(program: &FusedProgram) -> usize {
    (0..program.steps.len())
        .filter(|&i| !matches!(program.steps[i].op, FusedOp::Input(_) | FusedOp::Literal(_)))
        .filter(|&i| crate::c_vector::vector_form(program, i).is_none())
        .count()
}

/// The scalar kernel (complex moves): one element per iteration.
fn scalar_kernel(program: &FusedProgram, variant: &Variant) -> String {
    let mut s = String::from(preamble());
    let _ = writeln!(s, "\n/* {} */", program.name());
    let params = match variant {
        Variant::Contiguous(_) => "",
        Variant::Strided => ", int64_t ndim, const int64_t *shape, const int64_t *strides",
    };
    let _ = writeln!(
        s,
        "void {KERNEL_SYMBOL}(int64_t begin, int64_t end, void *const *in, void *const *out{params}) {{"
    );
    for (k, &dtype) in program.inputs.iter().enumerate() {
        let ty = c_type(dtype);
        // No `restrict`: a donated input is also an output (same element, read before
        // written); K_IVDEP keeps the loops vectorised.
        let _ = writeln!(s, "    const {ty} *in{k} = (const {ty} *)in[{k}];");
    }
    for (k, dtype) in program.output_dtypes().into_iter().enumerate() {
        let ty = c_type(dtype);
        let _ = writeln!(s, "    {ty} *out{k} = ({ty} *)out[{k}];");
    }
    match variant {
        Variant::Contiguous(kinds) => {
            for (k, &dtype) in program.inputs.iter().enumerate() {
                if kinds.get(k) == Some(&InputKind::Scalar) {
                    let ty = compute_type(dtype);
                    let _ =
                        writeln!(s, "    const {ty} s{k} = {};", load(dtype, &format!("in{k}[0]")));
                }
            }
            let input = |k: usize| match kinds.get(k) {
                Some(InputKind::Scalar) => format!("s{k}"),
                _ => load(program.inputs[k], &format!("in{k}[i]")),
            };
            let _ = writeln!(s, "    K_IVDEP");
            let _ = writeln!(s, "    for (int64_t i = begin; i < end; ++i) {{");
            s.push_str(&body(program, &input, &|k| format!("out{k}[i]"), "        "));
            s.push_str("    }\n}\n");
        }
        Variant::Strided => {
            let n = program.inputs.len();
            s.push_str("    int64_t i = begin;\n    while (i < end) {\n");
            s.push_str("        int64_t rest = i, col = 0;\n");
            for k in 0..n {
                let _ = writeln!(s, "        int64_t o{k} = 0;");
            }
            s.push_str("        for (int64_t d = ndim - 1; d >= 0; --d) {\n");
            s.push_str("            const int64_t c = rest % shape[d];\n");
            s.push_str("            rest /= shape[d];\n");
            s.push_str("            if (d == ndim - 1) col = c;\n");
            for k in 0..n {
                let _ = writeln!(s, "            o{k} += c * strides[{k} * ndim + d];");
            }
            s.push_str("        }\n");
            s.push_str("        int64_t len = shape[ndim - 1] - col;\n");
            s.push_str("        if (len > end - i) len = end - i;\n");
            for k in 0..n {
                let _ =
                    writeln!(s, "        const int64_t st{k} = strides[{k} * ndim + ndim - 1];");
            }
            s.push_str("        K_IVDEP\n        for (int64_t j = 0; j < len; ++j) {\n");
            let input = |k: usize| load(program.inputs[k], &format!("in{k}[o{k} + j * st{k}]"));
            s.push_str(&body(program, &input, &|k| format!("out{k}[i + j]"), "            "));
            s.push_str("        }\n        i += len;\n    }\n}\n");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_base::{BinaryOp, FusedStep};

    fn gelu_like() -> FusedProgram {
        let f32s = |op| FusedStep { op, dtype: DType::F32 };
        FusedProgram {
            inputs: vec![DType::F32],
            steps: vec![
                f32s(FusedOp::Input(0)),
                f32s(FusedOp::Literal(Scalar::Float(0.5))),
                f32s(FusedOp::Binary(BinaryOp::Multiply, 0, 1)),
                f32s(FusedOp::Unary(UnaryOp::Erf, 2)),
            ],
            outputs: vec![3, 2],
        }
    }

    #[test]
    fn contiguous_kernel_snapshot() {
        let src = c_kernel(&gelu_like(), &Variant::Contiguous(vec![InputKind::Vector]));
        let kernel = &src[preamble().len()..];
        let expected = "
/* Compiled_multiply_erf */
void kiln_kernel(int64_t begin, int64_t end, void *const *in, void *const *out) {
    const float *in0 = (const float *)in[0];
    float *out0 = (float *)out[0];
    float *out1 = (float *)out[1];
    int64_t i = begin;
    for (; i + K_LANES <= end; i += K_LANES) {
        const kv_f32 t0 = k_ld_f32(in0 + i);
        const kv_f32 t1 = ((kv_f32){K_REP(5e-1f)});
        const kv_f32 t2 = (t0 * t1);
        const kv_f32 t3 = k_verf(t2);
        k_st_f32(out0 + i, t3);
        k_st_f32(out1 + i, t2);
    }
    if (i < end) {
        const int64_t n = end - i;
        float b0[K_LANES];
        memset(b0, 0, sizeof b0);
        float c0[K_LANES];
        float c1[K_LANES];
        memcpy(b0, in0 + i, n * sizeof *in0);
        const kv_f32 t0 = k_ld_f32(b0);
        const kv_f32 t1 = ((kv_f32){K_REP(5e-1f)});
        const kv_f32 t2 = (t0 * t1);
        const kv_f32 t3 = k_verf(t2);
        k_st_f32(c0, t3);
        k_st_f32(c1, t2);
        memcpy(out0 + i, c0, n * sizeof *out0);
        memcpy(out1 + i, c1, n * sizeof *out1);
    }
}
";
        assert_eq!(kernel, expected);
    }

    #[test]
    fn strided_kernel_reads_with_strides() {
        let src = c_kernel(&gelu_like(), &Variant::Strided);
        assert!(src.contains("b0[l] = in0[o0];"));
        assert!(src.contains("o0 += st0;"));
        assert!(src.contains("const kv_f32 t0 = k_ld_f32(b0);"));
        assert!(src.contains("memcpy(out0 + i, c0, n * sizeof *out0);"));
        assert!(src.contains("o0 += c * strides[0 * ndim + d];"));
    }

    /// The CUDA preamble's `k_div_lit` (Markstein's correction of `a * RN(1/c)`) equals the
    /// correctly rounded division for every float significand of `a` (both signs, several
    /// binades) and divisors of every kind of significand, and `divide_by_literal` offers it
    /// only for divisors whose reciprocal it covers.
    #[test]
    fn markstein_division_by_literals_is_exact() {
        let div_lit = |a: f32, c: f32, r: f32| {
            let m = a.abs();
            if (2f32.powi(-60)..=2f32.powi(60)).contains(&m) {
                let q = a * r;
                (-c).mul_add(q, a).mul_add(r, q)
            } else {
                a / c
            }
        };
        let divisors = [
            std::f32::consts::SQRT_2,
            3.0,
            10.0,
            0.1,
            7.0,
            1.0 / 3.0,
            1e-5,
            255.0,
            1.0000001,
            1.9999999,
            1.5,
            6.0221e23,
            -2.7182817,
            1.1754944e-19,
            8.5e18,
            1.0,
            0.5,
        ];
        for c in divisors {
            let r = (1.0 / c as f64) as f32;
            for bits in 0..1u32 << 23 {
                for exp in [127u32, 127 + 37, 127 - 59, 127 + 59] {
                    let a = f32::from_bits((exp << 23) | bits);
                    assert_eq!(div_lit(a, c, r).to_bits(), (a / c).to_bits(), "{a:e} / {c:e}");
                    let a = -a;
                    assert_eq!(div_lit(a, c, r).to_bits(), (a / c).to_bits(), "{a:e} / {c:e}");
                }
            }
        }
        for a in [0.0f32, -0.0, f32::INFINITY, f32::NAN, 1e-40, 3e38, 1e-30, 2e30] {
            let c = 3.0f32;
            let (got, want) = (div_lit(a, c, 1.0 / 3.0), a / c);
            assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{a:e}");
        }
        let st = |op, dtype| kiln_base::FusedStep { op, dtype };
        let program = |v: f64, d: DType| FusedProgram {
            inputs: vec![d],
            steps: vec![
                st(FusedOp::Input(0), d),
                st(FusedOp::Literal(Scalar::Float(v)), d),
                st(FusedOp::Binary(BinaryOp::Divide, 0, 1), d),
            ],
            outputs: vec![2],
        };
        let expr = |v: f64, d: DType| divide_by_literal(&program(v, d), 2, "t0", "t1");
        assert_eq!(
            expr(3.0, DType::F32).as_deref(),
            Some("k_div_lit(t0, t1, 3.333333432674408e-1f)")
        );
        assert!(expr(std::f64::consts::SQRT_2, DType::BF16).is_some());
        assert_eq!(expr(-2.0, DType::F32).as_deref(), Some("(t0 * -5e-1f)"));
        assert_eq!(expr(0.0, DType::F32), None);
        assert_eq!(expr(1e-30, DType::F32), None);
        assert_eq!(expr(f64::INFINITY, DType::F16), None);
        assert_eq!(expr(3.0, DType::F64), None);
        assert_eq!(expr(3.0, DType::I32), None);
    }

    #[test]
    fn literals_are_exact_and_valid_c() {
        assert_eq!(literal(Scalar::Float(f64::NAN), DType::F32), "NAN");
        assert_eq!(literal(Scalar::Float(f64::NEG_INFINITY), DType::F64), "(-INFINITY)");
        assert_eq!(literal(Scalar::Float(0.1), DType::F64), "1e-1");
        assert_eq!(literal(Scalar::Float(0.1), DType::F32), "1.0000000149011612e-1f");
        assert_eq!(literal(Scalar::Int(-1), DType::I8), "((int8_t)0xffull)");
        assert_eq!(literal(Scalar::Int(i64::MIN), DType::I64), "((int64_t)0x8000000000000000ull)");
        assert_eq!(literal(Scalar::Float(2.0), DType::Bool), "true");
        assert_eq!(literal(Scalar::Float(0.1), DType::F16), "9.99755859375e-2f");
    }

    #[test]
    fn half_values_round_at_every_step() {
        let p = FusedProgram {
            inputs: vec![DType::F16],
            steps: vec![
                FusedStep { op: FusedOp::Input(0), dtype: DType::F16 },
                FusedStep { op: FusedOp::Unary(UnaryOp::Exp, 0), dtype: DType::F16 },
                FusedStep { op: FusedOp::AsType(1), dtype: DType::I32 },
            ],
            outputs: vec![1, 2],
        };
        let src = c_kernel(&p, &Variant::Contiguous(vec![InputKind::Scalar]));
        assert!(src.contains("const kv_f32 S0 = k_vf16_to_f32(((kv_u16){K_REP(in0[0])}));"));
        assert!(src.contains("const kv_f32 t1 = k_vround_f16(k_vexp(t0));"));
        assert!(src.contains("const kv_i32 t2 = k_vf2i32_f32(t1);"));
        assert!(src.contains("k_st_u16(out0 + i, k_vf32_to_f16(t1));"));
    }
}
