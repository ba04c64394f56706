//! The elementwise op tables: one row per op holds everything op-specific that is not math
//! (variant, public name, dtype rule, C expression, cost, complex64 support, Python
//! signature). Front ends read the dtype rules, backends read the op, kiln-codegen reads the
//! C expression, kiln-core and kiln-python generate their functions from the rows
//! (`each_unary_op!`/`each_binary_op!`), so eager kernels, generated code and both APIs
//! follow one definition. docs/adding-an-op.md lists the other sites (the math itself).

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
    /// The op's public name: the front-end function, the Python function and the name in
    /// error messages.
    pub name: &'static str,
    /// MLX's class name for the primitive (graph exports label nodes with it).
    pub class: &'static str,
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
    /// Whether the op is defined on complex64 (the MLX error text when it is not).
    pub complex: ComplexSupport,
}

/// complex64 support of an op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComplexSupport {
    Supported,
    /// The front end rejects complex operands with this message (MLX's wording).
    Rejected(&'static str),
}

const NO_COMPLEX: ComplexSupport = ComplexSupport::Rejected("Not supported for complex64.");

const fn row(domain: Domain, c_expr: &'static str) -> Facts {
    Facts {
        name: "",
        class: "",
        domain,
        bool_output: false,
        c_expr,
        cost: 1,
        complex: ComplexSupport::Supported,
    }
}

/// A row whose op is a math-library function (`exp`, `erf`).
const fn math(c_expr: &'static str) -> Facts {
    Facts { cost: 20, ..row(Domain::Float, c_expr) }
}

/// A row with a division or square root at its heart.
const fn divides(domain: Domain, c_expr: &'static str) -> Facts {
    Facts { cost: 8, ..row(domain, c_expr) }
}

const fn logical(c_expr: &'static str) -> Facts {
    Facts { bool_output: true, complex: NO_COMPLEX, ..row(Domain::Bool, c_expr) }
}

const fn cmp(c_expr: &'static str) -> Facts {
    Facts { bool_output: true, ..row(Domain::Any, c_expr) }
}

/// Integer-only rows (the front end rejects every inexact dtype, complex64 included).
const fn bits(c_expr: &'static str) -> Facts {
    real(row(Domain::Integer, c_expr))
}

/// A row without complex64 support.
const fn real(f: Facts) -> Facts {
    Facts { complex: NO_COMPLEX, ..f }
}

/// Defines an op enum from its rows `Variant name form: facts;`. `name` is the public name
/// (front-end function, Python function), the variant is MLX's class name, `form` the Python
/// signature (`pos`: `f(a, /, *, stream)`, `kw`: `f(a, stream=None)` with keyword operands,
/// `hand`: the front end and binding are written by hand). Generates the enum, `ALL`,
/// `facts()` and the exported macro `$each!(callback)`, which hands the rows
/// `Variant name form,` to a generator (`$d` is a literal `$` for the inner macro).
macro_rules! op_table {
    (
        $(#[$attr:meta])* $enum:ident, $each:ident, $d:tt;
        $($variant:ident $name:ident $form:ident: $facts:expr;)*
    ) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum $enum {
            $($variant,)*
        }

        impl $enum {
            pub const ALL: [$enum; [$($enum::$variant),*].len()] = [$($enum::$variant),*];

            pub const fn facts(self) -> Facts {
                #[allow(unused_imports)]
                use Domain::*;
                match self {
                    $($enum::$variant => Facts {
                        name: stringify!($name),
                        class: stringify!($variant),
                        ..$facts
                    },)*
                }
            }
        }

        /// Calls `$callback! { Variant name form, ... }` with every row of the table.
        #[macro_export]
        macro_rules! $each {
            ($d callback:ident) => { $d callback! { $($variant $name $form,)* } };
        }
    };
}

op_table! {
    /// One-input elementwise ops.
    UnaryOp, each_unary_op, $;
    Negative negative pos: row(Numeric, "(-a)");
    // complex64 abs has a float32 result: the front end sends it to `Primitive::Complex`.
    Abs abs pos: row(Any, "k_abs(a)");
    Exp exp pos: math("k_exp(a)");
    Log log pos: math("k_log(a)");
    Sqrt sqrt pos: divides(Float, "k_sqrt(a)");
    Sin sin pos: math("k_sin(a)");
    Tanh tanh pos: math("k_tanh(a)");
    Sigmoid sigmoid pos: real(math("k_sigmoid(a)"));
    Erf erf pos: real(math("k_erf(a)"));
    ErfInv erfinv pos: real(math("k_erfinv(a)"));
    // MLX's sign: NaN gives 0; unsigned gives 0 or 1; bool is the identity.
    Sign sign pos: row(Any, "k_sign(a)");
    // Integers and bool are already integral: the front end returns them unchanged.
    Floor floor pos: real(row(Any, "k_floor(a)"));
    Ceil ceil pos: real(row(Any, "k_ceil(a)"));
    // Round half to even (`rint`); the front end's `round(x, decimals)` is written by hand.
    Round round hand: row(Any, "k_rint(a)");
    Rsqrt rsqrt pos: divides(Float, "k_rsqrt(a)");
    Expm1 expm1 pos: real(math("k_expm1(a)"));
    Log1p log1p pos: math("k_log1p(a)");
    Log2 log2 pos: math("k_log2(a)");
    Log10 log10 pos: math("k_log10(a)");
    Cos cos pos: math("k_cos(a)");
    Tan tan pos: math("k_tan(a)");
    ArcSin arcsin pos: math("k_asin(a)");
    ArcCos arccos pos: math("k_acos(a)");
    ArcTan arctan pos: math("k_atan(a)");
    Sinh sinh pos: math("k_sinh(a)");
    Cosh cosh pos: math("k_cosh(a)");
    ArcSinh arcsinh pos: math("k_asinh(a)");
    ArcCosh arccosh pos: math("k_acosh(a)");
    ArcTanh arctanh pos: math("k_atanh(a)");
    LogicalNot logical_not pos: logical("(!a)");
    // On bool it is logical not (C's `~` would promote to int first).
    BitwiseInvert bitwise_invert kw: bits("k_invert(a)");
}

op_table! {
    /// Two-input elementwise ops (inputs already promoted and broadcast by the front end).
    BinaryOp, each_binary_op, $;
    Add add kw: row(Any, "(a + b)");
    Subtract subtract kw: row(Any, "(a - b)");
    Multiply multiply kw: row(Any, "(a * b)");
    Divide divide kw: divides(Float, "(a / b)");
    // NaN wins in both, as in MLX.
    Maximum maximum pos: row(Any, "k_maximum(a, b)");
    Minimum minimum pos: row(Any, "k_minimum(a, b)");
    Power power pos: Facts { cost: 20, ..row(Any, "k_power(a, b)") };
    Equal equal kw: cmp("(a == b)");
    NotEqual not_equal kw: cmp("(a != b)");
    Less less kw: cmp("(a < b)");
    LessEqual less_equal kw: cmp("(a <= b)");
    Greater greater kw: cmp("(a > b)");
    GreaterEqual greater_equal kw: cmp("(a >= b)");
    // Integers never trap: `x // 0` is 0 and `x % 0` is x; floats: floor(a / b) and a
    // remainder with the divisor's sign. complex64 floor_divide is plain division (MLX).
    FloorDivide floor_divide kw: divides(Any, "k_floor_divide(a, b)");
    Remainder remainder kw: Facts {
        complex: ComplexSupport::Rejected("Complex type not supported."),
        ..divides(Any, "k_remainder(a, b)")
    };
    LogicalAnd logical_and pos: logical("(a && b)");
    LogicalOr logical_or pos: logical("(a || b)");
    LogAddExp logaddexp pos: math("k_logaddexp(a, b)");
    ArcTan2 arctan2 pos: real(math("k_atan2(a, b)"));
    BitwiseAnd bitwise_and kw: bits("(a & b)");
    BitwiseOr bitwise_or kw: bits("(a | b)");
    BitwiseXor bitwise_xor kw: bits("(a ^ b)");
    // x86's shifts, as MLX's CPU build: types narrower than 32 bits shift as int32, and the
    // count is taken modulo 32 (64 for 64-bit types). Bool shifts as uint8.
    LeftShift left_shift kw: bits("k_left_shift(a, b)");
    RightShift right_shift kw: bits("k_right_shift(a, b)");
}

impl UnaryOp {
    /// Whether `Primitive::Unary(self)` exists on complex64: the row allows it, and it is not
    /// `abs` (whose float32 result makes it `Primitive::Complex`).
    pub fn runs_on_complex(self) -> bool {
        self != UnaryOp::Abs && self.facts().complex == ComplexSupport::Supported
    }
}

impl BinaryOp {
    /// Whether `Primitive::Binary(self)` exists on complex64 operands.
    pub fn runs_on_complex(self) -> bool {
        self.facts().complex == ComplexSupport::Supported
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
