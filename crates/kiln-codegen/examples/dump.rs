use kiln_base::{BinaryOp, DType, Domain, FusedOp, FusedProgram, FusedStep, Scalar, UnaryOp};
use kiln_codegen::c::{c_kernel, InputKind, Variant};
const COLS: usize = 7;
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

fn step(op: FusedOp, dtype: DType) -> FusedStep {
    FusedStep { op, dtype }
}

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
            !d.is_float() && !(d == DType::Bool && matches!(op, BinaryOp::LeftShift | BinaryOp::RightShift))
        }
    }
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
            if matches!(op, BinaryOp::Add | BinaryOp::Maximum | BinaryOp::Less | BinaryOp::Multiply) {
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
        for (name, p) in
            [("gelu_erf", gelu_erf), ("gelu_tanh", gelu_tanh), ("silu_mul", silu_mul), ("relu_chain", relu_chain)]
        {
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


fn main() {
    let mut ks: Vec<String> = [1,2,4,8].iter().map(|&l| kiln_codegen::c::preamble_for(l).to_string()).collect();
    let mut lanes = 0;
    for (i, (name, p, v)) in programs().into_iter().enumerate() {
        let src = c_kernel(&p, &v);
        if kiln_codegen::c::lane_steps(&p) > 0 { lanes += 1; }
        let pre = kiln_codegen::c::kernel_preamble(&p);
        let g = [1,2,4,8].iter().position(|&l| kiln_codegen::c::preamble_for(l) == pre).unwrap();
        ks[g].push_str(&format!("/* case {i} {name} */"));
        ks[g].push_str(&src[pre.len()..].replace("void kiln_kernel(", &format!("void kiln_kernel_{i}(")));
    }
    for (g, k) in ks.iter().enumerate() { std::fs::write(format!("/tmp/v23/all{g}.c"), k).unwrap(); }
    eprintln!("lane cases {lanes}");
}
