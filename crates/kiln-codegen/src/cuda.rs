//! CUDA C source for a fused elementwise program (kiln_base::FusedProgram), compiled by NVRTC.
//! One `extern "C" __global__` function, `kiln_<ops>(n, in0.., out0.., [index])`, walks the
//! `n` output elements with a grid-stride loop. Variants:
//! - contiguous: inputs are row-contiguous of the output's shape or single broadcast values;
//!   each thread moves `vector` consecutive elements per input with one aligned access
//!   (16 bytes for the widest type), with a scalar tail;
//! - strided: `ndim` collapsed dims baked in; shape and per-input strides arrive in a struct
//!   passed by value; offsets in 32-bit arithmetic where every index fits, else 64-bit.
//!
//! The step expressions are the C backend's (`c::step_expr`): the CUDA preamble gives the same
//! `k_*` names as C++ overloads, so both backends compute one definition of each op.

use crate::c::{body, compute_type, load, InputKind};
use crate::{c_type, cuda_packed};
use kiln_base::{DType, FusedProgram};
use std::fmt::Write;

/// The entry point's name: `kiln_` and the program's ops (`kiln_Compiled_multiply_exp`),
/// cut at 96 characters, so profilers (nsys, torch.profiler) tell the kernels apart.
pub fn kernel_symbol(program: &FusedProgram) -> String {
    let mut name = format!("kiln_{}", program.name());
    name.truncate(96);
    name
}

/// The scalar math every kernel includes: `preamble.cu`, with the float math that kiln's CPU
/// kernels share (`math.rs`) ahead of it.
pub fn preamble() -> &'static str {
    static PREAMBLE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PREAMBLE.get_or_init(|| {
        let (head, tail) = PREAMBLE_CU
            .split_once(MATH_MARK)
            .expect("preamble.cu marks where math.rs's functions go");
        format!("{head}{}{MATH_MARK}{tail}", crate::math::cuda_math())
    })
}

const PREAMBLE_CU: &str = include_str!("preamble.cu");
const MATH_MARK: &str = "/* k_tanh, k_erf, k_erf_unclamped: math.rs";

/// Which CUDA kernel to generate.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CudaVariant {
    /// Flat index; `vector` elements per access (1 = plain loads); `packed`: half-precision
    /// steps of full vectors computed two at a time (`cuda_packed`; only where
    /// `cuda_packed::packs` allows, else ignored); `unroll`: accesses per thread (more than
    /// one: a block covers `unroll` block-wide spans, each thread's loads all issued before
    /// its math; the launch gives a block per `256 * vector * unroll` elements).
    Contiguous { kinds: Vec<InputKind>, vector: usize, packed: bool, unroll: usize },
    /// Any layout over `ndim` dims; `wide` = 64-bit offsets.
    Strided { ndim: usize, wide: bool },
    /// A layout whose innermost of `ndim` dims every input reads contiguously (`Vector`) or
    /// not at all (stride 0, `Scalar`: one value per vector), that dim a multiple of
    /// `vector`, every vector input aligned for it: each thread moves `vector` consecutive
    /// elements of a row with one access per input, the row's offsets from the strided index
    /// (matrix slices, row and column broadcasts). `wide` and `packed` as above.
    Rows { ndim: usize, wide: bool, kinds: Vec<InputKind>, vector: usize, packed: bool },
}

/// Elements per vector access for a contiguous kernel: 16 bytes of the widest element.
pub fn vector_width(program: &FusedProgram) -> usize {
    let widest = program
        .inputs
        .iter()
        .chain(program.output_dtypes().iter())
        .map(|d| d.size())
        .max()
        .unwrap_or(4);
    (16 / widest.max(1)).max(1)
}

/// The element type as stored in device memory (bool is one byte, as on the host).
fn storage_type(dtype: DType) -> &'static str {
    c_type(dtype)
}

/// The CUDA source of `program` as `variant` (preamble included).
pub fn cuda_kernel(program: &FusedProgram, variant: &CudaVariant) -> String {
    let mut s = String::from(preamble());
    let _ = writeln!(s, "\n/* {} */", program.name());
    let n_in = program.inputs.len();
    if let CudaVariant::Strided { ndim, .. } | CudaVariant::Rows { ndim, .. } = variant {
        let _ = writeln!(
            s,
            "struct KIndex {{ int64_t shape[{}]; int64_t strides[{}][{}]; }};",
            ndim.max(&1),
            n_in.max(1),
            ndim.max(&1)
        );
    }
    let mut params = vec!["const int64_t n".to_string()];
    for (k, &dtype) in program.inputs.iter().enumerate() {
        params.push(format!("const {} *__restrict__ in{k}", storage_type(dtype)));
    }
    for (k, dtype) in program.output_dtypes().into_iter().enumerate() {
        params.push(format!("{} *__restrict__ out{k}", storage_type(dtype)));
    }
    if matches!(variant, CudaVariant::Strided { .. } | CudaVariant::Rows { .. }) {
        params.push("const KIndex ix".to_string());
    }
    let symbol = kernel_symbol(program);
    let _ = writeln!(s, "extern \"C\" __global__ void {symbol}({}) {{", params.join(", "));
    match variant {
        CudaVariant::Contiguous { kinds, vector, packed, unroll } => {
            contiguous(&mut s, program, kinds, *vector, *packed, *unroll)
        }
        CudaVariant::Strided { ndim, wide } => strided(&mut s, program, *ndim, *wide),
        CudaVariant::Rows { ndim, wide, kinds, vector, packed } => {
            rows(&mut s, program, *ndim, *wide, kinds, *vector, *packed)
        }
    }
    s.push_str("}\n");
    s
}

fn contiguous(
    s: &mut String,
    program: &FusedProgram,
    kinds: &[InputKind],
    vector: usize,
    packed: bool,
    unroll: usize,
) {
    let v = vector.max(1);
    let packed = packed && cuda_packed::packs(program, v);
    let scalar = |k: usize| kinds.get(k) == Some(&InputKind::Scalar);
    for (k, &dtype) in program.inputs.iter().enumerate() {
        if scalar(k) {
            let ty = compute_type(dtype);
            let _ = writeln!(s, "    const {ty} s{k} = {};", load(dtype, &format!("in{k}[0]")));
        }
    }
    if packed {
        s.push_str(&cuda_packed::scalar_prelude(program, kinds, &|k| format!("in{k}[0]"), "    "));
    }
    let plain_input = |k: usize| {
        if scalar(k) {
            format!("s{k}")
        } else {
            load(program.inputs[k], &format!("in{k}[i]"))
        }
    };
    let plain_output = |k: usize| format!("out{k}[i]");
    // The accesses at `base`: a full vector, else the elements up to n one at a time.
    let access = |s: &mut String, src: &dyn Fn(usize) -> String, indent: &str| {
        if packed {
            cuda_packed::paired_vector(s, program, kinds, v, src, indent);
        } else {
            vector_body(s, program, kinds, v, src, indent);
        }
    };
    let tail = |s: &mut String, indent: &str| {
        let _ = writeln!(s, "{indent}if (base + {v} <= n) {{");
        access(s, &|k| format!("in{k} + base"), &format!("{indent}    "));
        let _ = writeln!(s, "{indent}}} else {{");
        let _ = writeln!(s, "{indent}    for (int64_t i = base; i < n; ++i) {{");
        s.push_str(&body(program, &plain_input, &plain_output, &format!("{indent}        ")));
        let _ = writeln!(s, "{indent}    }}\n{indent}}}");
    };
    if v > 1 && unroll > 1 {
        // Compute-bound programs: bf16 gelu_erf ran at 0.89 of the copy floor on the H200
        // with its four accesses per thread in a grid-stride loop, 0.93 with the loads of
        // all four issued first.
        let u = unroll;
        let _ =
            writeln!(s, "    const int64_t span = (int64_t)blockDim.x * {v}, tile = span * {u};");
        let _ = writeln!(
            s,
            "    for (int64_t start = (int64_t)blockIdx.x * tile; start < n; start += (int64_t)gridDim.x * tile) {{"
        );
        s.push_str("        const int64_t first = start + (int64_t)threadIdx.x * ");
        let _ = writeln!(s, "{v};\n        if (start + tile <= n) {{");
        for (k, &dtype) in program.inputs.iter().enumerate() {
            if !scalar(k) {
                let ty = if packed {
                    cuda_packed::access_type(dtype, v)
                } else {
                    format!("KVec<{}, {v}>", storage_type(dtype))
                };
                let _ = writeln!(s, "            {ty} a{k}[{u}];");
                let _ = writeln!(
                    s,
                    "#pragma unroll\n            for (int w = 0; w < {u}; ++w) a{k}[w] = *(const {ty} *)(in{k} + first + w * span);"
                );
            }
        }
        let _ = writeln!(s, "#pragma unroll\n            for (int w = 0; w < {u}; ++w) {{");
        s.push_str("                const int64_t base = first + w * span;\n");
        access(s, &|k| format!("&a{k}[w]"), "                ");
        s.push_str("            }\n        } else {\n");
        let _ = writeln!(s, "            for (int w = 0; w < {u}; ++w) {{");
        s.push_str("                const int64_t base = first + w * span;\n");
        s.push_str("                if (base >= n) break;\n");
        tail(s, "                ");
        s.push_str("            }\n        }\n    }\n");
        return;
    }
    let _ = writeln!(s, "    const int64_t step = (int64_t)gridDim.x * blockDim.x * {v};");
    let _ = writeln!(
        s,
        "    for (int64_t base = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * {v}; base < n; base += step) {{"
    );
    if v > 1 {
        tail(s, "        ");
    } else {
        s.push_str("        const int64_t i = base;\n");
        s.push_str(&body(program, &plain_input, &plain_output, "        "));
    }
    s.push_str("    }\n");
}

/// The full-vector part of a kernel, one element at a time: vector input `k` is read at
/// `src(k)`, outputs written at `out{k} + base`.
fn vector_body(
    s: &mut String,
    program: &FusedProgram,
    kinds: &[InputKind],
    v: usize,
    src: &dyn Fn(usize) -> String,
    indent: &str,
) {
    let scalar = |k: usize| kinds.get(k) == Some(&InputKind::Scalar);
    for (k, &dtype) in program.inputs.iter().enumerate() {
        if !scalar(k) {
            let ty = storage_type(dtype);
            let _ = writeln!(
                s,
                "{indent}const KVec<{ty}, {v}> v{k} = *(const KVec<{ty}, {v}> *)({});",
                src(k)
            );
        }
    }
    for (k, dtype) in program.output_dtypes().into_iter().enumerate() {
        let _ = writeln!(s, "{indent}KVec<{}, {v}> r{k};", storage_type(dtype));
    }
    let _ = writeln!(s, "#pragma unroll\n{indent}for (int u = 0; u < {v}; ++u) {{");
    let vec_input = |k: usize| {
        if scalar(k) {
            format!("s{k}")
        } else {
            load(program.inputs[k], &format!("v{k}.v[u]"))
        }
    };
    let inner = format!("{indent}    ");
    s.push_str(&body(program, &vec_input, &|k| format!("r{k}.v[u]"), &inner));
    let _ = writeln!(s, "{indent}}}");
    for (k, dtype) in program.output_dtypes().into_iter().enumerate() {
        let ty = storage_type(dtype);
        let _ = writeln!(s, "{indent}*(KVec<{ty}, {v}> *)(out{k} + base) = r{k};");
    }
}

/// Offsets `o{k}` of element `start` in every input, from the `KIndex` table (`idx` the
/// index type), walking the `ndim` dims from the innermost.
fn strided_offsets(s: &mut String, n_in: usize, ndim: usize, idx: &str, start: &str, indent: &str) {
    let _ = writeln!(s, "{indent}{idx} rest = {start};");
    for k in 0..n_in {
        let _ = writeln!(s, "{indent}{idx} o{k} = 0;");
    }
    let _ =
        writeln!(s, "#pragma unroll\n{indent}for (int d = {} - 1; d >= 0; --d) {{", ndim.max(1));
    let _ = writeln!(s, "{indent}    const {idx} extent = ({idx})ix.shape[d];");
    let _ = writeln!(s, "{indent}    const auto c = rest % extent;\n{indent}    rest /= extent;");
    for k in 0..n_in {
        let _ = writeln!(s, "{indent}    o{k} += c * ({idx})ix.strides[{k}][d];");
    }
    let _ = writeln!(s, "{indent}}}");
}

/// The `Rows` variant: a grid-stride loop over vectors (`n` is a multiple of `v`), each
/// located by the strided index; inputs broadcast along the rows read one value per vector.
fn rows(
    s: &mut String,
    program: &FusedProgram,
    ndim: usize,
    wide: bool,
    kinds: &[InputKind],
    v: usize,
    packed: bool,
) {
    let idx = if wide { "int64_t" } else { "int32_t" };
    let packed = packed && cuda_packed::packs(program, v);
    let _ = writeln!(s, "    const {idx} vectors = ({idx})(n / {v});");
    let _ = writeln!(s, "    const {idx} step = ({idx})gridDim.x * ({idx})blockDim.x;");
    let _ = writeln!(
        s,
        "    for ({idx} i = ({idx})blockIdx.x * ({idx})blockDim.x + ({idx})threadIdx.x; i < vectors; i += step) {{"
    );
    let _ = writeln!(s, "        const {idx} base = i * {v};");
    strided_offsets(s, program.inputs.len(), ndim, idx, "base", "        ");
    for (k, &dtype) in program.inputs.iter().enumerate() {
        if kinds.get(k) == Some(&InputKind::Scalar) {
            let ty = compute_type(dtype);
            let _ =
                writeln!(s, "        const {ty} s{k} = {};", load(dtype, &format!("in{k}[o{k}]")));
        }
    }
    let src = |k: usize| format!("in{k} + o{k}");
    if packed {
        s.push_str(&cuda_packed::scalar_prelude(
            program,
            kinds,
            &|k| format!("in{k}[o{k}]"),
            "        ",
        ));
        cuda_packed::paired_vector(s, program, kinds, v, &src, "        ");
    } else {
        vector_body(s, program, kinds, v, &src, "        ");
    }
    s.push_str("    }\n");
}

fn strided(s: &mut String, program: &FusedProgram, ndim: usize, wide: bool) {
    let idx = if wide { "int64_t" } else { "int32_t" };
    let n_in = program.inputs.len();
    let _ = writeln!(s, "    const {idx} total = ({idx})n;");
    let _ = writeln!(s, "    const {idx} step = ({idx})gridDim.x * ({idx})blockDim.x;");
    let _ = writeln!(
        s,
        "    for ({idx} i = ({idx})blockIdx.x * ({idx})blockDim.x + ({idx})threadIdx.x; i < total; i += step) {{"
    );
    strided_offsets(s, n_in, ndim, idx, "i", "        ");
    let input = |k: usize| load(program.inputs[k], &format!("in{k}[o{k}]"));
    s.push_str(&body(program, &input, &|k| format!("out{k}[i]"), "        "));
    s.push_str("    }\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_base::{BinaryOp, FusedOp, FusedStep, Scalar, UnaryOp};

    fn silu_mul(dtype: DType) -> FusedProgram {
        let st = |op| FusedStep { op, dtype };
        FusedProgram {
            inputs: vec![dtype, dtype],
            steps: vec![
                st(FusedOp::Input(0)),
                st(FusedOp::Input(1)),
                st(FusedOp::Unary(UnaryOp::Sigmoid, 0)),
                st(FusedOp::Binary(BinaryOp::Multiply, 0, 2)),
                st(FusedOp::Binary(BinaryOp::Multiply, 3, 1)),
            ],
            outputs: vec![4],
        }
    }

    #[test]
    fn contiguous_vector_kernel_snapshot() {
        let p = silu_mul(DType::F32);
        let v = CudaVariant::Contiguous {
            kinds: vec![InputKind::Vector, InputKind::Scalar],
            vector: vector_width(&p),
            packed: true,
            unroll: 1,
        };
        let src = cuda_kernel(&p, &v);
        let kernel = &src[preamble().len()..];
        let expected = r#"
/* Compiled_sigmoid_multiply_multiply */
extern "C" __global__ void kiln_Compiled_sigmoid_multiply_multiply(const int64_t n, const float *__restrict__ in0, const float *__restrict__ in1, float *__restrict__ out0) {
    const float s1 = in1[0];
    const int64_t step = (int64_t)gridDim.x * blockDim.x * 4;
    for (int64_t base = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 4; base < n; base += step) {
        if (base + 4 <= n) {
            const KVec<float, 4> v0 = *(const KVec<float, 4> *)(in0 + base);
            KVec<float, 4> r0;
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const float t0 = v0.v[u];
                const float t1 = s1;
                const float t2 = (float)(k_sigmoid((t0)));
                const float t3 = (float)(((t0) * (t2)));
                const float t4 = (float)(((t3) * (t1)));
                r0.v[u] = t4;
            }
            *(KVec<float, 4> *)(out0 + base) = r0;
        } else {
            for (int64_t i = base; i < n; ++i) {
                const float t0 = in0[i];
                const float t1 = s1;
                const float t2 = (float)(k_sigmoid((t0)));
                const float t3 = (float)(((t0) * (t2)));
                const float t4 = (float)(((t3) * (t1)));
                out0[i] = t4;
            }
        }
    }
}
"#;
        assert_eq!(kernel, expected);
    }

    #[test]
    fn strided_kernel_bakes_ndim_and_index_width() {
        let p = silu_mul(DType::BF16);
        let src = cuda_kernel(&p, &CudaVariant::Strided { ndim: 3, wide: false });
        assert!(src.contains("struct KIndex { int64_t shape[3]; int64_t strides[2][3]; };"));
        assert!(src.contains("const KIndex ix"));
        assert!(src.contains("int32_t o1 = 0;"));
        assert!(src.contains("const float t0 = k_bf16_to_f32(in0[o0]);"));
        assert!(src.contains("out0[i] = k_f64_to_bf16((double)(t4));"));
        let wide = cuda_kernel(&p, &CudaVariant::Strided { ndim: 3, wide: true });
        assert!(wide.contains("int64_t o0 = 0;"));
    }

    #[test]
    fn vector_width_follows_the_widest_element() {
        assert_eq!(vector_width(&silu_mul(DType::F32)), 4);
        assert_eq!(vector_width(&silu_mul(DType::F16)), 8);
        let mut p = silu_mul(DType::F32);
        p.steps.push(FusedStep { op: FusedOp::Literal(Scalar::Int(1)), dtype: DType::I64 });
        p.outputs.push(5);
        assert_eq!(vector_width(&p), 2);
    }

    #[test]
    fn packed_bf16_kernel_snapshot() {
        let p = silu_mul(DType::BF16);
        let kinds = vec![InputKind::Vector, InputKind::Scalar];
        let v =
            CudaVariant::Contiguous { kinds, vector: vector_width(&p), packed: true, unroll: 1 };
        let src = cuda_kernel(&p, &v);
        let kernel = &src[preamble().len()..];
        let expected = r#"
/* Compiled_sigmoid_multiply_multiply */
extern "C" __global__ void kiln_Compiled_sigmoid_multiply_multiply(const int64_t n, const uint16_t *__restrict__ in0, const uint16_t *__restrict__ in1, uint16_t *__restrict__ out0) {
    const float s1 = k_bf16_to_f32(in1[0]);
    const uint32_t sp1 = (uint32_t)in1[0] * 0x10001u;
    const int64_t step = (int64_t)gridDim.x * blockDim.x * 8;
    for (int64_t base = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 8; base < n; base += step) {
        if (base + 8 <= n) {
            const KVec<uint32_t, 4> v0 = *(const KVec<uint32_t, 4> *)(in0 + base);
            KVec<uint32_t, 4> r0;
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const uint32_t p0 = v0.v[u];
                const float t0_0 = k_bf16x2_lo(v0.v[u]);
                const float t0_1 = k_bf16x2_hi(v0.v[u]);
                const uint32_t p1 = sp1;
                const uint32_t p2 = k_bf16x2_pack((float)(k_sigmoid((t0_0))), (float)(k_sigmoid((t0_1))));
                const uint32_t p3 = k_mul_bf16x2(p0, p2);
                const uint32_t p4 = k_mul_bf16x2(p3, p1);
                r0.v[u] = p4;
            }
            *(KVec<uint32_t, 4> *)(out0 + base) = r0;
        } else {
            for (int64_t i = base; i < n; ++i) {
                const float t0 = k_bf16_to_f32(in0[i]);
                const float t1 = s1;
                const float t2 = k_round_bf16((float)(k_sigmoid((t0))));
                const float t3 = k_round_bf16((float)(((t0) * (t2))));
                const float t4 = k_round_bf16((float)(((t3) * (t1))));
                out0[i] = k_f64_to_bf16((double)(t4));
            }
        }
    }
}
"#;
        assert_eq!(kernel, expected);
        // The switch off (or a program without half steps) keeps the per-element body.
        let off = CudaVariant::Contiguous {
            kinds: vec![InputKind::Vector, InputKind::Scalar],
            vector: 8,
            packed: false,
            unroll: 1,
        };
        assert!(!cuda_kernel(&p, &off).contains("k_mul_bf16x2(p"));
        let f32_packed = CudaVariant::Contiguous {
            kinds: vec![InputKind::Vector, InputKind::Scalar],
            vector: 4,
            packed: true,
            unroll: 1,
        };
        let f = silu_mul(DType::F32);
        assert_eq!(cuda_kernel(&f, &f32_packed), {
            let v = CudaVariant::Contiguous {
                kinds: vec![InputKind::Vector, InputKind::Scalar],
                vector: 4,
                packed: false,
                unroll: 1,
            };
            cuda_kernel(&f, &v)
        });
    }

    /// f16 with a float32 detour, a power-of-two divide, where / compare, negate, abs and max.
    fn f16_mixed() -> FusedProgram {
        let h = DType::F16;
        let st = |op, dtype| FusedStep { op, dtype };
        FusedProgram {
            inputs: vec![h, DType::F32, DType::Bool],
            steps: vec![
                st(FusedOp::Input(0), h),                               // 0
                st(FusedOp::Input(1), DType::F32),                      // 1
                st(FusedOp::Literal(Scalar::Float(2.0)), h),            // 2
                st(FusedOp::Binary(BinaryOp::Divide, 0, 2), h),         // 3
                st(FusedOp::AsType(3), DType::F32),                     // 4
                st(FusedOp::Binary(BinaryOp::Add, 4, 1), DType::F32),   // 5
                st(FusedOp::AsType(5), h),                              // 6
                st(FusedOp::Binary(BinaryOp::Less, 6, 0), DType::Bool), // 7
                st(FusedOp::Unary(UnaryOp::Negative, 6), h),            // 8
                st(FusedOp::Where(7, 8, 3), h),                         // 9
                st(FusedOp::Unary(UnaryOp::Abs, 9), h),                 // 10
                st(FusedOp::Binary(BinaryOp::Maximum, 10, 0), h),       // 11
                st(FusedOp::Input(2), DType::Bool),                     // 12
                st(FusedOp::Where(12, 11, 2), h),                       // 13
                st(FusedOp::Literal(Scalar::Float(3.0)), h),            // 14
                st(FusedOp::Binary(BinaryOp::Divide, 13, 14), h),       // 15
            ],
            outputs: vec![15, 5, 7],
        }
    }

    #[test]
    fn packed_f16_mixed_program() {
        let p = f16_mixed();
        assert_eq!(vector_width(&p), 4);
        let kinds = vec![InputKind::Vector, InputKind::Vector, InputKind::Scalar];
        let v = CudaVariant::Contiguous { kinds, vector: 4, packed: true, unroll: 1 };
        let src = cuda_kernel(&p, &v);
        for line in [
            "const KVec<uint32_t, 2> v0 = *(const KVec<uint32_t, 2> *)(in0 + base);",
            "const KVec<float, 4> v1 = *(const KVec<float, 4> *)(in1 + base);",
            "for (int u = 0; u < 2; ++u) {",
            "const float t1_1 = v1.v[2 * u + 1];",
            // x / 2 is x * 0.5 (0x3800 in float16): exact, one instruction.
            "const uint32_t p3 = k_mul_f16x2(p0, 0x38003800u);",
            "const float t3_0 = k_f16x2_lo(p3);",
            "const float t4_1 = ((float)(t3_1));",
            "const float t5_0 = (float)(((t4_0) + (t1_0)));",
            "const uint32_t p6 = k_f16x2_pack((float)(t5_0), (float)(t5_1));",
            "const bool t7_0 = (bool)(((t6_0) < (t0_0)));",
            "const uint32_t p8 = (p6 ^ 0x80008000u);",
            "const uint32_t p9 = k_pick_h2(t7_0, t7_1, p8, p3);",
            "const uint32_t p10 = (p9 & 0x7fff7fffu);",
            "const uint32_t p11 = k_maximum_f16x2(p10, p0);",
            "const bool t12_0 = s2;",
            "const uint32_t p2 = 0x40004000u;",
            "const uint32_t p13 = k_pick_h2(t12_0, t12_1, p11, p2);",
            // x / 3 has no exact reciprocal: divided in float (k_div_lit: exactly rounded),
            // rounded once per pair.
            "const uint32_t p15 = k_f16x2_pack((float)(k_div_lit(t13_0, t14_0, 3.333333432674408e-1f)), (float)(k_div_lit(t13_1, t14_1, 3.333333432674408e-1f)));",
            "const float t14_0 = 3e0f;",
            "r0.v[u] = p15;",
            "r1.v[2 * u + 0] = t5_0;",
            "r2.v[2 * u + 1] = t7_1;",
            "*(KVec<uint32_t, 2> *)(out0 + base) = r0;",
            "*(KVec<bool, 4> *)(out2 + base) = r2;",
        ] {
            assert!(src.contains(line), "missing {line}\n{}", &src[preamble().len()..]);
        }
        // Forms nobody reads are not made: the literal 3 packed, input 0's floats are.
        assert!(!src.contains("const uint32_t p14"));
        assert!(src.contains("const float t0_0 = k_f16x2_lo(v0.v[u]);"));
        // Unaligned (vector 1) kernels stay per element.
        let one = CudaVariant::Contiguous {
            kinds: vec![InputKind::Vector; 3],
            vector: 1,
            packed: true,
            unroll: 1,
        };
        assert!(!cuda_kernel(&p, &one)[preamble().len()..].contains("x2"));
    }
}
