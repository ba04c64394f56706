//! Elementwise work on the GPU: every fused program from compile, and each eager elementwise
//! primitive as a one-step program, so fused and single ops run the same generated code.

use crate::alloc::{device_ptr, DEVICE};
use crate::collapse::collapse_layouts;
use crate::launch::{blocks_covering, launch, Args, BLOCK};
use crate::nvrtc::Request;
use crate::nvrtc::{function, Function};
use kiln_base::{
    ArrayData, DType, FusedOp, FusedProgram, FusedStep, Layout, Primitive, Result, Shape,
};
use kiln_codegen::c::InputKind;
use kiln_codegen::cuda::{cuda_kernel, kernel_symbol, vector_width, CudaVariant};
use kiln_codegen::cuda_packed::packs;
use rustc_hash::FxHashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The one-step program of an eager elementwise primitive, or None for other primitives.
pub fn single_op_program(
    prim: &Primitive,
    inputs: &[DType],
    output: DType,
) -> Option<FusedProgram> {
    let mut steps: Vec<FusedStep> = inputs
        .iter()
        .enumerate()
        .map(|(k, &d)| FusedStep { op: FusedOp::Input(k), dtype: d })
        .collect();
    let op = match prim {
        Primitive::Unary(u) => FusedOp::Unary(*u, 0),
        Primitive::Binary(b) => FusedOp::Binary(*b, 0, 1),
        Primitive::Where => FusedOp::Where(0, 1, 2),
        Primitive::AsType(_) => FusedOp::AsType(0),
        Primitive::Copy => {
            return Some(FusedProgram { inputs: inputs.to_vec(), steps, outputs: vec![0] })
        }
        _ => return None,
    };
    steps.push(FusedStep { op, dtype: output });
    let last = steps.len() - 1;
    Some(FusedProgram { inputs: inputs.to_vec(), steps, outputs: vec![last] })
}

/// Half-precision steps computed two at a time in contiguous kernels (`cuda_packed`), unless
/// `KILN_CUDA_PACKED=0` (read once): the per-element code, to compare on a device.
fn packed_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("KILN_CUDA_PACKED").map_or(true, |v| v.trim() != "0"))
}

type Key = (Arc<FusedProgram>, CudaVariant);
static KERNELS: OnceLock<Mutex<FxHashMap<Key, Function>>> = OnceLock::new();

fn kernel(program: &Arc<FusedProgram>, variant: CudaVariant) -> Result<Function> {
    let kernels = KERNELS.get_or_init(|| Mutex::new(FxHashMap::default()));
    let key = (program.clone(), variant);
    if let Some(f) = kernels.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(*f);
    }
    let request = kernel_request(program, &key.1);
    let f = function(&request.source, &request.symbol)?;
    kernels.lock().unwrap_or_else(|e| e.into_inner()).insert(key, f);
    Ok(f)
}

/// The CUDA C and entry point of one variant of `program`.
fn kernel_request(program: &FusedProgram, variant: &CudaVariant) -> Request {
    Request { source: cuda_kernel(program, variant), symbol: kernel_symbol(program) }
}

/// The kernel `run_program` will build for `prim` (a fused program or an eager elementwise
/// primitive) over inputs of these layouts, named without running it (parallel builds,
/// `prebuild`). Device blocks are 256-byte aligned, so a layout's offset decides whether its
/// vector accesses are aligned. `None` for other primitives and for launches of no kernel.
pub fn predict(
    prim: &Primitive,
    inputs: &[(Layout, DType)],
    output: &(Shape, DType),
) -> Option<Request> {
    let program = match prim {
        Primitive::Fused(p) => p.clone(),
        _ => {
            let dtypes: Vec<DType> = inputs.iter().map(|(_, d)| *d).collect();
            Arc::new(single_op_program(prim, &dtypes, output.1)?)
        }
    };
    if program.inputs.len() != inputs.len() || output.0.iter().product::<usize>() == 0 {
        return None;
    }
    let views: Vec<InputView<'_>> = inputs
        .iter()
        .map(|(layout, dtype)| InputView {
            layout,
            dtype: *dtype,
            addr: (layout.offset as u64).wrapping_mul(dtype.size() as u64),
        })
        .collect();
    let plan = plan(&program, &views, &output.0).ok()?;
    Some(kernel_request(&program, &plan.variant))
}

/// An input as the choice of variant sees it: its layout, dtype and the device address of
/// its first element (only the address's alignment matters).
struct InputView<'a> {
    layout: &'a Layout,
    dtype: DType,
    addr: u64,
}

/// How `run_program` runs a program: the kernel variant, elements per thread, and for the
/// strided variant its dims-and-strides argument.
struct Plan {
    variant: CudaVariant,
    per_thread: usize,
    table: Option<Vec<i64>>,
}

/// Contiguous inputs (or broadcast scalars) take the flat-index variant, with vector
/// accesses when every vector input is aligned for them; any other layout the strided one.
fn plan(program: &FusedProgram, inputs: &[InputView<'_>], shape: &[usize]) -> Result<Plan> {
    let n: usize = shape.iter().product();
    let kinds: Option<Vec<InputKind>> = inputs
        .iter()
        .map(|x| {
            if x.layout.shape.as_slice() == shape && x.layout.row_contiguous {
                Some(InputKind::Vector)
            } else if x
                .layout
                .strides
                .iter()
                .zip(x.layout.shape.iter())
                .all(|(&s, &d)| s == 0 || d == 1)
            {
                Some(InputKind::Scalar)
            } else {
                None
            }
        })
        .collect();
    match kinds {
        Some(kinds) => {
            let width = vector_width(program);
            let aligned = inputs.iter().zip(&kinds).all(|(x, k)| {
                *k == InputKind::Scalar || x.addr % (x.dtype.size() * width) as u64 == 0
            });
            let vector = if aligned { width } else { 1 };
            let packed = packed_enabled() && packs(program, vector);
            let unroll = if vector > 1 { vectors_per_thread(program) } else { 1 };
            Ok(Plan {
                variant: CudaVariant::Contiguous { kinds, vector, packed, unroll },
                per_thread: vector,
                table: None,
            })
        }
        None => {
            if let Some(x) = inputs.iter().find(|x| x.layout.shape.as_slice() != shape) {
                kiln_base::bail!(
                    Runtime,
                    "elementwise",
                    "A kernel input of shape {:?} does not match the output shape {shape:?}.",
                    x.layout.shape
                );
            }
            let layouts: Vec<&Layout> = inputs.iter().map(|x| x.layout).collect();
            let (dims, strides) = collapse_layouts(shape, &layouts);
            let reach: i64 = strides
                .iter()
                .map(|s| s.iter().zip(&dims).map(|(st, d)| st.abs() * (d - 1)).sum::<i64>())
                .max()
                .unwrap_or(0);
            let wide = n as i64 > (i32::MAX as i64 >> 1) || reach > (i32::MAX as i64 >> 1);
            let mut table = dims.clone();
            for s in &strides {
                table.extend_from_slice(s);
            }
            if inputs.is_empty() {
                table.extend(std::iter::repeat_n(0, dims.len()));
            }
            let ndim = dims.len();
            let width = vector_width(program);
            let (variant, per_thread) = match row_kinds(inputs, &dims, &strides, width) {
                Some(kinds) => {
                    let packed = packed_enabled() && packs(program, width);
                    (CudaVariant::Rows { ndim, wide, kinds, vector: width, packed }, width)
                }
                None => (CudaVariant::Strided { ndim, wide }, 1),
            };
            Ok(Plan { variant, per_thread, table: Some(table) })
        }
    }
}

/// The inputs' kinds for the `Rows` variant, when it applies: the innermost collapsed dim a
/// multiple of `width` elements, and each input reading it contiguously with `width`-aligned
/// rows (`Vector`: its address and outer strides) or not at all (stride 0, `Scalar`).
fn row_kinds(
    inputs: &[InputView<'_>],
    dims: &[i64],
    strides: &[Vec<i64>],
    width: usize,
) -> Option<Vec<InputKind>> {
    let w = width as i64;
    let last = dims.len().checked_sub(1)?;
    if width < 2 || dims[last] % w != 0 {
        return None;
    }
    inputs
        .iter()
        .zip(strides)
        .map(|(x, st)| match st[last] {
            0 => Some(InputKind::Scalar),
            1 if st[..last].iter().all(|s| s % w == 0)
                && x.addr % (x.dtype.size() * width) as u64 == 0 =>
            {
                Some(InputKind::Vector)
            }
            _ => None,
        })
        .collect()
}

/// Runs `program` over inputs already on the GPU; every output has `shape`, row-major.
pub fn run_program(
    program: &Arc<FusedProgram>,
    inputs: &[ArrayData],
    shape: &[usize],
) -> Result<Vec<ArrayData>> {
    program.check_inputs(inputs, shape)?;
    let n: usize = shape.iter().product();
    let outputs: Vec<ArrayData> = program
        .output_dtypes()
        .into_iter()
        .map(|dtype| {
            Ok(ArrayData {
                buffer: DEVICE.alloc(n * dtype.size())?,
                layout: Layout::contiguous(shape),
                dtype,
            })
        })
        .collect::<Result<_>>()?;
    if n == 0 {
        return Ok(outputs);
    }
    let in_ptr = |x: &ArrayData| device_ptr(&x.buffer, x.layout.offset as isize, x.dtype.size());
    let views: Vec<InputView<'_>> = inputs
        .iter()
        .map(|x| InputView { layout: &x.layout, dtype: x.dtype, addr: in_ptr(x) })
        .collect();
    let Plan { variant, per_thread, table } = plan(program, &views, shape)?;
    let mut args = Args::new();
    args.i64(n as i64);
    for x in inputs {
        args.ptr(in_ptr(x));
    }
    for y in &outputs {
        args.ptr(device_ptr(&y.buffer, 0, y.dtype.size()));
    }
    if let Some(table) = &table {
        args.i64_struct(table);
    }
    let f = kernel(program, variant)?;
    let per_block = BLOCK as u64 * (per_thread * vectors_per_thread(program)) as u64;
    launch("elementwise", f, blocks_covering(n as u64, per_block), BLOCK, 0, &mut args)?;
    Ok(outputs)
}

/// Accesses each thread makes in the grid-stride loop: four for programs that compute much
/// per byte they move (each op's `cost` from the facts table, 4 or more per byte), else one.
/// Measured on the H200, 2^26 elements: bf16 gelu_erf (compute-bound) ran at 0.78 of the
/// copy floor with one per thread and 0.90 with four, float32 gelu_erf at 0.92 with one;
/// streaming programs (adam, silu_mul: 1 to 2 per byte) ran 1 to 3% slower with four.
fn vectors_per_thread(program: &FusedProgram) -> usize {
    let cost: u32 = program
        .steps
        .iter()
        .map(|s| match s.op {
            FusedOp::Unary(op, _) => op.facts().cost,
            FusedOp::Binary(op, ..) => op.facts().cost,
            FusedOp::Where(..) | FusedOp::AsType(_) => 1,
            FusedOp::Input(_) | FusedOp::Literal(_) => 0,
        })
        .sum();
    let bytes: usize =
        program.inputs.iter().chain(&program.output_dtypes()).map(|d| d.size()).sum();
    if cost as usize >= 4 * bytes.max(1) {
        4
    } else {
        1
    }
}

#[cfg(test)]
mod packed_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_base::{BinaryOp, Scalar, UnaryOp};

    /// Every complex64 elementwise kernel the GPU may build: each supported unary and binary
    /// op, conversions to and from every other dtype, where, and a fused program mixing
    /// complex and real values, in the vector, scalar-broadcast and strided variants.
    fn complex_programs() -> Vec<(String, FusedProgram)> {
        let c = DType::C64;
        let mut out = Vec::new();
        for op in UnaryOp::ALL.into_iter().filter(|&op| op.runs_on_complex()) {
            let p = single_op_program(&Primitive::Unary(op), &[c], c).unwrap();
            out.push((format!("unary_{}", op.facts().name), p));
        }
        for op in BinaryOp::ALL.into_iter().filter(|&op| op.runs_on_complex()) {
            let dt = if op.facts().bool_output { DType::Bool } else { c };
            let p = single_op_program(&Primitive::Binary(op), &[c, c], dt).unwrap();
            out.push((format!("binary_{}", op.facts().name), p));
        }
        for d in DType::ALL.into_iter().filter(|&d| d != c && d != DType::F64) {
            let to = single_op_program(&Primitive::AsType(d), &[c], d).unwrap();
            out.push((format!("astype_c64_{d}"), to));
            let from = single_op_program(&Primitive::AsType(c), &[d], c).unwrap();
            out.push((format!("astype_{d}_c64"), from));
        }
        let w = single_op_program(&Primitive::Where, &[DType::Bool, c, c], c).unwrap();
        out.push(("where_c64".into(), w));
        let st = |op, dtype| FusedStep { op, dtype };
        // |exp(z) * x + (1 + 2j)| > x, with x float32: complex and real in one kernel.
        let mixed = FusedProgram {
            inputs: vec![c, DType::F32],
            steps: vec![
                st(FusedOp::Input(0), c),
                st(FusedOp::Input(1), DType::F32),
                st(FusedOp::Unary(UnaryOp::Exp, 0), c),
                st(FusedOp::AsType(1), c),
                st(FusedOp::Binary(BinaryOp::Multiply, 2, 3), c),
                st(FusedOp::Literal(Scalar::Complex(1.0, 2.0)), c),
                st(FusedOp::Binary(BinaryOp::Add, 4, 5), c),
                st(FusedOp::AsType(6), DType::F32),
                st(FusedOp::Binary(BinaryOp::Greater, 7, 1), DType::Bool),
                st(FusedOp::Where(8, 6, 5), c),
            ],
            outputs: vec![9, 7],
        };
        out.push(("mixed".into(), mixed));
        out
    }

    /// Every variant of a generated elementwise kernel starts with the grid wait (an entry
    /// the transform missed would race its predecessor under an early launch).
    #[test]
    fn elementwise_kernels_start_with_the_grid_wait() {
        use kiln_base::BinaryOp;
        let f32s = DType::F32;
        let add = Primitive::Binary(BinaryOp::Add);
        let program = single_op_program(&add, &[f32s, f32s], f32s).unwrap();
        let kinds = vec![InputKind::Vector; 2];
        for variant in [
            CudaVariant::Contiguous { kinds: kinds.clone(), vector: 4, packed: false, unroll: 1 },
            CudaVariant::Strided { ndim: 3, wide: true },
            CudaVariant::Rows { ndim: 2, wide: false, kinds, vector: 4, packed: false },
        ] {
            let source = crate::nvrtc::with_grid_wait(&kernel_request(&program, &variant).source);
            assert_eq!(source.matches("griddepcontrol.wait").count(), 1, "{source}");
        }
    }

    /// `predict` names the variant `run_program` picks for each layout (it shares `plan`).
    #[test]
    fn predict_follows_the_layouts() {
        use kiln_base::BinaryOp;
        let f32s = DType::F32;
        let add = Primitive::Binary(BinaryOp::Add);
        let out: (Shape, DType) = ([4, 6].as_slice().into(), f32s);
        let program = single_op_program(&add, &[f32s, f32s], f32s).unwrap();
        let expect = |variant| Some(kernel_request(&program, &variant));
        let row = Layout::contiguous(&[4, 6]);
        let vector = vector_width(&program);
        let both = vec![InputKind::Vector; 2];
        let aligned = [(row.clone(), f32s), (row.clone(), f32s)];
        assert_eq!(
            predict(&add, &aligned, &out),
            expect(CudaVariant::Contiguous {
                kinds: both.clone(),
                vector,
                packed: false,
                unroll: 1
            })
        );
        // An offset of one element breaks 16-byte vector accesses: scalar loads.
        let shifted = Layout::new([4, 6].as_slice().into(), [6, 1].as_slice().into(), 1);
        let unaligned = [(row.clone(), f32s), (shifted, f32s)];
        assert_eq!(
            predict(&add, &unaligned, &out),
            expect(CudaVariant::Contiguous { kinds: both, vector: 1, packed: false, unroll: 1 })
        );
        // A broadcast scalar is read once; a transposed view takes the strided variant.
        let scalar = Layout::new([4, 6].as_slice().into(), [0, 0].as_slice().into(), 0);
        let kinds = vec![InputKind::Vector, InputKind::Scalar];
        assert_eq!(
            predict(&add, &[(row.clone(), f32s), (scalar, f32s)], &out),
            expect(CudaVariant::Contiguous { kinds, vector, packed: false, unroll: 1 })
        );
        let t = Layout::new([4, 6].as_slice().into(), [1, 4].as_slice().into(), 0);
        assert_eq!(
            predict(&add, &[(row.clone(), f32s), (t, f32s)], &out),
            expect(CudaVariant::Strided { ndim: 2, wide: false })
        );
        // Rows read contiguously (a row broadcast, a matrix slice, a column broadcast) take
        // the vector Rows variant when the rows are multiples of the vector and aligned.
        let wide_out: (Shape, DType) = ([4, 8].as_slice().into(), f32s);
        let row8 = Layout::contiguous(&[4, 8]);
        let bias = Layout::new([4, 8].as_slice().into(), [0, 1].as_slice().into(), 0);
        let rows = |kinds| CudaVariant::Rows { ndim: 2, wide: false, kinds, vector, packed: false };
        assert_eq!(
            predict(&add, &[(row8.clone(), f32s), (bias, f32s)], &wide_out),
            expect(rows(vec![InputKind::Vector; 2]))
        );
        let slice = Layout::new([4, 8].as_slice().into(), [16, 1].as_slice().into(), 8);
        let column = Layout::new([4, 8].as_slice().into(), [1, 0].as_slice().into(), 0);
        assert_eq!(
            predict(&add, &[(slice, f32s), (column.clone(), f32s)], &wide_out),
            expect(rows(vec![InputKind::Vector, InputKind::Scalar]))
        );
        // A row start off the vector (offset 1, or rows of 6 floats) reads element-wise.
        let odd = Layout::new([4, 8].as_slice().into(), [16, 1].as_slice().into(), 1);
        assert_eq!(
            predict(&add, &[(odd, f32s), (column, f32s)], &wide_out),
            expect(CudaVariant::Strided { ndim: 2, wide: false })
        );
        let bias6 = Layout::new([4, 6].as_slice().into(), [0, 1].as_slice().into(), 0);
        assert_eq!(
            predict(&add, &[(row.clone(), f32s), (bias6, f32s)], &out),
            expect(CudaVariant::Strided { ndim: 2, wide: false })
        );
        // No kernel for empty outputs or non-elementwise primitives; a fused program is
        // predicted as itself.
        let empty: (Shape, DType) = ([0, 6].as_slice().into(), f32s);
        let e = Layout::contiguous(&[0, 6]);
        assert_eq!(predict(&add, &[(e.clone(), f32s), (e, f32s)], &empty), None);
        assert_eq!(predict(&Primitive::Matmul, &aligned, &out), None);
        let fused = Primitive::Fused(Arc::new(program.clone()));
        assert_eq!(predict(&fused, &aligned, &out), predict(&add, &aligned, &out));
        // Wrong input count: no guess.
        assert_eq!(predict(&fused, &aligned[..1], &out), None);
    }

    #[test]
    fn complex_kernels_generate_for_every_variant() {
        let mut sources = Vec::new();
        for (name, p) in complex_programs() {
            let kinds = vec![InputKind::Vector; p.inputs.len()];
            let width = kiln_codegen::cuda::vector_width(&p);
            let v = cuda_kernel(
                &p,
                &CudaVariant::Contiguous { kinds, vector: width, packed: true, unroll: 1 },
            );
            assert!(v.contains("kc64"), "{name}");
            sources.push((format!("ew_{name}_vec.cu"), v));
            let scalars = vec![InputKind::Scalar; p.inputs.len()];
            let s = cuda_kernel(
                &p,
                &CudaVariant::Contiguous { kinds: scalars, vector: 1, packed: true, unroll: 1 },
            );
            sources.push((format!("ew_{name}_scalar.cu"), s));
            let st = cuda_kernel(&p, &CudaVariant::Strided { ndim: 2, wide: true });
            sources.push((format!("ew_{name}_strided.cu"), st));
            let mut kinds = vec![InputKind::Vector; p.inputs.len()];
            kinds[0] = InputKind::Scalar;
            let rows =
                CudaVariant::Rows { ndim: 2, wide: true, kinds, vector: width, packed: true };
            sources.push((format!("ew_{name}_rows.cu"), cuda_kernel(&p, &rows)));
        }
        let mixed = &sources.iter().find(|(n, _)| n == "ew_mixed_vec.cu").unwrap().1;
        assert!(mixed.contains("KVec<kc64, 2>"));
        assert!(mixed.contains("k_c64(1e0f, 2e0f)"));
        assert!(mixed.contains("k_c64((float)(t1), 0.0f)"));
        assert!(mixed.contains("const float t7 = (t6).re;"));
        crate::nvrtc::dump_sources(&sources);
    }
}
