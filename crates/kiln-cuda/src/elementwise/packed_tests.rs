//! The paired half-precision kernels (kiln-codegen `cuda_packed`) for every op and the
//! benchmark workloads, dumped for the offline NVRTC check (`KILN_CUDA_DUMP=dir`).

use super::single_op_program;
use kiln_base::elementwise::Domain;
use kiln_base::{BinaryOp, DType, FusedOp, FusedProgram, FusedStep, Primitive, Scalar, UnaryOp};
use kiln_codegen::c::InputKind;
use kiln_codegen::cuda::{cuda_kernel, vector_width, CudaVariant};
use kiln_codegen::cuda_packed::packs;

/// Builds a program of one half dtype step by step.
struct Builder {
    dtype: DType,
    inputs: Vec<DType>,
    steps: Vec<FusedStep>,
}

impl Builder {
    fn new(dtype: DType) -> Self {
        Builder { dtype, inputs: vec![], steps: vec![] }
    }
    fn push(&mut self, op: FusedOp) -> usize {
        self.steps.push(FusedStep { op, dtype: self.dtype });
        self.steps.len() - 1
    }
    fn input(&mut self) -> usize {
        self.inputs.push(self.dtype);
        self.push(FusedOp::Input(self.inputs.len() - 1))
    }
    fn lit(&mut self, v: f64) -> usize {
        self.push(FusedOp::Literal(Scalar::Float(v)))
    }
    fn un(&mut self, op: UnaryOp, a: usize) -> usize {
        self.push(FusedOp::Unary(op, a))
    }
    fn bin(&mut self, op: BinaryOp, a: usize, b: usize) -> usize {
        self.push(FusedOp::Binary(op, a, b))
    }
    fn done(self, outputs: Vec<usize>) -> FusedProgram {
        FusedProgram { inputs: self.inputs, steps: self.steps, outputs }
    }
}

/// The five workloads of bench/gpu.py as compile fuses them (Python floats are weak: literals
/// of the array's dtype).
fn workloads(d: DType) -> Vec<(&'static str, FusedProgram)> {
    use BinaryOp::{Add, Divide, Maximum, Multiply, Subtract};
    let mut out = vec![];
    let mut b = Builder::new(d);
    let x = b.input();
    let (s2, one, two) = (b.lit(std::f64::consts::SQRT_2), b.lit(1.0), b.lit(2.0));
    let q = b.bin(Divide, x, s2);
    let e = b.un(UnaryOp::Erf, q);
    let e1 = b.bin(Add, one, e);
    let m = b.bin(Multiply, x, e1);
    let r = b.bin(Divide, m, two);
    out.push(("gelu_erf", b.done(vec![r])));

    let mut b = Builder::new(d);
    let x = b.input();
    let (h, c, k, one) = (b.lit(0.5), b.lit(0.7978845608), b.lit(0.044715), b.lit(1.0));
    let hx = b.bin(Multiply, h, x);
    let kx = b.bin(Multiply, k, x);
    let kxx = b.bin(Multiply, kx, x);
    let kxxx = b.bin(Multiply, kxx, x);
    let inner = b.bin(Add, x, kxxx);
    let ci = b.bin(Multiply, c, inner);
    let t = b.un(UnaryOp::Tanh, ci);
    let t1 = b.bin(Add, one, t);
    let r = b.bin(Multiply, hx, t1);
    out.push(("gelu_tanh", b.done(vec![r])));

    let mut b = Builder::new(d);
    let (g, u) = (b.input(), b.input());
    let s = b.un(UnaryOp::Sigmoid, g);
    let gs = b.bin(Multiply, g, s);
    let r = b.bin(Multiply, gs, u);
    out.push(("silu_mul", b.done(vec![r])));

    let mut b = Builder::new(d);
    let (x, y, z) = (b.input(), b.input(), b.input());
    let (zero, h) = (b.lit(0.0), b.lit(0.5));
    let xy = b.bin(Multiply, x, y);
    let xyz = b.bin(Add, xy, z);
    let relu = b.bin(Maximum, xyz, zero);
    let rh = b.bin(Multiply, relu, h);
    let r = b.bin(Add, rh, x);
    out.push(("relu_chain", b.done(vec![r])));

    let mut b = Builder::new(d);
    let (p, g, m, v) = (b.input(), b.input(), b.input(), b.input());
    let (b1, c1, b2, c2) = (b.lit(0.9), b.lit(0.1), b.lit(0.999), b.lit(1e-3));
    let (lr, eps) = (b.lit(1e-3), b.lit(1e-8));
    let (bm, cg) = (b.bin(Multiply, b1, m), b.bin(Multiply, c1, g));
    let m2 = b.bin(Add, bm, cg);
    let (bv, cg2) = (b.bin(Multiply, b2, v), b.bin(Multiply, c2, g));
    let cgg = b.bin(Multiply, cg2, g);
    let v2 = b.bin(Add, bv, cgg);
    let lm = b.bin(Multiply, lr, m2);
    let sv = b.un(UnaryOp::Sqrt, v2);
    let den = b.bin(Add, sv, eps);
    let step = b.bin(Divide, lm, den);
    let p2 = b.bin(Subtract, p, step);
    out.push(("adam", b.done(vec![p2, m2, v2])));
    out
}

/// Every float op on `d` as a one-step program, where, and conversions both ways.
fn single_ops(d: DType) -> Vec<(String, FusedProgram)> {
    let float_domain = |dom: Domain| matches!(dom, Domain::Any | Domain::Numeric | Domain::Float);
    let mut out = vec![];
    for op in UnaryOp::ALL.into_iter().filter(|op| float_domain(op.facts().domain)) {
        let p = single_op_program(&Primitive::Unary(op), &[d], d).unwrap();
        out.push((format!("unary_{}", op.facts().name), p));
    }
    for op in BinaryOp::ALL.into_iter().filter(|op| float_domain(op.facts().domain)) {
        let to = if op.facts().bool_output { DType::Bool } else { d };
        let p = single_op_program(&Primitive::Binary(op), &[d, d], to).unwrap();
        out.push((format!("binary_{}", op.facts().name), p));
    }
    let w = single_op_program(&Primitive::Where, &[DType::Bool, d, d], d).unwrap();
    out.push(("where".into(), w));
    for t in DType::ALL.into_iter().filter(|&t| t != d && t != DType::F64) {
        out.push((
            format!("astype_to_{t}"),
            single_op_program(&Primitive::AsType(t), &[d], t).unwrap(),
        ));
        out.push((
            format!("astype_from_{t}"),
            single_op_program(&Primitive::AsType(d), &[t], d).unwrap(),
        ));
    }
    out
}

#[test]
fn packed_half_kernels_generate_for_every_op() {
    let mut sources = vec![];
    for d in [DType::BF16, DType::F16, DType::F32] {
        if d == DType::F32 {
            // float32 workloads, one access and four per thread (they never pack).
            for (name, p) in workloads(d) {
                for unroll in [1, 4] {
                    let kinds = vec![InputKind::Vector; p.inputs.len()];
                    let v = CudaVariant::Contiguous { kinds, vector: 4, packed: false, unroll };
                    sources.push((format!("f32_{name}_{unroll}.cu"), cuda_kernel(&p, &v)));
                }
            }
            continue;
        }
        // The per-element variants of the workloads, to compare the two offline.
        for (name, p) in workloads(d) {
            let kinds = vec![InputKind::Vector; p.inputs.len()];
            let v = CudaVariant::Contiguous {
                kinds,
                vector: vector_width(&p),
                packed: false,
                unroll: 1,
            };
            sources.push((format!("perelem_{d}_{name}.cu"), cuda_kernel(&p, &v)));
            let kinds = vec![InputKind::Vector; p.inputs.len()];
            let v = CudaVariant::Contiguous {
                kinds,
                vector: vector_width(&p),
                packed: false,
                unroll: 4,
            };
            sources.push((format!("perelem_{d}_{name}_unrolled.cu"), cuda_kernel(&p, &v)));
        }
        let named = workloads(d).into_iter().map(|(n, p)| (n.to_string(), p));
        for (name, p) in named.chain(single_ops(d)) {
            let width = vector_width(&p);
            assert!(packs(&p, width), "{name} {d}");
            let n_in = p.inputs.len();
            let vector = CudaVariant::Contiguous {
                kinds: vec![InputKind::Vector; n_in],
                vector: width,
                packed: true,
                unroll: 1,
            };
            let src = cuda_kernel(&p, &vector);
            let paired = format!("(int u = 0; u < {}; ++u)", width / 2);
            assert!(src.contains(&paired), "{name} {d}: not paired");
            sources.push((format!("packed_{d}_{name}.cu"), src));
            // The last input broadcast: read packed once before the loop.
            let mut kinds = vec![InputKind::Vector; n_in];
            kinds[n_in - 1] = InputKind::Scalar;
            let bcast = CudaVariant::Contiguous { kinds, vector: width, packed: true, unroll: 1 };
            sources.push((format!("packed_{d}_{name}_bcast.cu"), cuda_kernel(&p, &bcast)));
            // Four accesses per thread (compute-bound programs), the last of several inputs
            // broadcast.
            let mut kinds = vec![InputKind::Vector; n_in];
            if n_in > 1 {
                kinds[n_in - 1] = InputKind::Scalar;
            }
            let unrolled =
                CudaVariant::Contiguous { kinds, vector: width, packed: true, unroll: 4 };
            let src = cuda_kernel(&p, &unrolled);
            assert!(src.contains("if (start + tile <= n) {"), "{name} {d}: not unrolled");
            sources.push((format!("packed_{d}_{name}_unrolled.cu"), src));
            // Rows of a strided layout, the last input broadcast along them (one value each).
            let mut kinds = vec![InputKind::Vector; n_in];
            kinds[n_in - 1] = InputKind::Scalar;
            let rows =
                CudaVariant::Rows { ndim: 3, wide: false, kinds, vector: width, packed: true };
            let src = cuda_kernel(&p, &rows);
            assert!(src.contains(&paired), "{name} {d}: rows not paired");
            assert!(src.contains("o0 += c * (int32_t)ix.strides[0][d];"), "{name} {d}");
            sources.push((format!("packed_{d}_{name}_rows.cu"), src));
        }
    }
    crate::nvrtc::dump_sources(&sources);
    let silu = &sources.iter().find(|(n, _)| n == "packed_bfloat16_silu_mul.cu").unwrap().1;
    assert!(silu.contains("const uint32_t p4 = k_mul_bf16x2(p3, p1);"));
    let relu = &sources.iter().find(|(n, _)| n == "packed_float16_relu_chain.cu").unwrap().1;
    assert!(relu.contains("const uint32_t p7 = k_relu_f16x2(p6);"));
    assert!(!relu.contains("const uint32_t p3 ="), "the zero is not read packed");
    let gelu = &sources.iter().find(|(n, _)| n == "packed_bfloat16_gelu_erf.cu").unwrap().1;
    assert!(gelu.contains("k_bf16x2_pack((float)(k_erf_unclamped(t4_0))"));
    let adam = &sources.iter().find(|(n, _)| n == "packed_float16_adam.cu").unwrap().1;
    assert!(adam.contains("k_f16x2_pack((float)(k_sqrt((t16_0)))"));
}
