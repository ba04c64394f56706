//! kiln-cpu: the CPU backend. Simple, correct reference kernels for every primitive, generic
//! over the element type (`element.rs`), with the scalar math of every elementwise op in one
//! place (`scalar.rs`). Views share the input buffer; every other output is a fresh
//! row-major host buffer.

mod binary;
mod cast;
mod copy;
mod creation;
mod element;
mod erfinv;
mod lines;
mod matmul;
mod random;
mod reduce;
mod scalar;
mod scan;
mod sort;
mod strided;
mod unary;

use kiln_base::{bail, ensure, ArrayData, Backend, DType, Primitive, Result, Shape};

/// The CPU backend: evaluates any primitive on host arrays.
#[derive(Debug, Default, Clone, Copy)]
pub struct CpuBackend;

impl Backend for CpuBackend {
    fn eval(
        &self,
        prim: &Primitive,
        inputs: &[ArrayData],
        outputs: &[(Shape, DType)],
    ) -> Result<Vec<ArrayData>> {
        let op = prim.name();
        let [(shape, dtype)] = outputs else {
            bail!(Runtime, op, "Expected one output, got {}.", outputs.len());
        };
        for x in inputs {
            strided::validate(op, x)?;
        }
        // The primitive's own rules (arity, shapes, dtypes) again, so kernels can trust them.
        let specs: Vec<(&[usize], DType)> =
            inputs.iter().map(|x| (x.layout.shape.as_slice(), x.dtype)).collect();
        let expected = prim.output_shapes(&specs)?;
        ensure!(
            expected.len() == 1 && expected[0].0 == *shape && expected[0].1 == *dtype,
            Runtime,
            op,
            "Requested output {shape:?} {dtype} does not match the primitive's {expected:?}."
        );
        let out = match prim {
            Primitive::Arange { start, step, dtype, .. } => {
                creation::arange(*start, *step, *dtype, shape)
            }
            Primitive::Unary(u) => unary::unary(*u, &inputs[0], shape),
            Primitive::Binary(b) => binary::binary(*b, &inputs[0], &inputs[1], shape),
            Primitive::Where => binary::where_(&inputs[0], &inputs[1], &inputs[2], shape),
            Primitive::AsType(to) => cast::astype(&inputs[0], shape, *to),
            Primitive::Copy => copy::copy(&inputs[0], shape),
            Primitive::Reduce { op, axes } => reduce::reduce(*op, axes, &inputs[0], shape),
            Primitive::ArgReduce { op, axis } => reduce::arg_reduce(*op, *axis, &inputs[0], shape),
            Primitive::Reshape { .. }
            | Primitive::Transpose { .. }
            | Primitive::BroadcastTo { .. }
            | Primitive::Slice { .. } => copy::view(prim, &inputs[0], shape),
            Primitive::Concatenate { axis } => copy::concatenate(inputs, *axis, shape),
            Primitive::Scan { op, axis, reverse, inclusive } => {
                scan::scan(*op, *axis, *reverse, *inclusive, &inputs[0], shape)
            }
            Primitive::Sort { axis, arg } => sort::sort(prim, *axis, None, *arg, &inputs[0], shape),
            Primitive::Partition { kth, axis, arg } => {
                sort::sort(prim, *axis, Some(*kth), *arg, &inputs[0], shape)
            }
            Primitive::SearchSorted { right } => {
                sort::search_sorted(*right, &inputs[0], &inputs[1], shape)
            }
            Primitive::Matmul => matmul::matmul(&inputs[0], &inputs[1], shape),
            Primitive::RandomBits { shape: per_key, width } => {
                random::random_bits(&inputs[0], per_key, *width, shape, *dtype)
            }
        }?;
        Ok(vec![out])
    }
}
