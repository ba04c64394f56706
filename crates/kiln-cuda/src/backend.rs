//! The GPU's `Backend`: the primitives with GPU kernels so far. kiln-core runs the others on
//! the CPU, moving their inputs to the host (see `supports`).

use crate::elementwise::{run_program, single_op_program};
use crate::{matmul, reduce, rows};
use kiln_base::{bail, ArrayData, Backend, DType, Primitive, Result, Shape};
use std::sync::Arc;

pub struct CudaBackend;

/// Whether the GPU has a kernel for `prim` on these dtypes (the others run on the CPU for
/// now; complex64 has no GPU kernels yet).
pub fn supports(prim: &Primitive, mut dtypes: impl Iterator<Item = DType>) -> bool {
    !dtypes.any(|d| d == DType::C64)
        && matches!(
            prim,
            Primitive::Unary(_)
                | Primitive::Binary(_)
                | Primitive::Where
                | Primitive::AsType(_)
                | Primitive::Copy
                | Primitive::Fused(_)
                | Primitive::Matmul
                | Primitive::Reduce { .. }
                | Primitive::ArgReduce { .. }
                | Primitive::Softmax { .. }
        )
}

impl Backend for CudaBackend {
    fn eval(
        &self,
        prim: &Primitive,
        inputs: &[ArrayData],
        outputs: &[(Shape, DType)],
    ) -> Result<Vec<ArrayData>> {
        let op = prim.name();
        let dtypes = inputs.iter().map(|x| x.dtype).chain(outputs.iter().map(|o| o.1));
        if let Some(d) = dtypes.clone().find(|d| *d == DType::F64) {
            bail!(
                Value,
                op,
                "{d} is not supported on the GPU; run this op on the CPU (stream=mx.cpu)."
            );
        }
        for x in inputs {
            crate::alloc::check_on_gpu(op, &x.buffer)?;
        }
        match prim {
            Primitive::Fused(program) => run_program(program, inputs, &outputs[0].0),
            Primitive::Matmul => Ok(vec![matmul::matmul(&inputs[0], &inputs[1], &outputs[0].0)?]),
            Primitive::Reduce { op, axes } => {
                Ok(vec![reduce::reduce(*op, axes, &inputs[0], &outputs[0].0)?])
            }
            Primitive::ArgReduce { op, axis } => {
                Ok(vec![rows::arg_reduce(*op, *axis, &inputs[0], &outputs[0].0)?])
            }
            Primitive::Softmax { .. } => Ok(vec![rows::softmax(&inputs[0], &outputs[0].0)?]),
            _ => {
                let in_dtypes: Vec<DType> = inputs.iter().map(|x| x.dtype).collect();
                let Some(program) = single_op_program(prim, &in_dtypes, outputs[0].1) else {
                    bail!(Unsupported, op, "{op} has no GPU kernel yet.");
                };
                run_program(&Arc::new(program), inputs, &outputs[0].0)
            }
        }
    }
}
