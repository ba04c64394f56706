//! The fused interpreter tier: a fused program run chunk by chunk with the eager kernels.
//! Each chunk's intermediates are a few thousand elements (they stay in L1 and the buffer
//! cache hands the same blocks back every chunk), so a region never allocates its
//! intermediates at full size. Runs while the C kernel builds, and wherever there is no C
//! compiler.

use crate::{binary, cast, copy, creation, unary};
use kiln_base::shape::size_of;
use kiln_base::{bail, ArrayData, FusedOp, FusedProgram, Layout, Result, Scalar, HOST};

/// Elements per chunk: small enough for a dozen f32 intermediates to stay in L1/L2, large
/// enough that per-chunk dispatch costs little next to the arithmetic.
const CHUNK: usize = 4096;

/// How the chunk loop reads one input.
enum Source {
    /// Row-major elements starting at this buffer offset.
    Flat(ArrayData),
    /// One value repeated (a broadcast scalar).
    Uniform(ArrayData),
}

impl Source {
    fn new(x: &ArrayData, shape: &[usize]) -> Result<Source> {
        let l = &x.layout;
        let one_slot = l.shape.iter().zip(&l.strides).all(|(&d, &s)| d == 1 || s == 0);
        if one_slot && l.size() > 0 {
            return Ok(Source::Uniform(x.clone()));
        }
        if l.row_contiguous {
            return Ok(Source::Flat(x.clone()));
        }
        // A strided or partly broadcast input: one contiguous copy, then chunks of it.
        Ok(Source::Flat(copy::copy(x, shape)?))
    }

    /// The elements `begin..begin + len` as a 1-d view.
    fn chunk(&self, begin: usize, len: usize) -> ArrayData {
        let (data, offset, stride) = match self {
            Source::Flat(d) => (d, d.layout.offset + begin, 1),
            Source::Uniform(d) => (d, d.layout.offset, 0),
        };
        let layout = Layout::new([len].as_slice().into(), [stride].as_slice().into(), offset);
        ArrayData { buffer: data.buffer.clone(), layout, dtype: data.dtype }
    }
}

/// Runs `program` over `inputs` (all of the output shape, possibly as broadcast views);
/// `donated[i]` (missing: false) lets an output take input `i`'s buffer, as the C kernels
/// do: each chunk reads its inputs before writing the same elements of its outputs, and
/// reads no element a chunk before it wrote.
pub(crate) fn run(
    program: &FusedProgram,
    inputs: &[ArrayData],
    shape: &[usize],
    donated: &[bool],
) -> Result<Vec<ArrayData>> {
    let n = size_of(shape);
    let sources = inputs.iter().map(|x| Source::new(x, shape)).collect::<Result<Vec<_>>>()?;
    let literals = program
        .steps
        .iter()
        .map(|s| match &s.op {
            FusedOp::Literal(v) => creation::arange(*v, Scalar::Int(0), s.dtype, &[1]).map(Some),
            _ => Ok(None),
        })
        .collect::<Result<Vec<_>>>()?;
    let mut outputs = Vec::with_capacity(program.outputs.len());
    let mut out_ptrs = Vec::with_capacity(program.outputs.len());
    let mut taken = vec![false; inputs.len()];
    for dtype in program.output_dtypes() {
        // Only an input read in place (not a copy made above) can hold an output.
        let donor = (0..inputs.len()).find(|&i| {
            !taken[i]
                && donated.get(i) == Some(&true)
                && matches!(&sources[i], Source::Flat(d) if d.buffer.same(&inputs[i].buffer))
                && super::fits_in_place(&inputs[i], dtype, n)
        });
        let buffer = match donor {
            Some(i) => {
                taken[i] = true;
                inputs[i].buffer.clone()
            }
            None => HOST.alloc_for_overwrite(n * dtype.size())?,
        };
        // The allocation's own pointer: a donated buffer is also read through `sources`.
        out_ptrs.push(buffer.as_ptr() as *mut u8);
        outputs.push(ArrayData { buffer, layout: Layout::contiguous(shape), dtype });
    }
    let mut values: Vec<Option<ArrayData>> = vec![None; program.steps.len()];
    // As the C kernels: a Ctrl-C stops the run unless an input is being overwritten in place.
    let interruptible = !donated.contains(&true);
    let mut begin = 0;
    while begin < n {
        if interruptible && kiln_base::interrupt::requested() {
            break; // eval discards the outputs
        }
        let len = CHUNK.min(n - begin);
        let chunk = [len];
        for (i, step) in program.steps.iter().enumerate() {
            let get = |k: usize| values[k].as_ref().expect("operands come first");
            let value = match &step.op {
                FusedOp::Input(k) => sources[*k].chunk(begin, len),
                FusedOp::Literal(_) => {
                    let lit = literals[i].as_ref().expect("built above");
                    Source::Uniform(lit.clone()).chunk(0, len)
                }
                FusedOp::Unary(op, a) => unary::unary(*op, get(*a), &chunk)?,
                FusedOp::Binary(op, a, b) => binary::binary(*op, get(*a), get(*b), &chunk)?,
                FusedOp::Where(c, a, b) => binary::where_(get(*c), get(*a), get(*b), &chunk)?,
                FusedOp::AsType(a) => cast::astype(get(*a), &chunk, step.dtype)?,
            };
            values[i] = Some(value);
        }
        for ((out, &ptr), &step) in outputs.iter().zip(&out_ptrs).zip(&program.outputs) {
            let value = values[step].as_ref().expect("every step ran");
            write_chunk(out, ptr, value, begin, len)?;
        }
        begin += len;
    }
    Ok(outputs)
}

/// Copies a chunk's values (any 1-d layout) into `out` (whose buffer starts at `dst`) at
/// element `begin`.
fn write_chunk(
    out: &ArrayData,
    dst: *mut u8,
    value: &ArrayData,
    begin: usize,
    len: usize,
) -> Result<()> {
    let width = out.dtype.size();
    let dense;
    let (src, offset) = if value.layout.row_contiguous {
        (value, value.layout.offset)
    } else {
        dense = copy::copy(value, &[len])?;
        (&dense, 0)
    };
    if out.buffer.nbytes() < (begin + len) * width || src.buffer.nbytes() < (offset + len) * width {
        bail!(Runtime, "compile", "Fused chunk out of bounds.");
    }
    // SAFETY: both ranges are inside their buffers (checked above). No reference to either
    // buffer is alive here (the chunk kernels returned), and `ptr::copy` allows the ranges
    // to overlap: a donated input's chunk passed straight to the output is the same range.
    unsafe {
        std::ptr::copy(
            src.buffer.as_ptr().add(offset * width),
            dst.add(begin * width),
            len * width,
        );
    }
    Ok(())
}
