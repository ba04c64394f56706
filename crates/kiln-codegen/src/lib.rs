//! kiln-codegen: turns elementwise ops into C / CUDA C source. Pure string work (no I/O),
//! so its output is snapshot-tested on machines without a compiler or GPU. Expressions come
//! from the facts rows in `kiln_base::elementwise`, the same table the eager kernels follow.

pub mod c;
mod c_vector;
pub mod cuda;
pub mod cuda_packed;
pub mod math;

use kiln_base::{BinaryOp, DType, UnaryOp};

/// The C type that holds one element of `dtype` (half types are stored as raw bits and
/// converted by preamble helpers).
pub fn c_type(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "bool",
        DType::U8 => "uint8_t",
        DType::U16 => "uint16_t",
        DType::U32 => "uint32_t",
        DType::U64 => "uint64_t",
        DType::I8 => "int8_t",
        DType::I16 => "int16_t",
        DType::I32 => "int32_t",
        DType::I64 => "int64_t",
        DType::F16 | DType::BF16 => "uint16_t",
        DType::F32 => "float",
        DType::F64 => "double",
        // Two floats, real part first: a struct with operators and `k_*` overloads in the
        // CUDA preamble, C99's `float _Complex` in the C one (moves only: the C backend
        // fuses no complex ops).
        DType::C64 => "kc64",
    }
}

/// The facts row's expression with its operands substituted (`a`, `b` become the given
/// C expressions, parenthesised so precedence never changes the meaning).
fn substitute(template: &str, operands: &[&str]) -> String {
    let names = ['a', 'b'];
    let mut out = String::with_capacity(template.len() + 16);
    let mut chars = template.chars().peekable();
    let mut prev_ident = false;
    while let Some(c) = chars.next() {
        let next_ident = chars.peek().is_some_and(|n| n.is_alphanumeric() || *n == '_');
        match names.iter().position(|&n| n == c) {
            Some(i) if !prev_ident && !next_ident && i < operands.len() => {
                out.push('(');
                out.push_str(operands[i]);
                out.push(')');
            }
            _ => out.push(c),
        }
        prev_ident = c.is_alphanumeric() || c == '_';
    }
    out
}

/// C expression of a unary op applied to `x`.
pub fn unary_expr(op: UnaryOp, x: &str) -> String {
    substitute(op.facts().c_expr, &[x])
}

/// C expression of a binary op applied to `a` and `b`.
pub fn binary_expr(op: BinaryOp, a: &str, b: &str) -> String {
    substitute(op.facts().c_expr, &[a, b])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions_snapshot() {
        assert_eq!(binary_expr(BinaryOp::Add, "x0", "x1"), "((x0) + (x1))");
        assert_eq!(binary_expr(BinaryOp::Maximum, "x0", "2.0f"), "k_maximum((x0), (2.0f))");
        assert_eq!(unary_expr(UnaryOp::Exp, "v[i]"), "k_exp((v[i]))");
        assert_eq!(unary_expr(UnaryOp::Negative, "a_b"), "(-(a_b))");
        assert_eq!(
            binary_expr(BinaryOp::Less, &unary_expr(UnaryOp::Abs, "t"), "b"),
            "((k_abs((t))) < (b))"
        );
    }

    #[test]
    fn every_op_substitutes_all_operands() {
        for op in UnaryOp::ALL {
            assert!(unary_expr(op, "OPND").contains("(OPND)"), "{op:?}");
        }
        for op in BinaryOp::ALL {
            let e = binary_expr(op, "LHS", "RHS");
            assert!(e.contains("(LHS)") && e.contains("(RHS)"), "{op:?}");
        }
        assert_eq!(c_type(DType::BF16), "uint16_t");
    }
}
