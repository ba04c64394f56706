//! What `compiled.report()` needs beyond explain's summary, added to a cache entry's
//! explain dict: replays, each region's members and border edges (indices into the
//! simplified graph), each fused kernel's generated C (and CUDA, where built) with its
//! build and run counters, and the device of each node of the final graph.

use kiln::compile::Compiled;
use kiln::Primitive;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

fn device_name(d: kiln::Device) -> &'static str {
    match d.kind {
        kiln::DeviceKind::Cpu => "cpu",
        kiln::DeviceKind::Gpu => "gpu",
    }
}

pub(crate) fn add_report_data(d: &Bound<'_, PyDict>, c: &Compiled) -> PyResult<()> {
    let py = d.py();
    d.set_item("replays", c.replays())?;
    if let Some(regions) = d.get_item("regions")? {
        let regions = regions.cast_into::<PyList>()?;
        for (rd, r) in regions.iter().zip(&c.regions) {
            rd.set_item("members", r.members.clone())?;
            let edges: Vec<(usize, usize, &str)> = r.border_edges.clone();
            rd.set_item("border_edges", edges)?;
        }
    }
    let graph = c.graph();
    let devices: Vec<&str> = graph.nodes.iter().map(|n| device_name(n.stream.device)).collect();
    d.set_item("devices", devices)?;
    let cuda_built = kiln::cuda::nvrtc::built();
    let kernels = PyList::empty(py);
    for (i, node) in graph.nodes.iter().enumerate() {
        let Primitive::Fused(program) = &node.prim else { continue };
        let kd = PyDict::new(py);
        kd.set_item("node", i)?;
        kd.set_item("name", program.name())?;
        kd.set_item("device", device_name(node.stream.device))?;
        kd.set_item("steps", program.steps.len())?;
        let cpu = PyList::empty(py);
        for k in kiln::cpu::fused::jit::kernels_for(program) {
            let v = PyDict::new(py);
            v.set_item("variant", k.variant)?;
            v.set_item("state", k.state)?;
            v.set_item("build_ms", k.build_ms)?;
            v.set_item("from_disk", k.from_disk)?;
            v.set_item("runs", k.runs)?;
            v.set_item("run_ms", k.run_ms)?;
            v.set_item("source", k.source)?;
            cpu.append(v)?;
        }
        kd.set_item("cpu", cpu)?;
        // What the contiguous variant would be, for kernels not built (yet) on the CPU.
        let kinds = vec![kiln_codegen::c::InputKind::Vector; program.inputs.len()];
        let variant = kiln_codegen::c::Variant::Contiguous(kinds);
        kd.set_item("c_source", kiln_codegen::c::c_kernel(program, &variant))?;
        let symbol = kiln_codegen::cuda::kernel_symbol(program);
        let cuda = PyList::empty(py);
        for b in cuda_built.iter().filter(|b| b.symbol == symbol) {
            let v = PyDict::new(py);
            v.set_item("name", &b.symbol)?;
            v.set_item("build_ms", b.build_ms)?;
            v.set_item("from_disk", b.from_disk)?;
            v.set_item("source", &b.source)?;
            cuda.append(v)?;
        }
        kd.set_item("cuda", cuda)?;
        kernels.append(kd)?;
    }
    d.set_item("kernels", kernels)?;
    Ok(())
}
