//! Parallel kernel builds for a GPU entry's first call. Without them each fused region's
//! kernel is built by NVRTC at its first launch, one after another; here the entry's first
//! replay names every elementwise kernel it will launch (fused regions and eager elementwise
//! nodes, for the layouts the call's inputs have) and `kiln_cuda::prebuild` builds them on
//! several threads before the replay runs. Kernels not predicted (other families, layouts
//! known only once a kernel has run) still build at their first launch, and a wrong guess
//! only costs an unused build, never a wrong result: the launch picks its kernel itself.

use super::captured::{Graph, Value};
use crate::array::Array;
use kiln_base::{DType, DeviceKind, Layout, Primitive, Shape};
use kiln_cuda::prebuild::Request;

/// How deep `array_layout` follows pending views before giving up.
const MAX_VIEW_DEPTH: u32 = 16;

/// The layout a call's output will have, given its inputs' (None: unknown). Single-input
/// calls that are views keep their input's memory; every other GPU kernel writes a fresh
/// row-major buffer.
fn output_layout(
    prim: &Primitive,
    inputs: &[(Option<Layout>, &[usize])],
    out: &[usize],
) -> Option<Layout> {
    if let [(layout, shape)] = inputs {
        match layout {
            Some(l) => {
                if let Some(view) = prim.view_layout(l) {
                    return Some(view);
                }
            }
            // Could be a view of memory whose layout is unknown.
            None if prim.view_layout(&Layout::contiguous(shape)).is_some() => return None,
            None => {}
        }
    }
    Some(Layout::contiguous(out))
}

/// The layout `a` has, or will have once evaluated (pending calls followed through views).
fn array_layout(a: &Array, depth: u32) -> Option<Layout> {
    if a.is_evaluated() {
        return a.data().ok().map(|d| d.layout.clone());
    }
    let (prim, inputs) = a.primitive()?; // placeholders have no layout
    if depth > MAX_VIEW_DEPTH || matches!(prim, Primitive::Custom { .. }) {
        return None;
    }
    let known: Vec<(Option<Layout>, &[usize])> = if inputs.len() == 1 {
        vec![(array_layout(&inputs[0], depth + 1), inputs[0].shape())]
    } else {
        Vec::new() // several inputs: never a view
    };
    output_layout(&prim, &known, a.shape())
}

/// Every elementwise kernel the graph's GPU nodes will launch over inputs of these layouts
/// (None: unknown), in node order.
pub(crate) fn kernel_requests(graph: &Graph, input_layouts: &[Option<Layout>]) -> Vec<Request> {
    let const_layouts: Vec<Option<Layout>> =
        graph.consts.iter().map(|a| array_layout(a, 0)).collect();
    let mut layouts: Vec<Vec<Option<Layout>>> = Vec::with_capacity(graph.nodes.len());
    let mut requests = Vec::new();
    for node in &graph.nodes {
        let args: Vec<(Option<Layout>, &[usize])> = node
            .inputs
            .iter()
            .map(|v| {
                let layout = match *v {
                    Value::Input(i) => input_layouts[i].clone(),
                    Value::Const(c) => const_layouts[c].clone(),
                    Value::Node(n, k) => layouts[n][k].clone(),
                };
                (layout, graph.meta(*v).0)
            })
            .collect();
        if node.stream.device.kind == DeviceKind::Gpu {
            let known: Option<Vec<(Layout, DType)>> = args
                .iter()
                .zip(&node.inputs)
                .map(|((l, _), v)| l.clone().map(|l| (l, graph.meta(*v).1)))
                .collect();
            if let Some(known) = known {
                requests.extend(node_kernel(&node.prim, &known, &node.outputs));
            }
        }
        let outputs = match node.prim {
            // A custom function's outputs are its last inputs, as they are.
            Primitive::Custom { num_primals, .. } => {
                args.iter().skip(num_primals).map(|(l, _)| l.clone()).collect()
            }
            // Calls of several outputs are never views.
            _ if node.outputs.len() > 1 => {
                node.outputs.iter().map(|o| Some(Layout::contiguous(&o.0))).collect()
            }
            _ => vec![output_layout(&node.prim, &args, &node.outputs[0].0)],
        };
        layouts.push(outputs);
    }
    requests
}

/// The kernel one node launches on the GPU, if it is elementwise and not a view (a reshape
/// that is no view runs as a copy, as eval does).
fn node_kernel(
    prim: &Primitive,
    inputs: &[(Layout, DType)],
    outputs: &[(Shape, DType)],
) -> Option<Request> {
    if let [(layout, _)] = inputs {
        if prim.view_layout(layout).is_some() {
            return None;
        }
    }
    let copy;
    let (prim, outputs) = match (prim, inputs) {
        (Primitive::Reshape { .. }, [(layout, dtype)]) => {
            copy = [(layout.shape.clone(), *dtype)];
            (&Primitive::Copy, copy.as_slice())
        }
        _ => (prim, outputs),
    };
    let dtypes = inputs.iter().map(|x| x.1).chain(outputs.iter().map(|o| o.1));
    if !crate::eval::gpu_runs(prim, dtypes) {
        return None; // runs on the CPU
    }
    kiln_cuda::elementwise::predict(prim, inputs, outputs.first()?)
}

/// Builds the kernels the first call of `graph` over `inputs` will need, in parallel
/// (`None`: no GPU node, no GPU, or batches turned off).
pub(crate) fn prebuild(
    graph: &Graph,
    inputs: &[Array],
) -> Option<kiln_cuda::prebuild::BatchReport> {
    if !worth_trying(graph) {
        return None;
    }
    let layouts: Vec<Option<Layout>> = inputs.iter().map(|a| array_layout(a, 0)).collect();
    let requests = kernel_requests(graph, &layouts);
    let _progress = kiln_cpu::fused::progress::building(requests.len());
    kiln_cuda::prebuild::build_batch(&requests)
}

/// Before a CUDA graph is captured over row-major staging copies of the inputs: the kernels
/// for those layouts (views passed in needed other variants at the first calls).
pub(crate) fn prebuild_row_major(graph: &Graph) -> Option<kiln_cuda::prebuild::BatchReport> {
    if !worth_trying(graph) {
        return None;
    }
    let layouts: Vec<Option<Layout>> =
        graph.inputs.iter().map(|(shape, _)| Some(Layout::contiguous(shape))).collect();
    kiln_cuda::prebuild::build_batch(&kernel_requests(graph, &layouts))
}

fn worth_trying(graph: &Graph) -> bool {
    let on_gpu = graph.nodes.iter().any(|n| n.stream.device.kind == DeviceKind::Gpu);
    on_gpu && kiln_cuda::prebuild::enabled() && kiln_cuda::is_available()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::trace;
    use crate::ops;
    use kiln_base::{BinaryOp, Scalar, Stream, UnaryOp};

    /// `exp(x + y.T) * 2` (one fused region over a transposed input), its sum (a reduction:
    /// no prediction), the sum negated (an eager elementwise node), and `y.T` flattened (a
    /// reshape that is no view: a copy). Traced on the CPU, then moved to the GPU stream.
    fn gpu_graph() -> (Graph, Vec<(Shape, DType)>) {
        let x = Array::from_slice(&[0.5f32; 24], &[4, 6]).unwrap();
        let y = Array::from_slice(&[0.25f32; 24], &[6, 4]).unwrap();
        let f = |xs: &[Array]| -> kiln_base::Result<Vec<Array>> {
            let yt = ops::transpose(&xs[1], None)?;
            let a = ops::binary(BinaryOp::Add, &xs[0], &yt)?;
            let two = ops::weak_scalar(Scalar::Float(2.0), &a)?;
            let b = ops::binary(BinaryOp::Multiply, &ops::unary(UnaryOp::Exp, &a)?, &two)?;
            let s = ops::unary(UnaryOp::Negative, &ops::sum(&b, Some(&[1]), false)?)?;
            Ok(vec![b, s, ops::reshape(&yt, &[24])?])
        };
        let compiled = trace(f, &[x, y], false).unwrap();
        let mut graph = compiled.graph().clone();
        for node in &mut graph.nodes {
            node.stream = Stream { device: kiln_base::Device::GPU, index: 0 };
        }
        let inputs = graph.inputs.clone();
        (graph, inputs)
    }

    fn fused(graph: &Graph) -> Primitive {
        let node = graph.nodes.iter().find(|n| matches!(n.prim, Primitive::Fused(_)));
        node.expect("a fused region").prim.clone()
    }

    #[test]
    fn requests_follow_layouts_through_the_graph() {
        let (graph, inputs) = gpu_graph();
        let row = |i: usize| Layout::contiguous(&inputs[i].0);
        let f32s = DType::F32;
        let requests = kernel_requests(&graph, &[Some(row(0)), Some(row(1))]);
        // The fused region reads y through the transpose: the strided variant.
        let yt = Layout::new([4, 6].as_slice().into(), [1, 4].as_slice().into(), 0);
        let out: (Shape, DType) = ([4, 6].as_slice().into(), f32s);
        let region = kiln_cuda::elementwise::predict(
            &fused(&graph),
            &[(row(0), f32s), (yt.clone(), f32s)],
            &out,
        )
        .unwrap();
        // The negation reads the reduction's fresh row-major output.
        let s: (Shape, DType) = ([4].as_slice().into(), f32s);
        let neg = kiln_cuda::elementwise::predict(
            &Primitive::Unary(UnaryOp::Negative),
            &[(Layout::contiguous(&[4]), f32s)],
            &s,
        )
        .unwrap();
        let copy = kiln_cuda::elementwise::predict(
            &Primitive::Copy,
            &[(yt, f32s)],
            &([4, 6].as_slice().into(), f32s),
        )
        .unwrap();
        assert_eq!(
            requests.len(),
            3,
            "{:?}",
            requests.iter().map(|r| &r.symbol).collect::<Vec<_>>()
        );
        for want in [&region, &neg, &copy] {
            assert!(requests.contains(want), "missing {}", want.symbol);
        }
        assert!(region.source.contains("kiln_Compiled_add_exp_multiply"));
    }

    #[test]
    fn unknown_layouts_and_cpu_nodes_predict_nothing_from_them() {
        let (mut graph, inputs) = gpu_graph();
        // y's layout unknown: only the negation (after the reduction) can be named.
        let known = kernel_requests(&graph, &[Some(Layout::contiguous(&inputs[0].0)), None]);
        assert_eq!(known.len(), 1);
        assert!(known[0].symbol.contains("negative"), "{}", known[0].symbol);
        for node in &mut graph.nodes {
            node.stream = Stream { device: kiln_base::Device::CPU, index: 0 };
        }
        let layouts: Vec<Option<Layout>> =
            inputs.iter().map(|(s, _)| Some(Layout::contiguous(s))).collect();
        assert!(kernel_requests(&graph, &layouts).is_empty());
    }

    #[test]
    fn input_layouts_are_read_from_arrays_and_pending_views() {
        let x = Array::from_slice(&[1.0f32; 6], &[2, 3]).unwrap();
        assert_eq!(array_layout(&x, 0), Some(Layout::contiguous(&[2, 3])));
        let t = ops::transpose(&x, None).unwrap();
        let want = Layout::new([3, 2].as_slice().into(), [1, 3].as_slice().into(), 0);
        assert_eq!(array_layout(&t, 0), Some(want));
        // A kernel's output is row-major; a placeholder has no layout.
        let e = ops::unary(UnaryOp::Exp, &t).unwrap();
        assert_eq!(array_layout(&e, 0), Some(Layout::contiguous(&[3, 2])));
        let p = Array::tracer_placeholder(&[2], DType::F32, x.stream());
        assert_eq!(array_layout(&p, 0), None);
        assert_eq!(array_layout(&ops::transpose(&p, None).unwrap(), 0), None);
    }
}
