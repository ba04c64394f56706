//! The interface every device backend implements: evaluate one primitive on evaluated inputs.

use crate::{Buffer, DType, Layout, Primitive, Result};

/// An evaluated input or output: a buffer, where its elements sit, and their dtype.
#[derive(Debug, Clone)]
pub struct ArrayData {
    pub buffer: Buffer,
    pub layout: Layout,
    pub dtype: DType,
}

/// A device's kernels. Backends never see the lazy graph: only a primitive, its evaluated
/// inputs and the output dtypes/shapes the front end inferred.
pub trait Backend: Send + Sync {
    /// Computes the outputs of `prim`. `outputs` gives each output's shape and dtype;
    /// the backend allocates them (it may reuse an input buffer it solely owns).
    fn eval(
        &self,
        prim: &Primitive,
        inputs: &[ArrayData],
        outputs: &[(crate::Shape, DType)],
    ) -> Result<Vec<ArrayData>>;

    /// `eval` where `donated[i]` says input `i`'s buffer is referenced by nothing but this
    /// call (the caller checked), so the kernel may write an output into it. Backends that
    /// write in place nowhere keep this default.
    fn eval_donating(
        &self,
        prim: &Primitive,
        inputs: &[ArrayData],
        donated: &[bool],
        outputs: &[(crate::Shape, DType)],
    ) -> Result<Vec<ArrayData>> {
        let _ = donated;
        self.eval(prim, inputs, outputs)
    }
}
