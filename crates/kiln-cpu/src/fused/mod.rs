//! Fused elementwise kernels (compile's regions): the generated C kernel when it is built,
//! the chunked interpreter otherwise. Inputs arrive with the output's shape (broadcasts are
//! zero-stride views); outputs are fresh row-major buffers, or a donated input's buffer.
//!
//! Donation: when eval says an input's buffer is referenced by nothing but this call (no
//! array the user holds, no view, no numpy export, not passed twice), an output of the same
//! element size may be written into it: element `i` of the input is read before element
//! `i` of the output is written, and no other element is touched in between, so the
//! kernel computes the same values without a new buffer (`x = f(x)` loops run in place).

mod disk_cache;
mod interp;
pub mod jit;

use kiln_base::shape::size_of;
use kiln_base::{bail, ArrayData, DType, DeviceKind, FusedProgram, Layout, Result, HOST};
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

/// Runs `program`; `donated[i]` (missing: false) says input `i`'s buffer may become an output.
pub(crate) fn eval(
    program: &std::sync::Arc<FusedProgram>,
    inputs: &[ArrayData],
    shape: &[usize],
    donated: &[bool],
) -> Result<Vec<ArrayData>> {
    program.validate()?;
    program.check_inputs(inputs, shape)?;
    let n = size_of(shape);
    if n == 0 {
        return interp::run(program, inputs, shape, &[]);
    }
    let variant = variant_for(inputs);
    match jit::kernel(program, &variant) {
        Some(kernel) => run_c(&kernel, program, inputs, shape, donated),
        None => interp::run(program, inputs, shape, donated),
    }
}

/// Whether `x` can hold an output of `n` elements of `dtype` in place: its elements are
/// exactly the buffer's first `n` slots in row-major order, of the same size.
fn fits_in_place(x: &ArrayData, dtype: DType, n: usize) -> bool {
    x.dtype.size() == dtype.size()
        && x.layout.row_contiguous
        && x.layout.offset == 0
        && x.layout.size() == n
        && x.layout.strides.iter().zip(&x.layout.shape).all(|(&s, &d)| s != 0 || d <= 1)
        && x.buffer.nbytes() >= n * dtype.size()
        && x.buffer.device().kind == DeviceKind::Cpu
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
// are only read, and each task writes the outputs at its own disjoint index range; a
// donated input shares its buffer with one output, and each task reads an element of it
// only at indices of its own range, before writing that index.
unsafe impl Sync for Args {}

fn run_c(
    kernel: &jit::Kernel,
    program: &FusedProgram,
    inputs: &[ArrayData],
    shape: &[usize],
    donated: &[bool],
) -> Result<Vec<ArrayData>> {
    let n = size_of(shape);
    let mut outputs = Vec::with_capacity(program.outputs.len());
    let mut out_ptrs = Vec::with_capacity(program.outputs.len());
    let mut taken = vec![false; inputs.len()];
    for dtype in program.output_dtypes() {
        let donor = (0..inputs.len()).find(|&i| {
            !taken[i] && donated.get(i) == Some(&true) && fits_in_place(&inputs[i], dtype, n)
        });
        let layout = Layout::contiguous(shape);
        if let Some(i) = donor {
            taken[i] = true;
            let buffer = inputs[i].buffer.clone();
            // The allocation's own pointer (not one derived from a shared slice): eval
            // guarantees nothing else reads or writes this buffer while the kernel runs.
            out_ptrs.push(buffer.as_ptr() as *mut u8);
            outputs.push(ArrayData { buffer, layout, dtype });
        } else {
            let mut buffer = HOST.alloc_for_overwrite(n * dtype.size())?;
            let Some(slice) = buffer.host_slice_mut::<u8>() else {
                bail!(Runtime, "compile", "Fused output buffer is shared.");
            };
            out_ptrs.push(slice.as_mut_ptr());
            outputs.push(ArrayData { buffer, layout, dtype });
        }
    }
    let in_ptrs = inputs
        .iter()
        // `wrapping_add`: the offset is inside the buffer (kiln-cpu validated the layout).
        // Raw pointers throughout, since a donated buffer is written through `out_ptrs`.
        .map(|x| x.buffer.as_ptr().wrapping_add(x.layout.offset * x.dtype.size()))
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
    // A Ctrl-C skips the remaining tasks (eval discards the outputs), except where an input
    // is overwritten in place: that run completes, so its result stays valid.
    let interruptible = !donated.contains(&true);
    if n < PARALLEL_ELEMENTS {
        call(0, n);
    } else {
        let chunk = crate::walk::task_elements(n, 1024, 1024);
        (0..n.div_ceil(chunk)).into_par_iter().for_each(|t| {
            if !(interruptible && kiln_base::interrupt::requested()) {
                call(t * chunk, ((t + 1) * chunk).min(n))
            }
        });
    }
    kernel.record_run(started.elapsed().as_nanos() as u64);
    Ok(outputs)
}
