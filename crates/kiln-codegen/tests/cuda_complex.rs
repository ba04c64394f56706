//! complex64 in generated CUDA C: the storage type, conversions to and from every other
//! dtype, literals, and the operators the facts rows' expressions rely on.

use kiln_base::{BinaryOp, DType, FusedOp, FusedProgram, FusedStep, Scalar, UnaryOp};
use kiln_codegen::c::InputKind;
use kiln_codegen::cuda::{cuda_kernel, preamble, CudaVariant};

fn program(inputs: Vec<DType>, steps: Vec<(FusedOp, DType)>, outputs: Vec<usize>) -> FusedProgram {
    let steps = steps.into_iter().map(|(op, dtype)| FusedStep { op, dtype }).collect();
    FusedProgram { inputs, steps, outputs }
}

fn kernel(p: &FusedProgram) -> String {
    let kinds = vec![InputKind::Vector; p.inputs.len()];
    let src =
        cuda_kernel(p, &CudaVariant::Contiguous { kinds, vector: 1, packed: false, unroll: 1 });
    src[preamble().len()..].to_string()
}

#[test]
fn preamble_defines_the_complex_type_and_its_math() {
    for name in [
        "struct __align__(8) kc64 { float re, im; };",
        "K_INLINE kc64 operator/(kc64 a, kc64 b)",
        "K_INLINE bool operator<(kc64 a, kc64 b)",
        "K_INLINE kc64 k_exp(kc64 z)",
        "K_INLINE kc64 k_sqrt(kc64 z)",
        "K_INLINE kc64 k_atanh(kc64 z)",
        "K_INLINE kc64 k_logaddexp(kc64 a, kc64 b)",
        "K_INLINE kc64 __shfl_down_sync(unsigned mask, kc64 v, unsigned delta)",
    ] {
        assert!(preamble().contains(name), "{name}");
    }
    assert_eq!(kiln_codegen::c_type(DType::C64), "kc64");
    assert!(kiln_codegen::c::preamble().contains("typedef float _Complex kc64;"));
}

#[test]
fn conversions_take_the_real_part_or_build_a_complex_value() {
    let c = DType::C64;
    let p = program(
        vec![c, DType::I64],
        vec![
            (FusedOp::Input(0), c),
            (FusedOp::Input(1), DType::I64),
            (FusedOp::AsType(0), DType::Bool),
            (FusedOp::AsType(0), DType::I32),
            (FusedOp::AsType(0), DType::BF16),
            (FusedOp::AsType(1), c),
            (FusedOp::AsType(0), DType::F32),
        ],
        vec![2, 3, 4, 5, 6],
    );
    let k = kernel(&p);
    assert!(k.contains("const bool t2 = k_c64_nonzero(t0);"), "{k}");
    assert!(k.contains("const int32_t t3 = (int32_t)k_f2i32((double)((t0).re));"), "{k}");
    assert!(k.contains("const float t4 = k_round_bf16((float)((float)((t0).re)));"), "{k}");
    assert!(k.contains("const kc64 t5 = k_c64((float)(t1), 0.0f);"), "{k}");
    assert!(k.contains("const float t6 = (t0).re;"), "{k}");
    assert!(k.contains("const kc64 *__restrict__ in0"), "{k}");
}

#[test]
fn literals_and_operators() {
    let c = DType::C64;
    let p = program(
        vec![c],
        vec![
            (FusedOp::Input(0), c),
            (FusedOp::Literal(Scalar::Complex(0.5, -f64::INFINITY)), c),
            (FusedOp::Literal(Scalar::Float(2.0)), c),
            (FusedOp::Binary(BinaryOp::Divide, 0, 1), c),
            (FusedOp::Unary(UnaryOp::ArcCos, 3), c),
            (FusedOp::Binary(BinaryOp::LessEqual, 4, 2), DType::Bool),
        ],
        vec![4, 5],
    );
    let k = kernel(&p);
    assert!(k.contains("const kc64 t1 = k_c64(5e-1f, (-INFINITY));"), "{k}");
    assert!(k.contains("const kc64 t2 = k_c64(2e0f, 0e0f);"), "{k}");
    assert!(k.contains("const kc64 t3 = (kc64)(((t0) / (t1)));"), "{k}");
    assert!(k.contains("const kc64 t4 = (kc64)(k_acos((t3)));"), "{k}");
    assert!(k.contains("const bool t5 = (bool)(((t4) <= (t2)));"), "{k}");
}
