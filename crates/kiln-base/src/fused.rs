//! A fused elementwise kernel: the small program compile builds from a region of the graph
//! (elementwise ops, `where`, `astype`, scalar literals). Every input and output has the
//! kernel's shape (broadcasts stay outside as views, read with zero strides), so a backend
//! runs the program once per element: as generated C / CUDA, or step by step in the
//! interpreter. Programs are plain data, hashed and compared structurally, so one built
//! kernel serves every graph (and every shape) with the same program.

use crate::{BinaryOp, DType, Scalar, UnaryOp};

/// One step of a fused program; operands are earlier values (see [`FusedProgram`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FusedOp {
    /// Kernel input `i`.
    Input(usize),
    /// A literal (compile folds 0-d constants into the source).
    Literal(Scalar),
    Unary(UnaryOp, usize),
    Binary(BinaryOp, usize, usize),
    /// `cond ? x : y`.
    Where(usize, usize, usize),
    AsType(usize),
}

/// One value of the program: how it is computed and its dtype.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FusedStep {
    pub op: FusedOp,
    pub dtype: DType,
}

/// A straight-line elementwise program: values in order, each reading earlier ones.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FusedProgram {
    /// The dtype of each kernel input.
    pub inputs: Vec<DType>,
    pub steps: Vec<FusedStep>,
    /// The steps written out, in output order.
    pub outputs: Vec<usize>,
}

impl FusedProgram {
    /// The dtype of each output.
    pub fn output_dtypes(&self) -> Vec<DType> {
        self.outputs.iter().map(|&s| self.steps[s].dtype).collect()
    }

    /// `Compiled` followed by the names of the primitives inside (graph dumps, explain).
    pub fn name(&self) -> String {
        let mut name = String::from("Compiled");
        for step in &self.steps {
            let part = match &step.op {
                FusedOp::Input(_) | FusedOp::Literal(_) => continue,
                FusedOp::Unary(op, _) => op.facts().name,
                FusedOp::Binary(op, ..) => op.facts().name,
                FusedOp::Where(..) => "where",
                FusedOp::AsType(_) => "astype",
            };
            name.push('_');
            name.push_str(part);
        }
        name
    }

    /// Checks the program is well formed (operands refer to earlier steps, inputs exist):
    /// programs come from compile, so a failure is a bug, reported instead of trusted.
    pub fn validate(&self) -> crate::Result<()> {
        let bad = |msg: String| crate::Error::Runtime { op: "compile", msg };
        for (i, step) in self.steps.iter().enumerate() {
            let operands: &[usize] = match &step.op {
                FusedOp::Input(k) => {
                    if *k >= self.inputs.len() {
                        return Err(bad(format!("step {i} reads missing input {k}")));
                    }
                    &[]
                }
                FusedOp::Literal(_) => &[],
                FusedOp::Unary(_, a) | FusedOp::AsType(a) => std::slice::from_ref(a),
                FusedOp::Binary(_, a, b) => &[*a, *b],
                FusedOp::Where(c, a, b) => &[*c, *a, *b],
            };
            if let Some(o) = operands.iter().find(|&&o| o >= i) {
                return Err(bad(format!("step {i} reads later step {o}")));
            }
        }
        match self.outputs.iter().find(|&&o| o >= self.steps.len()) {
            Some(o) => Err(bad(format!("output reads missing step {o}"))),
            None => Ok(()),
        }
    }

    /// Checks that the kernel's inputs are what its variants address: one per program input
    /// of its dtype, each of the output's `shape` (broadcasts arrive as zero-stride views).
    /// A kernel run on a smaller input would read past its buffer.
    pub fn check_inputs(&self, inputs: &[crate::ArrayData], shape: &[usize]) -> crate::Result<()> {
        let bad = |msg: String| crate::Error::Runtime { op: "compile", msg };
        if inputs.len() != self.inputs.len() {
            return Err(bad(format!(
                "the fused kernel takes {} inputs, got {}",
                self.inputs.len(),
                inputs.len()
            )));
        }
        for (i, (x, &dtype)) in inputs.iter().zip(&self.inputs).enumerate() {
            if x.dtype != dtype || x.layout.shape.as_slice() != shape {
                return Err(bad(format!(
                    "fused kernel input {i} is {} {:?}, the kernel runs over {dtype} {shape:?}",
                    x.dtype, x.layout.shape
                )));
            }
        }
        Ok(())
    }
}
