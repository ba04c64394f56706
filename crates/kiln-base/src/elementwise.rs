//! The elementwise op tables: one facts row per op. Front ends read the dtype rules, backends
//! read the op, and kiln-codegen reads the C expression, so eager kernels and generated code
//! follow one definition. Adding an op: a variant, its row here, its scalar math in
//! kiln-cpu's `scalar.rs` (an exhaustive match flags a missing arm), a front-end function.

/// Which input dtypes an op accepts and what it computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Domain {
    /// Every dtype, bool included; the result has the (promoted) input dtype.
    Any,
    /// Numbers but not bool (`negative`).
    Numeric,
    /// Float math: integer and bool inputs are converted to float32 first (`exp`, `divide`).
    Float,
    /// Truth values: inputs are converted to bool first (`logical_and`).
    Bool,
    /// Bit patterns: integers and bool only, floats are an error (`bitwise_and`).
    Integer,
}

/// The facts of one elementwise op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// The op's public name (and the name in error messages).
    pub name: &'static str,
    pub domain: Domain,
    /// Produces bool whatever the input dtype (comparisons).
    pub bool_output: bool,
    /// The value in generated C/CUDA, operands spelled `a` and `b` (unary: `a`), computed in
    /// the op's dtype; helpers named `k_*` come from kiln-codegen's preamble.
    pub c_expr: &'static str,
    /// Rough cost per element in simple instructions (1: arithmetic, logic, compares; about 8:
    /// a correctly rounded division or square root; about 20: a function of the math
    /// library). Launch shapes read it: a kernel that computes much per byte it moves gives
    /// each GPU thread several vectors (kiln-cuda `elementwise`).
    pub cost: u32,
}

const fn row(name: &'static str, domain: Domain, c_expr: &'static str) -> Facts {
    Facts { name, domain, bool_output: false, c_expr, cost: 1 }
}

/// A row whose op is a math-library function (`exp`, `erf`).
const fn math(name: &'static str, c_expr: &'static str) -> Facts {
    Facts { cost: 20, ..row(name, Domain::Float, c_expr) }
}

/// A row with a division or square root at its heart.
const fn divides(name: &'static str, domain: Domain, c_expr: &'static str) -> Facts {
    Facts { cost: 8, ..row(name, domain, c_expr) }
}

const fn logical(name: &'static str, c_expr: &'static str) -> Facts {
    Facts { name, domain: Domain::Bool, bool_output: true, c_expr, cost: 1 }
}

const fn cmp(name: &'static str, c_expr: &'static str) -> Facts {
    Facts { name, domain: Domain::Any, bool_output: true, c_expr, cost: 1 }
}

/// One-input elementwise ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum UnaryOp {
    Negative,
    Abs,
    Exp,
    Log,
    Sqrt,
    Sin,
    Tanh,
    Sigmoid,
    Erf,
    ErfInv,
    Sign,
    Floor,
    Ceil,
    /// Round half to even (`rint`).
    Round,
    Rsqrt,
    Expm1,
    Log1p,
    Log2,
    Log10,
    Cos,
    Tan,
    ArcSin,
    ArcCos,
    ArcTan,
    Sinh,
    Cosh,
    ArcSinh,
    ArcCosh,
    ArcTanh,
    LogicalNot,
    BitwiseInvert,
}

impl UnaryOp {
    pub const ALL: [UnaryOp; 31] = [
        UnaryOp::Negative,
        UnaryOp::Abs,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Sin,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Erf,
        UnaryOp::ErfInv,
        UnaryOp::Sign,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Round,
        UnaryOp::Rsqrt,
        UnaryOp::Expm1,
        UnaryOp::Log1p,
        UnaryOp::Log2,
        UnaryOp::Log10,
        UnaryOp::Cos,
        UnaryOp::Tan,
        UnaryOp::ArcSin,
        UnaryOp::ArcCos,
        UnaryOp::ArcTan,
        UnaryOp::Sinh,
        UnaryOp::Cosh,
        UnaryOp::ArcSinh,
        UnaryOp::ArcCosh,
        UnaryOp::ArcTanh,
        UnaryOp::LogicalNot,
        UnaryOp::BitwiseInvert,
    ];

    pub const fn facts(self) -> Facts {
        use Domain::*;
        match self {
            UnaryOp::Negative => row("negative", Numeric, "(-a)"),
            UnaryOp::Abs => row("abs", Any, "k_abs(a)"),
            UnaryOp::Exp => math("exp", "k_exp(a)"),
            UnaryOp::Log => math("log", "k_log(a)"),
            UnaryOp::Sqrt => divides("sqrt", Float, "k_sqrt(a)"),
            UnaryOp::Sin => math("sin", "k_sin(a)"),
            UnaryOp::Tanh => math("tanh", "k_tanh(a)"),
            UnaryOp::Sigmoid => math("sigmoid", "k_sigmoid(a)"),
            UnaryOp::Erf => math("erf", "k_erf(a)"),
            UnaryOp::ErfInv => math("erfinv", "k_erfinv(a)"),
            // MLX's sign: NaN gives 0; unsigned gives 0 or 1; bool is the identity.
            UnaryOp::Sign => row("sign", Any, "k_sign(a)"),
            // Integers and bool are already integral: the front end returns them unchanged.
            UnaryOp::Floor => row("floor", Any, "k_floor(a)"),
            UnaryOp::Ceil => row("ceil", Any, "k_ceil(a)"),
            UnaryOp::Round => row("round", Any, "k_rint(a)"),
            UnaryOp::Rsqrt => divides("rsqrt", Float, "k_rsqrt(a)"),
            UnaryOp::Expm1 => math("expm1", "k_expm1(a)"),
            UnaryOp::Log1p => math("log1p", "k_log1p(a)"),
            UnaryOp::Log2 => math("log2", "k_log2(a)"),
            UnaryOp::Log10 => math("log10", "k_log10(a)"),
            UnaryOp::Cos => math("cos", "k_cos(a)"),
            UnaryOp::Tan => math("tan", "k_tan(a)"),
            UnaryOp::ArcSin => math("arcsin", "k_asin(a)"),
            UnaryOp::ArcCos => math("arccos", "k_acos(a)"),
            UnaryOp::ArcTan => math("arctan", "k_atan(a)"),
            UnaryOp::Sinh => math("sinh", "k_sinh(a)"),
            UnaryOp::Cosh => math("cosh", "k_cosh(a)"),
            UnaryOp::ArcSinh => math("arcsinh", "k_asinh(a)"),
            UnaryOp::ArcCosh => math("arccosh", "k_acosh(a)"),
            UnaryOp::ArcTanh => math("arctanh", "k_atanh(a)"),
            UnaryOp::LogicalNot => logical("logical_not", "(!a)"),
            // On bool it is logical not (C's `~` would promote to int first).
            UnaryOp::BitwiseInvert => row("bitwise_invert", Integer, "k_invert(a)"),
        }
    }
}

/// Two-input elementwise ops (inputs already promoted and broadcast by the front end).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum BinaryOp {
    Add,
    Subtract,
    Multiply,
    Divide,
    Maximum,
    Minimum,
    Power,
    Equal,
    NotEqual,
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
    FloorDivide,
    Remainder,
    LogicalAnd,
    LogicalOr,
    LogAddExp,
    ArcTan2,
    BitwiseAnd,
    BitwiseOr,
    BitwiseXor,
    LeftShift,
    RightShift,
}

impl BinaryOp {
    pub const ALL: [BinaryOp; 24] = [
        BinaryOp::Add,
        BinaryOp::Subtract,
        BinaryOp::Multiply,
        BinaryOp::Divide,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
        BinaryOp::Power,
        BinaryOp::Equal,
        BinaryOp::NotEqual,
        BinaryOp::Less,
        BinaryOp::LessEqual,
        BinaryOp::Greater,
        BinaryOp::GreaterEqual,
        BinaryOp::FloorDivide,
        BinaryOp::Remainder,
        BinaryOp::LogicalAnd,
        BinaryOp::LogicalOr,
        BinaryOp::LogAddExp,
        BinaryOp::ArcTan2,
        BinaryOp::BitwiseAnd,
        BinaryOp::BitwiseOr,
        BinaryOp::BitwiseXor,
        BinaryOp::LeftShift,
        BinaryOp::RightShift,
    ];

    pub const fn facts(self) -> Facts {
        use Domain::*;
        match self {
            BinaryOp::Add => row("add", Any, "(a + b)"),
            BinaryOp::Subtract => row("subtract", Any, "(a - b)"),
            BinaryOp::Multiply => row("multiply", Any, "(a * b)"),
            BinaryOp::Divide => divides("divide", Float, "(a / b)"),
            // NaN wins in both, as in MLX.
            BinaryOp::Maximum => row("maximum", Any, "k_maximum(a, b)"),
            BinaryOp::Minimum => row("minimum", Any, "k_minimum(a, b)"),
            BinaryOp::Power => Facts { cost: 20, ..row("power", Any, "k_power(a, b)") },
            BinaryOp::Equal => cmp("equal", "(a == b)"),
            BinaryOp::NotEqual => cmp("not_equal", "(a != b)"),
            BinaryOp::Less => cmp("less", "(a < b)"),
            BinaryOp::LessEqual => cmp("less_equal", "(a <= b)"),
            BinaryOp::Greater => cmp("greater", "(a > b)"),
            BinaryOp::GreaterEqual => cmp("greater_equal", "(a >= b)"),
            // Integers never trap: `x // 0` is 0 and `x % 0` is x; floats: floor(a / b) and
            // a remainder with the divisor's sign.
            BinaryOp::FloorDivide => divides("floor_divide", Any, "k_floor_divide(a, b)"),
            BinaryOp::Remainder => divides("remainder", Any, "k_remainder(a, b)"),
            BinaryOp::LogicalAnd => logical("logical_and", "(a && b)"),
            BinaryOp::LogicalOr => logical("logical_or", "(a || b)"),
            BinaryOp::LogAddExp => math("logaddexp", "k_logaddexp(a, b)"),
            BinaryOp::ArcTan2 => math("arctan2", "k_atan2(a, b)"),
            BinaryOp::BitwiseAnd => row("bitwise_and", Integer, "(a & b)"),
            BinaryOp::BitwiseOr => row("bitwise_or", Integer, "(a | b)"),
            BinaryOp::BitwiseXor => row("bitwise_xor", Integer, "(a ^ b)"),
            // x86's shifts, as MLX's CPU build: types narrower than 32 bits shift as int32,
            // and the count is taken modulo 32 (64 for 64-bit types). Bool shifts as uint8.
            BinaryOp::LeftShift => row("left_shift", Integer, "k_left_shift(a, b)"),
            BinaryOp::RightShift => row("right_shift", Integer, "k_right_shift(a, b)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = UnaryOp::ALL.iter().map(|o| o.facts().name).collect();
        names.extend(BinaryOp::ALL.iter().map(|o| o.facts().name));
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(n, names.len());
    }
}
