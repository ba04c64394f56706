//! kiln-cpu: the CPU backend. Simple, correct reference kernels for every primitive, generic
//! over the element type (`element.rs`), with the scalar math of every elementwise op in one
//! place (`scalar.rs`). Views share the input buffer; every other output is a fresh
//! row-major host buffer.

mod binary;
mod bitcast;
mod c64;
mod cast;
mod collective;
mod complex;
mod complex_linalg;
mod conv;
mod copy;
mod creation;
mod element;
mod erfinv;
pub mod fast;
mod fft;
pub mod fused;
mod gather;
mod halfmap;
mod linalg;
mod lines;
mod logsumexp;
mod math;
mod matmul;
mod matvec;
mod random;
mod reduce;
mod rowwalk;
mod scalar;
mod scan;
mod scatter;
pub mod simd;
mod softmax;
mod sort;
mod strided;
mod unary;
pub mod vecmath;
mod walk;

use kiln_base::{bail, ensure, ArrayData, Backend, DType, Primitive, Result, Scalar, Shape};

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
        self.run(prim, inputs, &[], outputs)
    }

    /// Fused kernels and slice updates write into donated inputs.
    fn eval_donating(
        &self,
        prim: &Primitive,
        inputs: &[ArrayData],
        donated: &[bool],
        outputs: &[(Shape, DType)],
    ) -> Result<Vec<ArrayData>> {
        self.run(prim, inputs, donated, outputs)
    }

    fn memory(&self) -> &'static dyn kiln_base::DeviceMemory {
        &kiln_base::HOST
    }

    /// The CPU's attention training kernels are plain references: only the testing switch
    /// `KILN_ATTENTION_FUSED_VJP=1` takes them.
    fn fuses_attention_training(&self, _: DType, _: &[usize], _: &[usize], _: &[usize]) -> bool {
        std::env::var("KILN_ATTENTION_FUSED_VJP").is_ok_and(|v| v == "1")
    }

    /// A user C kernel's source is compiled here, so that its errors raise at the call.
    fn prepare_kernel(&self, op: &kiln_base::FastOp) -> Result<()> {
        match op {
            kiln_base::FastOp::CKernel(spec) => fast::c_kernel_check(&spec.source),
            _ => Ok(()),
        }
    }
}

impl CpuBackend {
    /// `eval` with `donated` as [`Backend::eval_donating`] describes.
    fn run(
        &self,
        prim: &Primitive,
        inputs: &[ArrayData],
        donated: &[bool],
        outputs: &[(Shape, DType)],
    ) -> Result<Vec<ArrayData>> {
        let op = prim.name();
        for x in inputs {
            strided::validate(op, x)?;
        }
        // The primitive's own rules (arity, shapes, dtypes) again, so kernels can trust them.
        let specs: Vec<(&[usize], DType)> =
            inputs.iter().map(|x| (x.layout.shape.as_slice(), x.dtype)).collect();
        let expected = prim.output_shapes(&specs)?;
        ensure!(
            expected.len() == outputs.len()
                && expected.iter().zip(outputs).all(|(e, o)| e.0 == o.0 && e.1 == o.1),
            Runtime,
            op,
            "Requested outputs {outputs:?} do not match the primitive's {expected:?}."
        );
        let Some((shape, dtype)) = outputs.first() else {
            bail!(Runtime, op, "Expected at least one output.");
        };
        let out = match prim {
            Primitive::Arange { start, step, dtype, .. } => {
                creation::arange(*start, *step, *dtype, shape)
            }
            // From the input's shape alone, in float64 then rounded once (as eager's 1/n).
            Primitive::NumberOfElements { axes, inverted, dtype } => {
                let n: f64 = axes.iter().map(|&a| inputs[0].layout.shape[a] as f64).product();
                let value = if *inverted { 1.0 / n } else { n };
                creation::arange(Scalar::Float(value), Scalar::Int(0), *dtype, shape)
            }
            Primitive::Unary(u) => unary::unary(*u, &inputs[0], shape),
            Primitive::Binary(b) => binary::binary(*b, &inputs[0], &inputs[1], shape),
            Primitive::Where => binary::where_(&inputs[0], &inputs[1], &inputs[2], shape),
            Primitive::AsType(to) => cast::astype(&inputs[0], shape, *to),
            Primitive::Copy => copy::copy(&inputs[0], shape),
            Primitive::Reduce { op, axes } => reduce::reduce(*op, axes, &inputs[0], shape),
            Primitive::ArgReduce { op, axis } => reduce::arg_reduce(*op, *axis, &inputs[0], shape),
            Primitive::Softmax { .. } => softmax::softmax(&inputs[0], shape),
            Primitive::LogSumExp => logsumexp::logsumexp(&inputs[0], shape),
            Primitive::Reshape { .. }
            | Primitive::Transpose { .. }
            | Primitive::BroadcastTo { .. }
            | Primitive::Slice { .. }
            | Primitive::Identity
            | Primitive::StopGradient => copy::view(prim, &inputs[0], shape),
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
            Primitive::Conv(params) => conv::conv(params, &inputs[0], &inputs[1], shape),
            // Several outputs: the kernel builds them all.
            Primitive::Linalg(kiln_base::LinalgOp::Eig { vectors }) => {
                return complex_linalg::eig(*vectors, &inputs[0], outputs)
            }
            Primitive::Linalg(
                l @ (kiln_base::LinalgOp::Eigh { .. } | kiln_base::LinalgOp::Svd { .. }),
            ) if inputs[0].dtype == DType::C64 => {
                return complex_linalg::hermitian(*l, &inputs[0], outputs)
            }
            Primitive::Linalg(l) => return linalg::linalg(*l, inputs, outputs),
            // Its outputs are views of its trailing inputs: the core evaluates it.
            Primitive::Custom { num_primals, .. } => return Ok(inputs[*num_primals..].to_vec()),
            Primitive::Fused(program) => return fused::eval(program, inputs, shape, donated),
            Primitive::Fast(f) => return fast::eval(f, inputs, outputs),
            Primitive::Gather { axes, slice_sizes } => {
                gather::gather(axes, slice_sizes, inputs, shape)
            }
            Primitive::Scatter { axes, reduce } => scatter::scatter(axes, *reduce, inputs, shape),
            Primitive::SliceUpdate { start, step, len } => {
                let region = (start.as_slice(), step.as_slice(), len.as_slice());
                let in_place = match donated.first() {
                    Some(true) => {
                        scatter::slice_update_in_place(region, &inputs[0], &inputs[1], shape)?
                    }
                    _ => None,
                };
                match in_place {
                    Some(out) => Ok(out),
                    None => scatter::slice_update(start, step, len, &inputs[0], &inputs[1], shape),
                }
            }
            Primitive::MaskedScatter => {
                scatter::masked_scatter(&inputs[0], &inputs[1], &inputs[2], shape)
            }
            Primitive::View(to) => bitcast::view(&inputs[0], *to, shape),
            Primitive::Collective(c) => collective::collective(c, inputs, shape, *dtype, donated),
            Primitive::Complex(op) => complex::complex_part(*op, &inputs[0], shape),
            Primitive::Fft { axes, inverse, kind } => {
                fft::fft(axes, *inverse, *kind, &inputs[0], shape)
            }
            Primitive::AsStrided { shape: s, strides, offset } => {
                match prim.view_layout(&inputs[0].layout) {
                    Some(layout) => {
                        Ok(ArrayData { buffer: inputs[0].buffer.clone(), layout, dtype: *dtype })
                    }
                    None => bitcast::as_strided(&inputs[0], s, strides, *offset),
                }
            }
        }?;
        Ok(vec![out])
    }
}
