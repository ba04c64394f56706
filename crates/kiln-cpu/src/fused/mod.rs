//! Fused elementwise kernels (compile's regions): the generated C kernel when it is built,
//! the chunked interpreter otherwise. Inputs arrive with the output's shape (broadcasts are
//! zero-stride views); outputs are fresh row-major buffers.

mod interp;
pub mod jit;

use kiln_base::shape::size_of;
use kiln_base::{bail, ArrayData, FusedProgram, Layout, Result, HOST};
use kiln_codegen::c::{InputKind, Variant};
use rayon::prelude::*;

/// Below this many elements one thread runs the whole kernel (a rayon task costs a few
/// microseconds).
const PARALLEL_ELEMENTS: usize = 1 << 15;

/// The variant that reads `inputs` in place: contiguous when each is row-contiguous or a
/// single broadcast value, strided otherwise.
pub fn variant_for(inputs: &[ArrayData]) -> Variant {
    let mut kinds = Vec::with_capacity(inputs.len());
    for x in inputs {
        let l = &x.layout;
        if l.size() > 0 && l.shape.iter().zip(&l.strides).all(|(&d, &s)| d == 1 || s == 0) {
            kinds.push(InputKind::Scalar);
        } else if l.row_contiguous {
            kinds.push(InputKind::Vector);
        } else {
            return Variant::Strided;
        }
    }
    Variant::Contiguous(kinds)
}

/// The C source compile would build for these inputs (explain).
pub fn kernel_source(program: &FusedProgram, inputs: &[ArrayData]) -> String {
    kiln_codegen::c::c_kernel(program, &variant_for(inputs))
}

pub(crate) fn eval(
    program: &FusedProgram,
    inputs: &[ArrayData],
    shape: &[usize],
) -> Result<Vec<ArrayData>> {
    program.validate()?;
    let n = size_of(shape);
    if n == 0 {
        return interp::run(program, inputs, shape);
    }
    let variant = variant_for(inputs);
    match jit::kernel(program, &variant) {
        Some(kernel) => run_c(&kernel, program, inputs, shape),
        None => interp::run(program, inputs, shape),
    }
}

/// Pointers into the buffers, shared by the tasks of one kernel run.
struct Args {
    inputs: Vec<*const u8>,
    outputs: Vec<*mut u8>,
}

impl Args {
    /// Through a method, so closures capture the whole (Sync) struct, not its fields.
    fn pointers(&self) -> (*const *const u8, *const *mut u8) {
        (self.inputs.as_ptr(), self.outputs.as_ptr())
    }
}

// SAFETY: the pointers stay valid for the whole run (the caller holds the buffers), inputs
// are only read, and each task writes the outputs at its own disjoint index range.
unsafe impl Sync for Args {}

fn run_c(
    kernel: &jit::Kernel,
    program: &FusedProgram,
    inputs: &[ArrayData],
    shape: &[usize],
) -> Result<Vec<ArrayData>> {
    let n = size_of(shape);
    let mut outputs = Vec::with_capacity(program.outputs.len());
    for dtype in program.output_dtypes() {
        let buffer = HOST.alloc_for_overwrite(n * dtype.size())?;
        outputs.push(ArrayData { buffer, layout: Layout::contiguous(shape), dtype });
    }
    let mut out_ptrs = Vec::with_capacity(outputs.len());
    for out in outputs.iter_mut() {
        let Some(slice) = out.buffer.host_slice_mut::<u8>() else {
            bail!(Runtime, "compile", "Fused output buffer is shared.");
        };
        out_ptrs.push(slice.as_mut_ptr());
    }
    let in_ptrs = inputs
        .iter()
        // `wrapping_add`: the offset is inside the buffer (kiln-cpu validated the layout).
        .map(|x| {
            x.buffer.host_slice::<u8>().as_ptr().wrapping_add(x.layout.offset * x.dtype.size())
        })
        .collect();
    let args = Args { inputs: in_ptrs, outputs: out_ptrs };
    // Strided: shape and per-input strides of the (at least 1-d) iteration space.
    let dims: Vec<i64> =
        if shape.is_empty() { vec![1] } else { shape.iter().map(|&d| d as i64).collect() };
    let mut strides = Vec::with_capacity(dims.len() * inputs.len());
    for x in inputs {
        if x.layout.strides.is_empty() {
            strides.push(0);
        } else {
            strides.extend(x.layout.strides.iter().map(|&s| s as i64));
        }
    }
    let call = |begin: usize, end: usize| {
        let (i, o) = args.pointers();
        // SAFETY: the kernel reads inputs only at elements their (validated) layouts address
        // for indices in [begin, end) < n, and writes outputs of n elements at those indices.
        unsafe {
            match kernel.entry {
                jit::Entry::Contiguous(f) => f(begin as i64, end as i64, i, o),
                jit::Entry::Strided(f) => f(
                    begin as i64,
                    end as i64,
                    i,
                    o,
                    dims.len() as i64,
                    dims.as_ptr(),
                    strides.as_ptr(),
                ),
            }
        }
    };
    let started = std::time::Instant::now();
    if n < PARALLEL_ELEMENTS {
        call(0, n);
    } else {
        let tasks = rayon::current_num_threads() * 4;
        let chunk = n.div_ceil(tasks).next_multiple_of(1024);
        (0..n.div_ceil(chunk))
            .into_par_iter()
            .for_each(|t| call(t * chunk, ((t + 1) * chunk).min(n)));
    }
    kernel.record_run(started.elapsed().as_nanos() as u64);
    Ok(outputs)
}
