//! Generated C kernels are vector code on every target and compute the eager kernels' bits.
//!
//! Every kernel shape the compile tests produce (each unary op, binary op, `where` and cast
//! on each dtype it takes, a few fused chains, scalar and strided variants, and sweeps of the
//! float32 math) is generated with kiln-codegen, built with `-march=x86-64-v3` (AVX2),
//! `-march=x86-64-v4` (AVX-512) and, where `aarch64-linux-gnu-gcc` is installed, for aarch64
//! (NEON). Each build's object is disassembled: a kernel whose steps all have vector forms
//! must hold no scalar float arithmetic and no lane extracts (its loop is vector code), and
//! float32 steps must use the target's full width (ymm, zmm, NEON `.4s`). Each build runs
//! where this CPU can (v4 only with AVX-512; aarch64 under `qemu-aarch64`) on the same inputs,
//! and its outputs must equal the eager kernels' (the interpreter tier, kiln-cpu's eager
//! kernels step by step) bit for bit, with these exceptions: a NaN equals any NaN (the sign
//! and payload of a NaN depend on operand order, which LLVM and gcc choose freely, and on the
//! architecture's default NaN; half-float signaling NaNs come out quiet where eager's moves
//! keep their bits); steps computed lane by lane with glibc's libm (sin, asinh, float64 erf:
//! eager uses Rust's implementations of some) within 2 ulp; float64 -> float16/bfloat16
//! casts within 1 ulp (eager's half crate rounds from the double's top 32 bits).
//!
//! Skipped with a message where there is no `cc`, or no `objdump`.

mod common;

use common::arr;
use kiln_base::{
    ArrayData, Backend, BinaryOp, DType, Domain, FusedOp, FusedProgram, FusedStep, Primitive,
    Scalar, UnaryOp,
};
use kiln_codegen::c::{c_kernel, kernel_preamble, preamble_for, InputKind, Variant};
use kiln_cpu::fused::jit::{set_mode, JitMode};
use kiln_cpu::CpuBackend;
use std::fmt::Write as _;
use std::process::Command;
use std::sync::Arc;

const DTYPES: [DType; 13] = [
    DType::Bool,
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::F64,
];

/// Elements per case: not a multiple of any lane count (the tail runs) and split in two
/// calls at an odd index (a begin that is not a multiple of the lanes).
const N: usize = 1031;

fn step(op: FusedOp, dtype: DType) -> FusedStep {
    FusedStep { op, dtype }
}

/// A small deterministic generator.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 11
    }
    fn unit(&mut self) -> f64 {
        (self.next() % (1 << 40)) as f64 / (1u64 << 40) as f64
    }
}

/// `n` test values of `dtype` as stored bytes: edge values first, then a mix of small,
/// medium and arbitrary-bit values.
fn values(dtype: DType, n: usize, seed: u64) -> Vec<u8> {
    let mut r = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ dtype.size() as u64);
    let mut out = Vec::with_capacity(n * dtype.size());
    let specials = [
        f64::NAN,
        -f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -2.5,
        2.5,
        3.5,
        1e-45,
        -1e-40,
        1.17549435e-38,
        3.4e38,
        -3.4e38,
        88.72,
        -103.97,
        9.01,
        -3.925,
        4.0,
        0.41,
        -0.29,
        2147483648.0,
        -2147483904.0,
        4294967296.0,
        65519.0,
        65520.0,
        6.1e-5,
        -5.96e-8,
        1e-30,
        1e300,
        -1e-310,
    ];
    for i in 0..n {
        let pick = r.next() % 4;
        let f = if i < specials.len() {
            specials[i]
        } else {
            match pick {
                0 => (r.unit() - 0.5) * 24.0,
                1 => (r.unit() - 0.5) * 2.0e5,
                2 => (r.unit() - 0.5) * 3.0,
                _ => f64::from_bits(r.next() << 11 ^ r.next()),
            }
        };
        let bits = r.next() ^ (r.next() << 32);
        let int_edge = |i: usize| [0i64, 1, -1, 2, -2, i64::MIN, i64::MAX, 127, -128, 255].get(i);
        match dtype {
            DType::Bool => out.push((bits & 1) as u8),
            DType::F16 => {
                let h = if pick == 3 || i < specials.len() && i % 2 == 1 {
                    half::f16::from_bits(bits as u16)
                } else {
                    half::f16::from_f64(f)
                };
                out.extend(h.to_bits().to_le_bytes());
            }
            DType::BF16 => {
                let h = if pick == 3 {
                    half::bf16::from_bits(bits as u16)
                } else {
                    half::bf16::from_f64(f)
                };
                out.extend(h.to_bits().to_le_bytes());
            }
            DType::F32 => {
                let v = if pick == 3 && i >= specials.len() {
                    f32::from_bits(bits as u32)
                } else {
                    f as f32
                };
                out.extend(v.to_le_bytes());
            }
            DType::F64 => out.extend(f.to_le_bytes()),
            d => {
                let v = match int_edge(i) {
                    Some(&e) => e as u64,
                    None if pick == 0 => bits % 9, // small: shift counts, exponents
                    None if pick == 1 => (f as i64) as u64,
                    None => bits,
                };
                out.extend(&v.to_le_bytes()[..d.size()]);
            }
        }
    }
    out
}

/// One kernel to check.
struct Case {
    name: String,
    program: FusedProgram,
    variant: Variant,
    /// Stored bytes of each input as the kernel reads it (scalars: one element; strided:
    /// the transposed storage of a (COLS, N / COLS) array).
    inputs: Vec<Vec<u8>>,
    /// The eager outputs (row-major bytes).
    want: Vec<Vec<u8>>,
    /// Any step computed lane by lane (no vector form).
    lane_steps: bool,
    /// Any step computed by a libm function (results may differ across architectures).
    libm: bool,
}

const COLS: usize = 7;

fn unary_takes(op: UnaryOp, d: DType) -> bool {
    let facts = op.facts();
    match facts.domain {
        Domain::Float => d.is_float() && kiln_codegen::c::supports_unary(op, d),
        Domain::Numeric => d != DType::Bool,
        Domain::Any => true,
        Domain::Bool => d == DType::Bool,
        Domain::Integer => !d.is_float(),
    }
}

fn binary_takes(op: BinaryOp, d: DType) -> bool {
    match op.facts().domain {
        Domain::Float => d.is_float(),
        Domain::Numeric => d != DType::Bool,
        Domain::Any => true,
        Domain::Bool => d == DType::Bool,
        // Shifts of bool: no shift helper for bool in the C preamble (and MLX rejects them).
        Domain::Integer => {
            let bool_shift =
                d == DType::Bool && matches!(op, BinaryOp::LeftShift | BinaryOp::RightShift);
            !(d.is_float() || bool_shift)
        }
    }
}

/// Ops computed with libm calls (per lane in C, libm in eager: equal on one machine).
fn uses_libm(p: &FusedProgram) -> bool {
    p.steps.iter().any(|s| match &s.op {
        FusedOp::Unary(op, _) => {
            let f32_vector = matches!(
                op,
                UnaryOp::Exp
                    | UnaryOp::Expm1
                    | UnaryOp::Log
                    | UnaryOp::Log1p
                    | UnaryOp::Tanh
                    | UnaryOp::Sigmoid
                    | UnaryOp::Erf
            ) && s.dtype != DType::F64;
            op.facts().cost >= 20 && !f32_vector
        }
        FusedOp::Binary(op, ..) => {
            matches!(
                op,
                BinaryOp::Power | BinaryOp::LogAddExp | BinaryOp::ArcTan2 | BinaryOp::Remainder
            ) && s.dtype.is_float()
        }
        _ => false,
    })
}

/// Every kernel shape: single ops on every dtype they take, casts, chains, variants.
fn programs() -> Vec<(String, FusedProgram, Variant)> {
    let mut out = Vec::new();
    let contiguous = |n: usize| Variant::Contiguous(vec![InputKind::Vector; n]);
    for d in DTYPES {
        for op in UnaryOp::ALL {
            if !unary_takes(op, d) {
                continue;
            }
            let od = if op.facts().bool_output { DType::Bool } else { d };
            let p = FusedProgram {
                inputs: vec![d],
                steps: vec![step(FusedOp::Input(0), d), step(FusedOp::Unary(op, 0), od)],
                outputs: vec![1],
            };
            out.push((format!("{}_{d}", op.facts().name), p, contiguous(1)));
        }
        for op in BinaryOp::ALL {
            if !binary_takes(op, d) {
                continue;
            }
            let od = if op.facts().bool_output { DType::Bool } else { d };
            let p = FusedProgram {
                inputs: vec![d, d],
                steps: vec![
                    step(FusedOp::Input(0), d),
                    step(FusedOp::Input(1), d),
                    step(FusedOp::Binary(op, 0, 1), od),
                ],
                outputs: vec![2],
            };
            let name = format!("{}_{d}", op.facts().name);
            if matches!(op, BinaryOp::Add | BinaryOp::Maximum | BinaryOp::Less | BinaryOp::Multiply)
            {
                let scalar = Variant::Contiguous(vec![InputKind::Vector, InputKind::Scalar]);
                out.push((format!("{name}_scalar"), p.clone(), scalar));
                out.push((format!("{name}_strided"), p.clone(), Variant::Strided));
            }
            out.push((name, p, contiguous(2)));
        }
        let p = FusedProgram {
            inputs: vec![DType::Bool, d, d],
            steps: vec![
                step(FusedOp::Input(0), DType::Bool),
                step(FusedOp::Input(1), d),
                step(FusedOp::Input(2), d),
                step(FusedOp::Where(0, 1, 2), d),
            ],
            outputs: vec![3],
        };
        out.push((format!("where_{d}"), p, contiguous(3)));
        for to in DTYPES {
            if to == d {
                continue;
            }
            let p = FusedProgram {
                inputs: vec![d],
                steps: vec![step(FusedOp::Input(0), d), step(FusedOp::AsType(0), to)],
                outputs: vec![1],
            };
            out.push((format!("astype_{d}_{to}"), p, contiguous(1)));
        }
    }
    // Chains as models fuse them (gelu with erf and with tanh, silu * gate, relu chain), on
    // float32 and the half types, with literals, several outputs, scalar and strided inputs.
    for d in [DType::F32, DType::F16, DType::BF16] {
        let lit = |v: f64| step(FusedOp::Literal(Scalar::Float(v)), d);
        let bin = |op, a, b| step(FusedOp::Binary(op, a, b), d);
        let un = |op, a| step(FusedOp::Unary(op, a), d);
        use BinaryOp::*;
        let gelu_erf = FusedProgram {
            inputs: vec![d],
            steps: vec![
                step(FusedOp::Input(0), d),
                lit(std::f64::consts::SQRT_2),
                bin(Divide, 0, 1),
                un(UnaryOp::Erf, 2),
                lit(1.0),
                bin(Add, 3, 4),
                bin(Multiply, 0, 5),
                lit(2.0),
                bin(Divide, 6, 7),
            ],
            outputs: vec![8],
        };
        let gelu_tanh = FusedProgram {
            inputs: vec![d],
            steps: vec![
                step(FusedOp::Input(0), d),
                lit(0.044715),
                bin(Multiply, 0, 1),
                bin(Multiply, 2, 0),
                bin(Multiply, 3, 0),
                bin(Add, 0, 4),
                lit(0.7978845608),
                bin(Multiply, 6, 5),
                un(UnaryOp::Tanh, 7),
                lit(1.0),
                bin(Add, 9, 8),
                lit(0.5),
                bin(Multiply, 11, 0),
                bin(Multiply, 12, 10),
            ],
            outputs: vec![13, 8],
        };
        let silu_mul = FusedProgram {
            inputs: vec![d, d],
            steps: vec![
                step(FusedOp::Input(0), d),
                step(FusedOp::Input(1), d),
                un(UnaryOp::Sigmoid, 0),
                bin(Multiply, 0, 2),
                bin(Multiply, 3, 1),
            ],
            outputs: vec![4],
        };
        let relu_chain = FusedProgram {
            inputs: vec![d, d],
            steps: vec![
                step(FusedOp::Input(0), d),
                step(FusedOp::Input(1), d),
                lit(2.0),
                bin(Multiply, 0, 2),
                bin(Add, 3, 1),
                lit(0.0),
                bin(Maximum, 4, 5),
                un(UnaryOp::Exp, 6),
                un(UnaryOp::Log1p, 7),
                un(UnaryOp::Expm1, 0),
                un(UnaryOp::Log, 1),
                bin(Add, 9, 10),
                step(FusedOp::Binary(Greater, 0, 1), DType::Bool),
                step(FusedOp::Where(12, 8, 11), d),
            ],
            outputs: vec![13, 12],
        };
        for (name, p) in [
            ("gelu_erf", gelu_erf),
            ("gelu_tanh", gelu_tanh),
            ("silu_mul", silu_mul),
            ("relu_chain", relu_chain),
        ] {
            let n = p.inputs.len();
            out.push((format!("{name}_{d}_strided"), p.clone(), Variant::Strided));
            let mut kinds = vec![InputKind::Vector; n];
            kinds[n - 1] = InputKind::Scalar;
            if n > 1 {
                out.push((format!("{name}_{d}_scalar"), p.clone(), Variant::Contiguous(kinds)));
            }
            out.push((format!("{name}_{d}"), p, contiguous(n)));
        }
    }
    out
}

/// The eager outputs of `program` over logical row-major inputs `logical` (scalars given
/// as full arrays of their value), through the interpreter tier (eager kernels per step).
fn eager(program: &FusedProgram, logical: &[Vec<u8>], n: usize) -> Option<Vec<Vec<u8>>> {
    let inputs: Vec<ArrayData> = logical
        .iter()
        .zip(&program.inputs)
        .map(|(b, &d)| raw(&arr(b, &[b.len()], DType::U8), d, n))
        .collect();
    let outs: Vec<(kiln_base::Shape, DType)> = program
        .output_dtypes()
        .into_iter()
        .map(|d| (kiln_base::Shape::from_slice(&[n]), d))
        .collect();
    let prim = Primitive::Fused(Arc::new(program.clone()));
    let res = CpuBackend.eval(&prim, &inputs, &outs).ok()?;
    Some(res.iter().map(bytes).collect())
}

/// The u8 buffer `x` seen as `n` elements of `d`.
fn raw(x: &ArrayData, d: DType, n: usize) -> ArrayData {
    ArrayData { buffer: x.buffer.clone(), layout: kiln_base::Layout::contiguous(&[n]), dtype: d }
}

/// The row-major bytes of a contiguous array.
fn bytes(x: &ArrayData) -> Vec<u8> {
    let l = &x.layout;
    assert!(l.row_contiguous);
    let size = x.dtype.size();
    x.buffer.host_slice::<u8>()[l.offset * size..(l.offset + l.size()) * size].to_vec()
}

fn cases() -> Vec<Case> {
    set_mode(Some(JitMode::Off));
    let mut out = Vec::new();
    for (i, (name, program, variant)) in programs().into_iter().enumerate() {
        let n = N;
        let logical: Vec<Vec<u8>> = program
            .inputs
            .iter()
            .enumerate()
            .map(|(k, &d)| values(d, n, (i * 31 + k) as u64 + if k > 0 { 1000 } else { 0 }))
            .collect();
        let mut logical_used = logical.clone();
        let mut inputs = logical.clone();
        match &variant {
            Variant::Contiguous(kinds) => {
                for (k, kind) in kinds.iter().enumerate() {
                    if *kind == InputKind::Scalar {
                        let s = program.inputs[k].size();
                        // a value past the edge values, repeated
                        let one = logical[k][40 * s..41 * s].to_vec();
                        logical_used[k] = one.repeat(n);
                        inputs[k] = one;
                    }
                }
            }
            Variant::Strided => {
                // Logical (n / COLS, COLS) row-major = the transpose of stored (COLS, n / COLS).
                let rows = n / COLS;
                for (k, &d) in program.inputs.iter().enumerate() {
                    let s = d.size();
                    let mut stored = vec![0u8; rows * COLS * s];
                    for r in 0..rows {
                        for c in 0..COLS {
                            let (src, dst) = ((r * COLS + c) * s, (c * rows + r) * s);
                            stored[dst..dst + s].copy_from_slice(&logical[k][src..src + s]);
                        }
                    }
                    inputs[k] = stored;
                    logical_used[k].truncate(rows * COLS * s);
                }
            }
        }
        let n_used = match variant {
            Variant::Strided => (n / COLS) * COLS,
            _ => n,
        };
        let Some(want) = eager(&program, &logical_used, n_used) else {
            continue; // eager rejects this op on this dtype: compile never fuses it
        };
        let lane_steps = kiln_codegen::c::lane_steps(&program) > 0;
        let libm = uses_libm(&program);
        out.push(Case { name, program, variant, inputs, want, lane_steps, libm });
    }
    // Sweeps of the float32 math: 2^20 bit patterns over every exponent, both signs.
    for op in [
        UnaryOp::Exp,
        UnaryOp::Expm1,
        UnaryOp::Log,
        UnaryOp::Log1p,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Erf,
    ] {
        let d = DType::F32;
        let program = FusedProgram {
            inputs: vec![d],
            steps: vec![step(FusedOp::Input(0), d), step(FusedOp::Unary(op, 0), d)],
            outputs: vec![1],
        };
        let xs: Vec<u8> = (0..1u32 << 20)
            .flat_map(|i| (i.wrapping_mul(4093) ^ (i << 12)).to_le_bytes())
            .collect();
        let n = xs.len() / 4;
        let want = eager(&program, std::slice::from_ref(&xs), n).unwrap();
        let name = format!("sweep_{}", op.facts().name);
        let variant = Variant::Contiguous(vec![InputKind::Vector]);
        out.push(Case {
            name,
            program,
            variant,
            inputs: vec![xs],
            want,
            lane_steps: false,
            libm: false,
        });
    }
    set_mode(None);
    out
}

/// Elements a case runs over.
fn case_len(c: &Case) -> usize {
    c.want[0].len() / c.program.steps[c.program.outputs[0]].dtype.size()
}

/// The kernels' sources (one per lane width, each with its preamble once and the kernels
/// renamed) and the driver that runs them on `in.bin` and writes `out.bin`.
fn sources(cases: &[Case]) -> (Vec<String>, String) {
    let mut kernels: Vec<String> =
        [1, 2, 4, 8].iter().map(|&lb| preamble_for(lb).to_string()).collect();
    let mut driver = String::from(
        "#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n\
         typedef void (*kc)(int64_t, int64_t, void *const *, void *const *);\n\
         typedef void (*ks)(int64_t, int64_t, void *const *, void *const *, int64_t, const int64_t *, const int64_t *);\n",
    );
    for (i, c) in cases.iter().enumerate() {
        let src = c_kernel(&c.program, &c.variant);
        let pre = kernel_preamble(&c.program);
        let body = &src[pre.len()..];
        let group = [1, 2, 4, 8].iter().position(|&lb| preamble_for(lb) == pre).unwrap();
        kernels[group]
            .push_str(&body.replace("void kiln_kernel(", &format!("void kiln_kernel_{i}(")));
        let params = match c.variant {
            Variant::Strided => ", int64_t, const int64_t *, const int64_t *",
            _ => "",
        };
        let _ = writeln!(
            driver,
            "void kiln_kernel_{i}(int64_t, int64_t, void *const *, void *const *{params});"
        );
    }
    driver.push_str(
        "int main(int argc, char **argv) {\n    FILE *f = fopen(argv[1], \"rb\");\n    fseek(f, 0, SEEK_END);\n    long len = ftell(f);\n    fseek(f, 0, SEEK_SET);\n    char *D = malloc(len + 1);\n    if (fread(D, 1, len, f) != (size_t)len) return 1;\n    fclose(f);\n",
    );
    let (mut in_off, mut out_off) = (0usize, 0usize);
    let mut body = String::new();
    for (i, c) in cases.iter().enumerate() {
        let n = case_len(c);
        let ins: Vec<String> = c
            .inputs
            .iter()
            .map(|b| {
                let s = format!("D + {in_off}");
                in_off += b.len();
                s
            })
            .collect();
        let outs: Vec<String> = c
            .want
            .iter()
            .map(|b| {
                let s = format!("O + {out_off}");
                out_off += b.len();
                s
            })
            .collect();
        let _ = writeln!(
            body,
            "    {{\n        void *ins[] = {{{}}};\n        void *outs[] = {{{}}};",
            ins.join(", "),
            outs.join(", ")
        );
        let split = (n / 3) | 1;
        match c.variant {
            Variant::Strided => {
                let rows = n / COLS;
                let strides: Vec<String> =
                    (0..c.inputs.len()).flat_map(|_| ["1".to_string(), rows.to_string()]).collect();
                let _ = writeln!(body, "        const int64_t shape[] = {{{rows}, {COLS}}};\n        const int64_t strides[] = {{{}}};", strides.join(", "));
                let _ = writeln!(body, "        kiln_kernel_{i}(0, {split}, ins, outs, 2, shape, strides);\n        kiln_kernel_{i}({split}, {n}, ins, outs, 2, shape, strides);");
            }
            _ => {
                let _ = writeln!(body, "        kiln_kernel_{i}(0, {split}, ins, outs);\n        kiln_kernel_{i}({split}, {n}, ins, outs);");
            }
        }
        body.push_str("    }\n");
    }
    let _ = writeln!(driver, "    char *O = calloc({out_off} + 1, 1);");
    driver.push_str(&body);
    let _ = writeln!(driver, "    f = fopen(argv[2], \"wb\");\n    fwrite(O, 1, {out_off}, f);\n    fclose(f);\n    return 0;\n}}");
    (kernels, driver)
}

/// A build target: compiler, flags, objdump, how to run.
struct Target {
    name: &'static str,
    cc: String,
    flags: Vec<&'static str>,
    objdump: String,
    runner: Option<Vec<String>>,
    /// The register name of a full float32 vector.
    full_width: &'static str,
    x86: bool,
}

fn have(cmd: &str) -> bool {
    Command::new(cmd).arg("--version").output().is_ok_and(|o| o.status.success())
}

fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    out
}

/// Splits a disassembly into each `kiln_kernel_<i>`'s instructions.
fn functions(asm: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    for line in asm.lines() {
        if let Some(rest) =
            line.split_once("<kiln_kernel_").map(|(_, r)| r).filter(|_| line.ends_with(">:"))
        {
            let i: usize = rest.trim_end_matches(">:").parse().unwrap();
            out.push((i, String::new()));
        } else if line.trim_end().ends_with(">:") {
            out.push((usize::MAX, String::new()));
        } else if let Some(last) = out.last_mut() {
            last.1.push_str(line);
            last.1.push('\n');
        }
    }
    out.retain(|(i, _)| *i != usize::MAX);
    out
}

/// Scalar float arithmetic or lane moves in a kernel's instructions (the loop is not vector
/// code), as offending lines. `contiguous`: integer multiplies count too (the strided
/// variant computes offsets with them).
fn scalar_code(asm: &str, x86: bool, contiguous: bool) -> Vec<String> {
    let scalar_x86 = |m: &str| {
        let m = m.strip_prefix('v').unwrap_or(m);
        let base = m.strip_suffix("ss").or_else(|| m.strip_suffix("sd"));
        let arith = ["add", "sub", "mul", "div", "sqrt", "min", "max", "rcp", "rsqrt"];
        base.is_some_and(|b| {
            arith.contains(&b)
                || (b.starts_with("fmadd") || b.starts_with("fmsub") || b.starts_with("fnm"))
                || b == "ucomi"
                || b == "comi"
        }) || m.starts_with("cvtsi2s")
            || m.starts_with("cvttss2")
            || m.starts_with("cvttsd2")
            || m.starts_with("cvtss2")
            || m.starts_with("cvtsd2")
            || m.starts_with("pextr")
            || m.starts_with("pinsr")
            || m == "extractps"
            || m == "insertps"
            || (contiguous && m.starts_with("imul"))
    };
    let arm_bad = [
        "fadd", "fsub", "fmul", "fdiv", "fsqrt", "fmadd", "fmsub", "fmax", "fmin", "fcvtz",
        "scvtf", "ucvtf", "fcmp", "fcsel",
    ];
    asm.lines()
        .filter(|l| {
            let ins = l.split('\t').skip(1).collect::<Vec<_>>().join(" ");
            let ins = ins.trim();
            let mnemonic = ins.split_whitespace().next().unwrap_or("");
            if x86 {
                scalar_x86(mnemonic)
            } else {
                // Scalar forms use s/d/h registers; vector forms name lanes (v0.4s). Moving
                // lane 0 out stores a short vector (two bools) and is fine.
                let ops = ins.split_whitespace().nth(1).unwrap_or("");
                (arm_bad.iter().any(|b| mnemonic.starts_with(b))
                    && (ops.starts_with('s') || ops.starts_with('d') || ops.starts_with('h')))
                    || (matches!(mnemonic, "umov" | "smov" | "ins" | "mov")
                        && ins.contains('[')
                        && !ins.contains("[0]"))
            }
        })
        .map(|l| l.trim().to_string())
        .collect()
}

/// What NEON (or gcc 12 for it) computes lane by lane: 64-bit integer multiplies (no NEON
/// instruction) and conversions between float64 and integer or float32 lanes.
fn neon_gap(p: &FusedProgram) -> bool {
    p.steps.iter().any(|s| match s.op {
        FusedOp::Binary(BinaryOp::Multiply, a, _) => p.steps[a].dtype.size() == 8,
        FusedOp::AsType(a) => (s.dtype == DType::F64) != (p.steps[a].dtype == DType::F64),
        _ => false,
    })
}

fn targets() -> Vec<Target> {
    let cc = std::env::var("KILN_CC").unwrap_or_else(|_| "cc".into());
    let mut t = Vec::new();
    if !have(&cc) || !have("objdump") {
        eprintln!("no C compiler or objdump: skipped");
        return t;
    }
    if cfg!(target_arch = "x86_64") {
        t.push(Target {
            name: "x86-64-v3",
            cc: cc.clone(),
            flags: vec!["-march=x86-64-v3"],
            objdump: "objdump".into(),
            runner: Some(vec![]),
            full_width: "%ymm",
            x86: true,
        });
        let avx512 = ["avx512f", "avx512bw", "avx512dq", "avx512vl"]
            .iter()
            .all(|f| std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|s| s.contains(f)));
        if !avx512 {
            eprintln!("no AVX-512 here: the x86-64-v4 build is checked, not run");
        }
        t.push(Target {
            name: "x86-64-v4",
            cc: cc.clone(),
            flags: vec!["-march=x86-64-v4"],
            objdump: "objdump".into(),
            runner: avx512.then(Vec::new),
            full_width: "%zmm",
            x86: true,
        });
        if have("aarch64-linux-gnu-gcc") {
            let qemu = have("qemu-aarch64");
            if !qemu {
                eprintln!("no qemu-aarch64: the aarch64 build is checked, not run");
            }
            t.push(Target {
                name: "aarch64",
                cc: "aarch64-linux-gnu-gcc".into(),
                flags: vec!["-march=armv8-a"],
                objdump: if have("aarch64-linux-gnu-objdump") {
                    "aarch64-linux-gnu-objdump".into()
                } else {
                    "objdump".into()
                },
                runner: qemu.then(|| {
                    vec!["qemu-aarch64".into(), "-L".into(), "/usr/aarch64-linux-gnu".into()]
                }),
                full_width: ".4s",
                x86: false,
            });
        } else {
            eprintln!(
                "no aarch64-linux-gnu-gcc: the aarch64 build is skipped \
                 (apt-get install gcc-aarch64-linux-gnu qemu-user)"
            );
        }
    } else {
        t.push(Target {
            name: "native",
            cc: cc.clone(),
            flags: vec!["-march=native"],
            objdump: "objdump".into(),
            runner: Some(vec![]),
            full_width: if cfg!(target_arch = "aarch64") { ".4s" } else { "" },
            x86: false,
        });
    }
    t
}

/// Within `ulps` of each other as floats of `d` (NaN equal to NaN).
fn close(d: DType, a: &[u8], b: &[u8], ulps: u64) -> bool {
    let to_f64 = |x: &[u8]| -> (f64, i64) {
        match d {
            DType::F32 => {
                let v = f32::from_le_bytes(x.try_into().unwrap());
                (v as f64, ordered(v.to_bits() as u64, 32))
            }
            DType::F64 => {
                let v = f64::from_le_bytes(x.try_into().unwrap());
                (v, ordered(v.to_bits(), 64))
            }
            DType::F16 => {
                let v = half::f16::from_le_bytes(x.try_into().unwrap());
                (v.to_f64(), ordered(v.to_bits() as u64, 16))
            }
            _ => {
                let v = half::bf16::from_le_bytes(x.try_into().unwrap());
                (v.to_f64(), ordered(v.to_bits() as u64, 16))
            }
        }
    };
    let ((x, ox), (y, oy)) = (to_f64(a), to_f64(b));
    (x.is_nan() && y.is_nan()) || ox.abs_diff(oy) <= ulps
}

/// Float bits mapped to integers in the order of the values.
fn ordered(bits: u64, width: u32) -> i64 {
    let sign = 1u64 << (width - 1);
    if bits & sign != 0 {
        -((bits & !sign) as i64)
    } else {
        bits as i64
    }
}

#[test]
fn kernels_are_vector_code_and_equal_eager() {
    let targets = targets();
    if targets.is_empty() {
        return;
    }
    let cases = cases();
    let dir = std::env::temp_dir().join(format!("kiln-fused-vectors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (kernels, driver) = sources(&cases);
    for (g, k) in kernels.iter().enumerate() {
        std::fs::write(dir.join(format!("kernels{g}.c")), k).unwrap();
    }
    std::fs::write(dir.join("main.c"), driver).unwrap();
    let input: Vec<u8> = cases.iter().flat_map(|c| c.inputs.concat()).collect();
    std::fs::write(dir.join("in.bin"), &input).unwrap();
    // Build every target's objects at once (one compiler per object, in parallel), then link.
    let builds: Vec<_> = targets
        .iter()
        .flat_map(|t| (0..4).map(move |g| (t, g)))
        .map(|(t, g)| {
            let obj = dir.join(format!("{}-{g}.o", t.name));
            let (cc, flags, src) =
                (t.cc.clone(), t.flags.clone(), dir.join(format!("kernels{g}.c")));
            std::thread::spawn(move || {
                run(Command::new(&cc)
                    .args(["-O3", "-std=gnu11", "-fwrapv", "-ffp-contract=off", "-fno-math-errno"])
                    // (no merging of identical kernels: each keeps its own code to check)
                    .args(["-fno-ipa-icf", "-c", "-o"])
                    .arg(&obj)
                    .arg(src)
                    .args(&flags));
            })
        })
        .collect();
    for b in builds {
        b.join().unwrap();
    }
    for t in &targets {
        let objs = (0..4).map(|g| dir.join(format!("{}-{g}.o", t.name)));
        run(Command::new(&t.cc)
            .args(["-O2", "-o"])
            .arg(dir.join(t.name))
            .arg(dir.join("main.c"))
            .args(objs)
            .arg("-lm"));
    }
    let mut failures = Vec::new();
    let mut lane_by_lane: Vec<&str> = Vec::new();
    for t in &targets {
        let mut fns = Vec::new();
        for g in 0..4 {
            let obj = dir.join(format!("{}-{g}.o", t.name));
            let asm =
                run(Command::new(&t.objdump).args(["-d", "--no-show-raw-insn"]).arg(&obj)).stdout;
            fns.extend(functions(&String::from_utf8_lossy(&asm)));
        }
        assert_eq!(fns.len(), cases.len(), "{}: kernels in the object", t.name);
        for (i, code) in &fns {
            let c = &cases[*i];
            if c.lane_steps {
                if t.name == "x86-64-v3" {
                    lane_by_lane.push(&c.name);
                }
                continue;
            }
            // A broadcast input's loop-invariant steps may be hoisted and computed once, in
            // scalar registers (all its lanes are equal): scalar variants skip this check.
            let scalar_inputs =
                matches!(&c.variant, Variant::Contiguous(k) if k.contains(&InputKind::Scalar));
            let bad = if scalar_inputs || (!t.x86 && neon_gap(&c.program)) {
                Vec::new()
            } else {
                scalar_code(code, t.x86, c.variant != Variant::Strided)
            };
            if !bad.is_empty() {
                failures.push(format!(
                    "{} {}: not vector code: {}",
                    t.name,
                    c.name,
                    bad[..bad.len().min(4)].join(" | ")
                ));
            }
            let f32_lanes = c
                .program
                .steps
                .iter()
                .any(|s| matches!(s.dtype, DType::F32 | DType::F16 | DType::BF16))
                && !c.program.steps.iter().any(|s| s.dtype.size() == 8);
            if f32_lanes && !code.contains(t.full_width) {
                failures.push(format!("{} {}: no {} registers", t.name, c.name, t.full_width));
            }
        }
        let Some(runner) = &t.runner else { continue };
        let out_path = dir.join(format!("{}.out", t.name));
        let exe = dir.join(t.name);
        let mut cmd = match runner.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        run(cmd.arg(dir.join("in.bin")).arg(&out_path));
        let got = std::fs::read(&out_path).unwrap();
        let mut off = 0;
        for c in &cases {
            for (k, want) in c.want.iter().enumerate() {
                let d = c.program.steps[c.program.outputs[k]].dtype;
                let g = &got[off..off + want.len()];
                off += want.len();
                if g == want.as_slice() {
                    continue;
                }
                let s = d.size();
                // libm steps: glibc per lane against eager's Rust implementations (asinh,
                // acosh, atanh, float64 erf) or another libm (aarch64); float64 -> half casts:
                // eager's half crate rounds from the double's top 32 bits.
                let half_from_f64 = c.program.steps.iter().any(|st| {
                    matches!(st.op, FusedOp::AsType(a) if c.program.steps[a].dtype == DType::F64)
                        && matches!(st.dtype, DType::F16 | DType::BF16)
                });
                let ulps = if c.libm {
                    2
                } else if half_from_f64 {
                    1
                } else {
                    0
                };
                let bad: Vec<usize> = (0..want.len() / s)
                    .filter(|&e| {
                        let (a, b) = (&g[e * s..(e + 1) * s], &want[e * s..(e + 1) * s]);
                        a != b && !(d.is_float() && close(d, a, b, ulps))
                    })
                    .collect();
                if let Some(&e) = bad.first() {
                    failures.push(format!(
                        "{} {} output {k}: {} elements differ, first at {e}: got {:02x?} want {:02x?} (input {:02x?})",
                        t.name,
                        c.name,
                        bad.len(),
                        &g[e * s..(e + 1) * s],
                        &want[e * s..(e + 1) * s],
                        c.inputs.iter().map(|x| x.get(e * c.program.inputs[0].size()..(e + 1) * c.program.inputs[0].size()).map(<[u8]>::to_vec)).collect::<Vec<_>>(),
                    ));
                }
            }
        }
    }
    eprintln!(
        "{} kernels on {}; computed lane by lane (libm, integer division, 64-bit conversions): {}",
        cases.len(),
        targets.iter().map(|t| t.name).collect::<Vec<_>>().join(", "),
        lane_by_lane.join(" ")
    );
    if failures.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(
        failures.is_empty(),
        "{} failures (sources in {}):\n{}",
        failures.len(),
        dir.display(),
        failures.join("\n")
    );
}
