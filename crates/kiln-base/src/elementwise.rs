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
}

const fn row(name: &'static str, domain: Domain, c_expr: &'static str) -> Facts {
    Facts { name, domain, bool_output: false, c_expr }
}

const fn cmp(name: &'static str, c_expr: &'static str) -> Facts {
    Facts { name, domain: Domain::Any, bool_output: true, c_expr }
}

/// One-input elementwise ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
}

impl UnaryOp {
    pub const ALL: [UnaryOp; 10] = [
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
    ];

    pub const fn facts(self) -> Facts {
        use Domain::*;
        match self {
            UnaryOp::Negative => row("negative", Numeric, "(-a)"),
            UnaryOp::Abs => row("abs", Any, "k_abs(a)"),
            UnaryOp::Exp => row("exp", Float, "k_exp(a)"),
            UnaryOp::Log => row("log", Float, "k_log(a)"),
            UnaryOp::Sqrt => row("sqrt", Float, "k_sqrt(a)"),
            UnaryOp::Sin => row("sin", Float, "k_sin(a)"),
            UnaryOp::Tanh => row("tanh", Float, "k_tanh(a)"),
            UnaryOp::Sigmoid => row("sigmoid", Float, "k_sigmoid(a)"),
            UnaryOp::Erf => row("erf", Float, "k_erf(a)"),
            UnaryOp::ErfInv => row("erfinv", Float, "k_erfinv(a)"),
        }
    }
}

/// Two-input elementwise ops (inputs already promoted and broadcast by the front end).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
}

impl BinaryOp {
    pub const ALL: [BinaryOp; 13] = [
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
    ];

    pub const fn facts(self) -> Facts {
        use Domain::*;
        match self {
            BinaryOp::Add => row("add", Any, "(a + b)"),
            BinaryOp::Subtract => row("subtract", Any, "(a - b)"),
            BinaryOp::Multiply => row("multiply", Any, "(a * b)"),
            BinaryOp::Divide => row("divide", Float, "(a / b)"),
            // NaN wins in both, as in MLX.
            BinaryOp::Maximum => row("maximum", Any, "k_maximum(a, b)"),
            BinaryOp::Minimum => row("minimum", Any, "k_minimum(a, b)"),
            BinaryOp::Power => row("power", Any, "k_power(a, b)"),
            BinaryOp::Equal => cmp("equal", "(a == b)"),
            BinaryOp::NotEqual => cmp("not_equal", "(a != b)"),
            BinaryOp::Less => cmp("less", "(a < b)"),
            BinaryOp::LessEqual => cmp("less_equal", "(a <= b)"),
            BinaryOp::Greater => cmp("greater", "(a > b)"),
            BinaryOp::GreaterEqual => cmp("greater_equal", "(a >= b)"),
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
