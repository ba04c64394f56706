//! The GPU's `Backend`: the primitives with GPU kernels so far. kiln-core runs the others on
//! the CPU, moving their inputs to the host (see `supports`).

use crate::elementwise::{run_program, single_op_program};
use crate::{
    complex, conv, copy, creation, fft, indexing, masked, matmul, reduce, rows, scan, sort,
};
use kiln_base::backend::{
    BuildReport, CompletionEvent, DeviceMemory, DeviceSpan, GraphCapture, IssueGuard, KernelNode,
};
use kiln_base::{
    bail, ArrayData, Backend, DType, Device, FastOp, Layout, Primitive, ReduceOp, Result, ScanOp,
    Shape,
};
use std::sync::{Arc, OnceLock};

pub struct CudaBackend;

/// Whether the GPU has a kernel for `prim` on these dtypes (the others run on the CPU for
/// now; see `supports_complex` for complex64 and FFT).
pub fn supports(prim: &Primitive, mut dtypes: impl Iterator<Item = DType>) -> bool {
    if let Primitive::Fast(kiln_base::FastOp::CudaKernel(_)) = prim {
        // A user kernel takes every dtype it was generated for (complex64 is refused there).
        return true;
    }
    if let Primitive::Fast(op) = prim {
        // float32 and the half floats (float64 and complex stay on the CPU).
        return crate::fast::supports(op) && dtypes.all(|d| !matches!(d, DType::F64 | DType::C64));
    }
    if let Primitive::Collective(c) = prim {
        return crate::collective::on_device(c);
    }
    let dtypes: Vec<DType> = dtypes.collect();
    if dtypes.contains(&DType::C64) || matches!(prim, Primitive::Fft { .. }) {
        return supports_complex(prim);
    }
    matches!(
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
            | Primitive::LogSumExp
            | Primitive::Arange { .. }
            | Primitive::RandomBits { .. }
            | Primitive::Concatenate { .. }
            | Primitive::SliceUpdate { .. }
            | Primitive::Gather { .. }
            | Primitive::Scatter { .. }
            | Primitive::Scan { .. }
            | Primitive::Sort { .. }
            | Primitive::Partition { .. }
            | Primitive::SearchSorted { .. }
            | Primitive::View(_)
            | Primitive::AsStrided { .. }
            | Primitive::Conv(_)
            | Primitive::MaskedScatter
            | Primitive::NumberOfElements { .. }
            | Primitive::Complex(_)
    )
}

/// An environment switch that is on unless set to `0`.
fn enabled(var: &str) -> bool {
    std::env::var(var).map_or(true, |v| v != "0")
}

/// Whether the GPU runs `prim` when complex64 is among its dtypes (and every FFT). The others
/// (linalg, and the ops kiln rejects on complex64) run on the CPU, which also gives the clear
/// errors for them. `KILN_CUDA_COMPLEX=0` sends all complex64 work to the CPU and
/// `KILN_CUDA_FFT=0` every FFT, the simple paths to compare a GPU result with.
fn supports_complex(prim: &Primitive) -> bool {
    static COMPLEX: OnceLock<bool> = OnceLock::new();
    static FFT: OnceLock<bool> = OnceLock::new();
    if !*COMPLEX.get_or_init(|| enabled("KILN_CUDA_COMPLEX")) {
        return false;
    }
    match prim {
        Primitive::Fft { .. } => {
            *FFT.get_or_init(|| enabled("KILN_CUDA_FFT")) && crate::fft::available()
        }
        Primitive::Unary(op) => op.runs_on_complex(),
        Primitive::Binary(op) => op.runs_on_complex(),
        Primitive::Reduce { op, .. } => {
            matches!(op, ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Max | ReduceOp::Min)
        }
        // A complex log-add-exp scan runs on the CPU (kiln-cpu scan.rs).
        Primitive::Scan { op, .. } => *op != ScanOp::LogAddExp,
        // cuBLAS's CUDA_C_32F (matmul.rs); lexicographic orders (sort.rs, rows.rs).
        Primitive::Matmul
        | Primitive::Sort { .. }
        | Primitive::Partition { .. }
        | Primitive::SearchSorted { .. }
        | Primitive::ArgReduce { .. } => true,
        Primitive::Where
        | Primitive::AsType(_)
        | Primitive::Copy
        | Primitive::Fused(_)
        | Primitive::Complex(_)
        | Primitive::Concatenate { .. }
        | Primitive::SliceUpdate { .. }
        | Primitive::Gather { .. }
        | Primitive::Scatter { .. }
        | Primitive::MaskedScatter
        | Primitive::View(_)
        | Primitive::AsStrided { .. } => true,
        _ => false,
    }
}

impl Backend for CudaBackend {
    fn unavailable_reason(&self) -> Option<String> {
        crate::unavailable_reason()
    }

    fn supports(&self, prim: &Primitive, dtypes: &mut dyn Iterator<Item = DType>) -> bool {
        supports(prim, dtypes)
    }

    fn memory(&self) -> &'static dyn DeviceMemory {
        &crate::alloc::DEVICE
    }

    fn transfer(&self, data: &ArrayData, device: Device) -> Result<ArrayData> {
        crate::transfer::to_device(data, device)
    }

    fn synchronize(&self) -> Result<()> {
        crate::synchronize()
    }

    fn issuing(&self) -> Option<IssueGuard> {
        Some(Box::new(crate::issuing::issuing()))
    }

    fn completion_event(&self) -> Result<Option<Box<dyn CompletionEvent>>> {
        let ready = crate::ready::Ready::record()?;
        Ok(ready.map(|r| Box::new(r) as Box<dyn CompletionEvent>))
    }

    fn profile_span(&self) -> Option<Box<dyn DeviceSpan>> {
        crate::profile::Span::begin().map(|s| Box::new(s) as Box<dyn DeviceSpan>)
    }

    fn graph_capture(&self) -> Option<&dyn GraphCapture> {
        Some(&crate::cuda_graph::CudaGraphs)
    }

    fn prebuild(&self, nodes: &[KernelNode], progress: bool) -> Option<BuildReport> {
        crate::prebuild::prebuild_nodes(nodes, progress)
    }

    /// float32 or half-float data (an attention mask may be bool); for attention, the
    /// kernels' own choice (the tensor-core path, or long sequences whose scores the
    /// composition would materialise).
    fn fuses(&self, op: &FastOp, inputs: &[(&[usize], DType)]) -> bool {
        let gpu_float =
            |x: &(&[usize], DType)| matches!(x.1, DType::F32 | DType::F16 | DType::BF16);
        let fits = match op {
            FastOp::Attention { .. } => {
                let [q, k, v] = [0, 1, 2].map(|i| inputs[i].0);
                inputs[..3].iter().all(gpu_float)
                    && crate::fast::attention_fused(inputs[0].1, q, k, v)
            }
            _ => inputs.iter().all(gpu_float),
        };
        fits && supports(&Primitive::Fast(op.clone()), inputs.iter().map(|x| x.1))
    }

    fn fuses_attention_training(
        &self,
        dtype: DType,
        q: &[usize],
        k: &[usize],
        v: &[usize],
    ) -> bool {
        crate::fast::attention_train_fused(dtype, q, k, v)
    }

    fn prepare_kernel(&self, op: &FastOp) -> Result<()> {
        match op {
            FastOp::CudaKernel(spec) => crate::fast::cuda_kernel::prepare(spec),
            _ => Ok(()),
        }
    }

    /// A decode step's projections of one x (q, k, v; gate, up) as one launch; its RoPE
    /// of q and of k as one.
    fn runs_together(&self, prim: &Primitive) -> Option<kiln_base::Together> {
        crate::together::runs_together(prim)
    }

    fn eval_together(
        &self,
        prim: &Primitive,
        inputs: &[Vec<ArrayData>],
        donated: &[Vec<bool>],
        outputs: &[&(Shape, DType)],
    ) -> Option<Result<Vec<ArrayData>>> {
        crate::together::eval_together(prim, inputs, donated, outputs).transpose()
    }

    /// A residual add and the norm of its sum as one launch.
    fn chains_into(&self, consumer: &Primitive) -> bool {
        crate::together::chains_into(consumer)
    }

    fn runs_chained(&self, producer: &Primitive, consumer: &Primitive) -> bool {
        crate::together::runs_chained(producer, consumer)
    }

    fn eval_chained(&self, chain: &kiln_base::Chained) -> Option<Result<(ArrayData, ArrayData)>> {
        crate::together::eval_chained(chain).transpose()
    }

    /// A slice update writes into its donated base: a KV cache's new entries cost their own
    /// bytes, not a copy of the cache.
    fn eval_donating(
        &self,
        prim: &Primitive,
        inputs: &[ArrayData],
        donated: &[bool],
        outputs: &[(Shape, DType)],
    ) -> Result<Vec<ArrayData>> {
        if let (Primitive::SliceUpdate { start, step, len }, [base, update], [true, ..]) =
            (prim, inputs, donated)
        {
            let whole = Layout::contiguous(&outputs[0].0);
            if base.layout == whole && base.dtype == outputs[0].1 && base.dtype == update.dtype {
                crate::alloc::check_on_gpu(prim.name(), &base.buffer)?;
                crate::alloc::check_on_gpu(prim.name(), &update.buffer)?;
                copy::copy_into(update, &base.buffer, &whole.slice(start, step, len))?;
                return Ok(vec![base.clone()]);
            }
        }
        self.eval(prim, inputs, outputs)
    }

    fn eval(
        &self,
        prim: &Primitive,
        inputs: &[ArrayData],
        outputs: &[(Shape, DType)],
    ) -> Result<Vec<ArrayData>> {
        let op = prim.name();
        let dtypes = inputs.iter().map(|x| x.dtype).chain(outputs.iter().map(|o| o.1));
        // User CUDA kernels handle float64 themselves.
        let user_kernel = matches!(prim, Primitive::Fast(kiln_base::FastOp::CudaKernel(_)));
        if let Some(d) = dtypes.clone().find(|d| *d == DType::F64 && !user_kernel) {
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
            Primitive::LogSumExp => Ok(vec![rows::logsumexp(&inputs[0], &outputs[0].0)?]),
            Primitive::Fast(op) => crate::fast::eval(op, inputs, outputs),
            Primitive::Collective(c) => {
                let (shape, dtype) = &outputs[0];
                Ok(vec![crate::collective::collective(c, inputs, shape, *dtype)?])
            }
            _ => {
                let (shape, dtype) = &outputs[0];
                let out = match prim {
                    Primitive::Arange { start, step, dtype, .. } => {
                        creation::arange(*start, *step, *dtype, shape)
                    }
                    Primitive::RandomBits { shape: per_key, width } => {
                        creation::random_bits(&inputs[0], per_key, *width, shape, *dtype)
                    }
                    Primitive::Concatenate { axis } => copy::concatenate(inputs, *axis, shape),
                    Primitive::Complex(cop) => complex::complex_part(*cop, &inputs[0], shape),
                    Primitive::Fft { axes, inverse, kind } => {
                        fft::fft(axes, *inverse, *kind, &inputs[0], shape)
                    }
                    Primitive::NumberOfElements { axes, inverted, dtype } => {
                        complex::number_of_elements(axes, *inverted, *dtype, &inputs[0])
                    }
                    Primitive::Conv(params) => conv::conv(params, &inputs[0], &inputs[1], shape),
                    Primitive::MaskedScatter => {
                        masked::masked_scatter(&inputs[0], &inputs[1], &inputs[2], shape)
                    }
                    Primitive::SliceUpdate { start, step, len } => {
                        copy::slice_update((start, step, len), &inputs[0], &inputs[1], shape)
                    }
                    Primitive::Gather { axes, slice_sizes } => {
                        indexing::gather(axes, slice_sizes, inputs, shape)
                    }
                    Primitive::Scatter { axes, reduce } => {
                        indexing::scatter(axes, *reduce, inputs, shape)
                    }
                    Primitive::Scan { op, axis, reverse, inclusive } => {
                        scan::scan(prim, (*op, *axis, *reverse, *inclusive), &inputs[0], shape)
                    }
                    // A full sort is a valid partition for every kth.
                    Primitive::Sort { axis, arg } | Primitive::Partition { axis, arg, .. } => {
                        sort::sort(prim.name(), *axis, *arg, &inputs[0], shape)
                    }
                    Primitive::SearchSorted { right } => {
                        sort::search_sorted(*right, &inputs[0], &inputs[1], shape)
                    }
                    Primitive::View(_) => {
                        copy::relabel(&inputs[0], Layout::contiguous(shape), *dtype)
                    }
                    Primitive::AsStrided { shape: s, strides, offset } => copy::relabel(
                        &inputs[0],
                        Layout::new(s.clone(), strides.clone(), *offset),
                        *dtype,
                    ),
                    _ => return elementwise_op(prim, inputs, outputs),
                }?;
                Ok(vec![out])
            }
        }
    }
}

/// An eager elementwise primitive as its one-step program.
fn elementwise_op(
    prim: &Primitive,
    inputs: &[ArrayData],
    outputs: &[(Shape, DType)],
) -> Result<Vec<ArrayData>> {
    let op = prim.name();
    let in_dtypes: Vec<DType> = inputs.iter().map(|x| x.dtype).collect();
    let Some(program) = single_op_program(prim, &in_dtypes, outputs[0].1) else {
        bail!(Unsupported, op, "{op} has no GPU kernel yet.");
    };
    run_program(&Arc::new(program), inputs, &outputs[0].0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_base::{BinaryOp, ComplexOp, UnaryOp};

    #[test]
    fn complex_support_table() {
        assert!(supports_complex(&Primitive::Unary(UnaryOp::Exp)));
        assert!(!supports_complex(&Primitive::Unary(UnaryOp::Floor)));
        assert!(supports_complex(&Primitive::Binary(BinaryOp::Divide)));
        assert!(!supports_complex(&Primitive::Binary(BinaryOp::Remainder)));
        assert!(supports_complex(&Primitive::Reduce { op: ReduceOp::Prod, axes: vec![0] }));
        assert!(!supports_complex(&Primitive::Reduce { op: ReduceOp::And, axes: vec![0] }));
        assert!(supports_complex(&Primitive::Sort { axis: 0, arg: false }));
        assert!(supports_complex(&Primitive::Matmul));
        let scan = |op| Primitive::Scan { op, axis: 0, reverse: false, inclusive: true };
        assert!(supports_complex(&scan(ScanOp::Prod)));
        assert!(!supports_complex(&scan(ScanOp::LogAddExp)));
        assert!(!supports_complex(&Primitive::Linalg(kiln_base::LinalgOp::Inv)));
        assert!(supports_complex(&Primitive::Complex(ComplexOp::Abs)));
    }
}
