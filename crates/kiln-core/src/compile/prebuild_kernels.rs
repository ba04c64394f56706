//! Parallel kernel builds for a GPU entry's first call. Without them each fused region's
//! kernel is built (by NVRTC) at its first launch, one after another; here the entry's first
//! replay lists the nodes it will run with the layouts their inputs will have (followed from
//! the call's inputs through views), and the GPU backend's `prebuild` builds the kernels it
//! can name from them on several threads before the replay runs. Kernels not named (other
//! families, layouts known only once a kernel has run) still build at their first launch,
//! and a wrong guess only costs an unused build, never a wrong result: the launch picks its
//! kernel itself.

use super::captured::{Graph, Value};
use crate::array::Array;
use kiln_base::backend::{BuildReport, KernelNode};
use kiln_base::{DType, DeviceKind, Layout, Primitive, Shape};

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

/// The graph's GPU nodes that launch a kernel, with the layouts their inputs will have given
/// the call's (None: unknown; nodes reading an unknown layout are left out), in node order.
pub(crate) fn kernel_nodes(graph: &Graph, input_layouts: &[Option<Layout>]) -> Vec<KernelNode> {
    let const_layouts: Vec<Option<Layout>> =
        graph.consts.iter().map(|a| array_layout(a, 0)).collect();
    let mut layouts: Vec<Vec<Option<Layout>>> = Vec::with_capacity(graph.nodes.len());
    let mut kernels = Vec::new();
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
                kernels.extend(node_kernel(&node.prim, known, &node.outputs));
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
    kernels
}

/// The kernel one node launches, unless it is a view (a reshape that is no view runs as a
/// copy, as eval does).
fn node_kernel(
    prim: &Primitive,
    inputs: Vec<(Layout, DType)>,
    outputs: &[(Shape, DType)],
) -> Option<KernelNode> {
    let (prim, outputs) = match inputs.as_slice() {
        [(layout, _)] if prim.view_layout(layout).is_some() => return None,
        [(layout, dtype)] if matches!(prim, Primitive::Reshape { .. }) => {
            (Primitive::Copy, vec![(layout.shape.clone(), *dtype)])
        }
        _ => (prim.clone(), outputs.to_vec()),
    };
    Some(KernelNode { prim, inputs, outputs })
}

/// Builds the kernels the first call of `graph` over `inputs` will need, in parallel
/// (`None`: no GPU node, no GPU, or batches turned off).
pub(crate) fn prebuild(graph: &Graph, inputs: &[Array]) -> Option<BuildReport> {
    let gpu = gpu_backend(graph)?;
    let layouts: Vec<Option<Layout>> = inputs.iter().map(|a| array_layout(a, 0)).collect();
    gpu.prebuild(&kernel_nodes(graph, &layouts), true)
}

/// Before a device graph is captured over row-major staging copies of the inputs: the
/// kernels for those layouts (views passed in needed other variants at the first calls).
pub(crate) fn prebuild_row_major(graph: &Graph) -> Option<BuildReport> {
    let gpu = gpu_backend(graph)?;
    let layouts: Vec<Option<Layout>> =
        graph.inputs.iter().map(|(shape, _)| Some(Layout::contiguous(shape))).collect();
    gpu.prebuild(&kernel_nodes(graph, &layouts), false)
}

fn gpu_backend(graph: &Graph) -> Option<&'static dyn kiln_base::Backend> {
    let on_gpu = graph.nodes.iter().any(|n| n.stream.device.kind == DeviceKind::Gpu);
    on_gpu.then(crate::backends::gpu).flatten()
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

    /// Each node as (primitive name, its inputs' layouts).
    fn summary(nodes: &[KernelNode]) -> Vec<(&'static str, Vec<Layout>)> {
        nodes
            .iter()
            .map(|n| (n.prim.name(), n.inputs.iter().map(|x| x.0.clone()).collect()))
            .collect()
    }

    #[test]
    fn nodes_follow_layouts_through_the_graph() {
        let (graph, inputs) = gpu_graph();
        let row = |i: usize| Layout::contiguous(&inputs[i].0);
        let nodes = kernel_nodes(&graph, &[Some(row(0)), Some(row(1))]);
        // The fused region reads y through the transpose (its strided layout); the sum reads
        // the region's fresh row-major output, the negation the sum's; the flattening of the
        // transpose is no view: a copy of the strided layout.
        let yt = Layout::new([4, 6].as_slice().into(), [1, 4].as_slice().into(), 0);
        let want = vec![
            (fused(&graph).name(), vec![row(0), yt.clone()]),
            ("sum", vec![Layout::contiguous(&[4, 6])]),
            ("negative", vec![Layout::contiguous(&[4])]),
            ("copy", vec![yt]),
        ];
        assert_eq!(summary(&nodes), want);
        assert!(nodes.iter().all(|n| n.inputs.iter().all(|x| x.1 == DType::F32)));
        assert_eq!(nodes[3].outputs, vec![([4, 6].as_slice().into(), DType::F32)]);
    }

    #[test]
    fn unknown_layouts_and_cpu_nodes_name_nothing_from_them() {
        let (mut graph, inputs) = gpu_graph();
        // y's layout unknown: only what follows the region's row-major output is named.
        let known = kernel_nodes(&graph, &[Some(Layout::contiguous(&inputs[0].0)), None]);
        let names: Vec<&str> = known.iter().map(|n| n.prim.name()).collect();
        assert_eq!(names, ["sum", "negative"]);
        for node in &mut graph.nodes {
            node.stream = Stream { device: kiln_base::Device::CPU, index: 0 };
        }
        let layouts: Vec<Option<Layout>> =
            inputs.iter().map(|(s, _)| Some(Layout::contiguous(s))).collect();
        assert!(kernel_nodes(&graph, &layouts).is_empty());
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
