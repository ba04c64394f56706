//! Function export (MLX's `export_function` / `import_function`): traced graphs saved to a
//! file of kiln's own and loaded back as graphs that replay through compile.
//!
//! A trace is compile's captured graph before any pass (`compile::capture`), so a file holds
//! only primitives the ops layer records, never fused kernels: importing optimises the graph
//! again for this machine, and the un-optimised graph replays under grad/vmap/compile (whose
//! rules know every primitive but `Fused`).
//!
//! File layout, all integers little-endian:
//!
//! ```text
//! 0   8 bytes  magic "KILNFUNC"
//! 8   u32      format version (FORMAT_VERSION)
//! 12  u64      header length H
//! 20  u64      data length D
//! 28  H bytes  header: JSON (serde_json) of `Header`
//! .   D bytes  constants' data, row-major, at the offsets the header gives
//! .   u32      CRC-32 of every byte before it
//! ```
//!
//! Loading checks, in order: the magic, the version, the lengths (a short file is
//! "truncated"), the checksum ("corrupted"), the header, and then every trace's wiring,
//! constants and primitives (each node's output shapes are inferred again and must match the
//! recorded ones), so a bad file is an error naming `import_function`, never a panic later.
//! The JSON spells enum variants by name, so adding primitives keeps old files readable;
//! renaming or removing one (or changing a parameter) needs a new FORMAT_VERSION.

use crate::array::Array;
use crate::compile::{self, Compiled, Graph, Node, Passes, Value};
use kiln_base::fast::FastOp;
use kiln_base::shape::{checked_size, fmt_shape};
use kiln_base::{bail, ensure, DType, Error, Primitive, Result, Shape, Stream};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};

pub const MAGIC: [u8; 8] = *b"KILNFUNC";
pub const FORMAT_VERSION: u32 = 1;
const PREFIX: usize = 8 + 4 + 8 + 8;
const TRAILER: usize = 4;

/// One traced signature of an exported function: its inputs are the `positional` arguments,
/// then the keyword arguments in `keywords`' (sorted) order.
#[derive(Debug, Clone)]
pub struct Trace {
    pub positional: usize,
    pub keywords: Vec<String>,
    pub graph: Graph,
}

/// What a file holds.
#[derive(Debug, Clone)]
pub struct Exported {
    pub shapeless: bool,
    pub metadata: Option<String>,
    pub traces: Vec<Trace>,
}

#[derive(Serialize, Deserialize)]
struct Header {
    /// The kiln that wrote the file (informative only; the version decides).
    producer: String,
    shapeless: bool,
    metadata: Option<String>,
    traces: Vec<TraceRecord>,
}

#[derive(Serialize, Deserialize)]
struct TraceRecord {
    positional: usize,
    keywords: Vec<String>,
    inputs: Vec<Meta>,
    consts: Vec<ConstRecord>,
    nodes: Vec<NodeRecord>,
    outputs: Vec<Ref>,
}

#[derive(Serialize, Deserialize, Clone)]
struct Meta {
    shape: Shape,
    dtype: DType,
}

#[derive(Serialize, Deserialize)]
struct ConstRecord {
    shape: Shape,
    dtype: DType,
    /// Byte range in the data section.
    offset: u64,
    bytes: u64,
}

#[derive(Serialize, Deserialize)]
struct NodeRecord {
    prim: Primitive,
    inputs: Vec<Ref>,
    outputs: Vec<Meta>,
}

/// A node's operand, as `compile::Value` (kept apart so the format does not follow
/// compile's internals).
#[derive(Serialize, Deserialize, Clone, Copy)]
enum Ref {
    Input(usize),
    Const(usize),
    Node(usize, usize),
}

/// Why a primitive cannot be saved, if it cannot.
fn unsupported(prim: &Primitive) -> Option<&'static str> {
    match prim {
        Primitive::Custom { .. } => Some(
            "functions with custom transform rules (custom_function, checkpoint) cannot be \
             exported",
        ),
        Primitive::Fused(_) => Some("fused kernels cannot be exported"),
        Primitive::Fast(FastOp::CKernel(_)) | Primitive::Fast(FastOp::CudaKernel(_)) => {
            Some("custom kernels (fast.c_kernel, fast.cuda_kernel) cannot be exported")
        }
        _ => None,
    }
}

/// Checks that every primitive of a captured graph can be saved (at export time, so the
/// error names the function's op rather than surfacing when the file is written).
pub fn check_exportable(graph: &Graph) -> Result<()> {
    for node in &graph.nodes {
        if let Some(why) = unsupported(&node.prim) {
            bail!(Value, "export_function", "The function uses {}: {why}.", node.prim.name());
        }
    }
    Ok(())
}

fn to_ref(v: Value) -> Ref {
    match v {
        Value::Input(i) => Ref::Input(i),
        Value::Const(i) => Ref::Const(i),
        Value::Node(n, k) => Ref::Node(n, k),
    }
}

fn meta(shape: &[usize], dtype: DType) -> Meta {
    Meta { shape: Shape::from(shape), dtype }
}

/// A primitive and its parameters as the file's JSON spells them (the callback form of
/// `export_function` shows them).
pub fn primitive_json(prim: &Primitive) -> String {
    serde_json::to_string(prim).unwrap_or_default()
}

/// The file's bytes. Evaluates the constants (their data is saved).
pub fn encode(exported: &Exported) -> Result<Vec<u8>> {
    let mut data: Vec<u8> = Vec::new();
    let mut traces = Vec::with_capacity(exported.traces.len());
    for t in &exported.traces {
        check_exportable(&t.graph)?;
        let g = &t.graph;
        let mut consts = Vec::with_capacity(g.consts.len());
        for c in &g.consts {
            let bytes = c.to_bytes()?;
            consts.push(ConstRecord {
                shape: Shape::from(c.shape()),
                dtype: c.dtype(),
                offset: data.len() as u64,
                bytes: bytes.len() as u64,
            });
            data.extend_from_slice(&bytes);
        }
        let nodes = g
            .nodes
            .iter()
            .map(|n| NodeRecord {
                prim: n.prim.clone(),
                inputs: n.inputs.iter().map(|&v| to_ref(v)).collect(),
                outputs: n.outputs.iter().map(|(s, d)| meta(s, *d)).collect(),
            })
            .collect();
        traces.push(TraceRecord {
            positional: t.positional,
            keywords: t.keywords.clone(),
            inputs: g.inputs.iter().map(|(s, d)| meta(s, *d)).collect(),
            consts,
            nodes,
            outputs: g.outputs.iter().map(|&v| to_ref(v)).collect(),
        });
    }
    let header = Header {
        producer: format!("kiln {}", env!("CARGO_PKG_VERSION")),
        shapeless: exported.shapeless,
        metadata: exported.metadata.clone(),
        traces,
    };
    let header = serde_json::to_vec(&header).map_err(|e| Error::Runtime {
        op: "export_function",
        msg: format!("Cannot encode the function: {e}."),
    })?;
    let mut out = Vec::with_capacity(PREFIX + header.len() + data.len() + TRAILER);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(&data);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

fn bad(name: &str, msg: impl std::fmt::Display) -> Error {
    Error::Runtime { op: "import_function", msg: format!("Cannot load {name}: {msg}") }
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

/// Reads a file's bytes; `name` (the path) goes into error messages. Arrays are host
/// constants; nodes get `stream` (replay picks the caller's stream, see [`Imported`]).
pub fn decode(bytes: &[u8], name: &str, stream: Stream) -> Result<Exported> {
    let n = bytes.len();
    if n < MAGIC.len() || bytes[..MAGIC.len()] != MAGIC {
        if n < MAGIC.len() && MAGIC.starts_with(bytes) {
            return Err(bad(name, format!("the file is truncated ({n} bytes).")));
        }
        return Err(bad(
            name,
            "not a kiln function file (it does not start with kiln's magic bytes \"KILNFUNC\"; \
             files exported by MLX cannot be read).",
        ));
    }
    ensure!(
        n >= PREFIX,
        Runtime,
        "import_function",
        "Cannot load {name}: the file is truncated ({n} bytes)."
    );
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if version != FORMAT_VERSION {
        return Err(bad(
            name,
            format!(
                "unsupported file format version {version} (this kiln reads version \
                 {FORMAT_VERSION}); export the function again with this kiln."
            ),
        ));
    }
    let (header_len, data_len) = (u64_at(bytes, 12), u64_at(bytes, 20));
    let expected = (PREFIX as u64)
        .checked_add(header_len)
        .and_then(|x| x.checked_add(data_len))
        .and_then(|x| x.checked_add(TRAILER as u64));
    match expected {
        Some(e) if e == n as u64 => {}
        Some(e) if e > n as u64 => {
            return Err(bad(
                name,
                format!("the file is truncated ({n} bytes, its header says {e})."),
            ))
        }
        Some(e) => {
            return Err(bad(
                name,
                format!("the file is corrupted ({n} bytes, its header says {e})."),
            ))
        }
        None => return Err(bad(name, "the file is corrupted (impossible section lengths).")),
    }
    let body = &bytes[..n - TRAILER];
    let stored = u32::from_le_bytes([bytes[n - 4], bytes[n - 3], bytes[n - 2], bytes[n - 1]]);
    if crc32fast::hash(body) != stored {
        return Err(bad(name, "the file is corrupted (checksum mismatch)."));
    }
    let header_end = PREFIX + header_len as usize;
    let header: Header = serde_json::from_slice(&bytes[PREFIX..header_end])
        .map_err(|e| bad(name, format!("the file is corrupted (bad header: {e}).")))?;
    let data = &bytes[header_end..n - TRAILER];
    let mut traces = Vec::with_capacity(header.traces.len());
    for (i, t) in header.traces.into_iter().enumerate() {
        // Rebuilding infers every primitive's shapes again: the checks live there, and a
        // crafted parameter that slips past them must still not take the process down.
        let built =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rebuild(t, data, stream)));
        match built {
            Ok(Ok(t)) => traces.push(t),
            Ok(Err(e)) => return Err(bad(name, format!("trace {i} is invalid: {e}"))),
            Err(_) => {
                return Err(bad(name, format!("trace {i} is invalid (its graph is malformed).")))
            }
        }
    }
    Ok(Exported { shapeless: header.shapeless, metadata: header.metadata, traces })
}

/// A trace record back as a graph, checking its wiring, constants and shapes.
fn rebuild(t: TraceRecord, data: &[u8], stream: Stream) -> std::result::Result<Trace, String> {
    let op = "import_function";
    let check_meta = |m: &Meta| -> std::result::Result<(), String> {
        crate::ops::check_sizes(op, &[(m.shape.clone(), m.dtype)]).map_err(|e| e.to_string())
    };
    if t.inputs.len() != t.positional + t.keywords.len() {
        return Err(format!(
            "{} inputs for {} positional and {} keyword arguments.",
            t.inputs.len(),
            t.positional,
            t.keywords.len()
        ));
    }
    let mut names = t.keywords.clone();
    names.sort();
    names.dedup();
    if names.len() != t.keywords.len() {
        return Err("a keyword argument is named twice.".into());
    }
    t.inputs.iter().try_for_each(check_meta)?;
    let mut consts = Vec::with_capacity(t.consts.len());
    for (i, c) in t.consts.iter().enumerate() {
        let size = checked_size(op, &c.shape).map_err(|e| e.to_string())?;
        let want = size.checked_mul(c.dtype.size()).ok_or("a constant is too large.")?;
        let end = c.offset.checked_add(c.bytes).filter(|&e| e <= data.len() as u64);
        let (Some(end), true) = (end, want as u64 == c.bytes) else {
            return Err(format!(
                "constant {i} ({} {}) does not fit the data section.",
                fmt_shape(&c.shape),
                c.dtype
            ));
        };
        let bytes = &data[c.offset as usize..end as usize];
        consts.push(Array::from_bytes(bytes, &c.shape, c.dtype).map_err(|e| e.to_string())?);
    }
    let mut nodes: Vec<Node> = Vec::with_capacity(t.nodes.len());
    let value = |r: Ref, nodes: &[Node]| -> std::result::Result<(Value, Meta), String> {
        match r {
            Ref::Input(i) if i < t.inputs.len() => Ok((Value::Input(i), t.inputs[i].clone())),
            Ref::Const(i) if i < consts.len() => {
                Ok((Value::Const(i), meta(consts[i].shape(), consts[i].dtype())))
            }
            Ref::Node(n, k) if n < nodes.len() && k < nodes[n].outputs.len() => {
                let (s, d) = &nodes[n].outputs[k];
                Ok((Value::Node(n, k), meta(s, *d)))
            }
            _ => Err("a node reads a value that does not exist (or comes after it).".into()),
        }
    };
    for (i, rec) in t.nodes.iter().enumerate() {
        if let Some(why) = unsupported(&rec.prim) {
            return Err(format!("node {i} ({}): {why}.", rec.prim.name()));
        }
        let mut inputs = Vec::with_capacity(rec.inputs.len());
        let mut specs = Vec::with_capacity(rec.inputs.len());
        for &r in &rec.inputs {
            let (v, m) = value(r, &nodes)?;
            inputs.push(v);
            specs.push(m);
        }
        let spec_refs: Vec<(&[usize], DType)> =
            specs.iter().map(|m| (m.shape.as_slice(), m.dtype)).collect();
        let inferred = rec.prim.output_shapes(&spec_refs).map_err(|e| format!("node {i}: {e}"))?;
        crate::ops::check_sizes(rec.prim.name(), &inferred).map_err(|e| e.to_string())?;
        let recorded: Vec<(Shape, DType)> =
            rec.outputs.iter().map(|m| (m.shape.clone(), m.dtype)).collect();
        if inferred != recorded {
            return Err(format!(
                "node {i} ({}) records outputs that its inputs do not give.",
                rec.prim.name()
            ));
        }
        nodes.push(Node { prim: rec.prim.clone(), inputs, outputs: recorded, stream });
    }
    let mut outputs = Vec::with_capacity(t.outputs.len());
    for &r in &t.outputs {
        outputs.push(value(r, &nodes)?.0);
    }
    let inputs = t.inputs.iter().map(|m| (m.shape.clone(), m.dtype)).collect();
    Ok(Trace {
        positional: t.positional,
        keywords: t.keywords,
        graph: Graph { inputs, consts, nodes, outputs },
    })
}

/// An imported trace, ready to call: its graph, and the compiled forms built from it per
/// stream (optimised for real inputs, as traced for transforms' tracers).
#[derive(Debug)]
pub struct ImportedTrace {
    pub positional: usize,
    pub keywords: Vec<String>,
    shapeless: bool,
    graph: Graph,
    entries: Mutex<Vec<(Stream, bool, Arc<Compiled>)>>,
}

/// An imported function: every trace of the file.
#[derive(Debug)]
pub struct Imported {
    pub shapeless: bool,
    pub metadata: Option<String>,
    pub traces: Vec<ImportedTrace>,
}

impl Imported {
    pub fn new(exported: Exported) -> Imported {
        let shapeless = exported.shapeless;
        let traces = exported
            .traces
            .into_iter()
            .map(|t| ImportedTrace {
                positional: t.positional,
                keywords: t.keywords,
                shapeless,
                graph: t.graph,
                entries: Mutex::new(Vec::new()),
            })
            .collect();
        Imported { shapeless, metadata: exported.metadata, traces }
    }

    /// Reads and checks a file.
    pub fn load(path: &std::path::Path) -> Result<Imported> {
        let name = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| Error::Runtime {
            op: "import_function",
            msg: format!("Failed to open {name}: {e}."),
        })?;
        Ok(Imported::new(decode(&bytes, &name, crate::device::default_stream())?))
    }
}

impl ImportedTrace {
    /// Shapes and dtypes of the trace's inputs (positional, then keywords).
    pub fn inputs(&self) -> &[(Shape, DType)] {
        &self.graph.inputs
    }

    /// Records the trace over `inputs` (lazy, like any op) on the current default stream.
    /// Tracers of a transform (grad, vmap, an outer compile or export) get the graph as
    /// traced, whose primitives all have rules; other calls get it simplified and fused.
    pub fn call(&self, inputs: &[Array]) -> Result<Vec<Array>> {
        let raw = !compile::is_enabled() || inputs.iter().any(Array::is_tracer);
        let stream = crate::device::default_stream();
        let found = {
            let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            entries.iter().find(|(s, r, _)| *s == stream && *r == raw).map(|e| e.2.clone())
        };
        let compiled = match found {
            Some(c) => c,
            None => {
                let mut graph = self.graph.clone();
                graph.nodes.iter_mut().for_each(|n| n.stream = stream);
                let passes =
                    if raw { Passes { simplify: false, fuse: false } } else { Passes::from_env() };
                let c = Arc::new(compile::optimise(graph, self.shapeless, passes));
                self.entries.lock().unwrap_or_else(|e| e.into_inner()).push((
                    stream,
                    raw,
                    c.clone(),
                ));
                c
            }
        };
        compiled.replay(inputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops;
    use kiln_base::{BinaryOp, Scalar, UnaryOp};

    fn host() -> Stream {
        crate::device::host_stream()
    }

    fn sample() -> Exported {
        let x = Array::from_slice(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
        let graph = compile::capture(
            |a: &[Array]| {
                let c = Array::from_slice(&[10.0f32, f32::NAN, -0.0], &[3])?;
                let y = ops::multiply(&ops::exp(&a[0])?, &c)?;
                Ok(vec![ops::add(&y, &a[0])?, y])
            },
            std::slice::from_ref(&x),
            false,
        )
        .unwrap();
        Exported {
            shapeless: false,
            metadata: Some("{\"m\": 1}".into()),
            traces: vec![Trace { positional: 1, keywords: vec![], graph }],
        }
    }

    #[test]
    fn round_trip_keeps_graph_constants_and_metadata() {
        let e = sample();
        let bytes = encode(&e).unwrap();
        assert_eq!(&bytes[..8], b"KILNFUNC");
        let d = decode(&bytes, "f", host()).unwrap();
        assert_eq!(d.metadata.as_deref(), Some("{\"m\": 1}"));
        let (a, b) = (&e.traces[0].graph, &d.traces[0].graph);
        assert_eq!(a.describe(), b.describe());
        assert_eq!(a.inputs, b.inputs);
        for (ca, cb) in a.consts.iter().zip(&b.consts) {
            assert_eq!(ca.to_bytes().unwrap(), cb.to_bytes().unwrap());
        }
        // Encoding is deterministic.
        assert_eq!(encode(&d).unwrap(), bytes);
    }

    #[test]
    fn imported_trace_computes_the_function() {
        let bytes = encode(&sample()).unwrap();
        let imported = Imported::new(decode(&bytes, "f", host()).unwrap());
        let x = Array::from_slice(&[0.0f32, 1.0, 2.0], &[3]).unwrap();
        let out = imported.traces[0].call(std::slice::from_ref(&x)).unwrap();
        let got = out[0].to_vec::<f32>().unwrap();
        assert_eq!(got[0], 10.0);
        assert!(got[1].is_nan());
        assert_eq!(got[2], 2.0);
    }

    #[test]
    fn scalars_keep_their_bits() {
        for s in [Scalar::Float(f64::NAN), Scalar::Float(-0.0), Scalar::Float(f64::INFINITY)] {
            let p =
                Primitive::Arange { start: s, step: Scalar::Int(-3), len: 2, dtype: DType::F32 };
            let text = serde_json::to_string(&p).unwrap();
            let back: Primitive = serde_json::from_str(&text).unwrap();
            assert_eq!(back, p, "{text}");
        }
        let p = Primitive::Binary(BinaryOp::Add);
        assert_eq!(serde_json::to_string(&p).unwrap(), "{\"Binary\":\"Add\"}");
        let u = Primitive::Unary(UnaryOp::Exp);
        assert_eq!(serde_json::from_str::<Primitive>("{\"Unary\":\"Exp\"}").unwrap(), u);
    }

    fn err(bytes: &[u8]) -> String {
        decode(bytes, "f.kilnfn", host()).unwrap_err().to_string()
    }

    #[test]
    fn bad_files_are_errors() {
        let good = encode(&sample()).unwrap();
        assert!(err(b"").contains("truncated"));
        assert!(err(b"KILN").contains("truncated"));
        assert!(err(b"hello world, this is not kiln").contains("not a kiln function file"));
        let mut v = good.clone();
        v[8] = 9;
        assert!(err(&v).contains("unsupported file format version 9"), "{}", err(&v));
        for cut in [12, PREFIX, PREFIX + 5, good.len() - 1] {
            assert!(err(&good[..cut]).contains("truncated"), "{cut}: {}", err(&good[..cut]));
        }
        let mut v = good.clone();
        v.push(0);
        assert!(err(&v).contains("corrupted"));
        for at in [PREFIX + 3, good.len() / 2, good.len() - 5] {
            let mut v = good.clone();
            v[at] ^= 0x40;
            assert!(err(&v).contains("corrupted (checksum mismatch)"), "{at}");
        }
        let e = err(&good[..3]);
        assert!(e.starts_with("[import_function] Cannot load f.kilnfn: "), "{e}");
    }

    /// Re-encodes a file with its header edited (a valid checksum over invalid content).
    fn with_header(good: &[u8], edit: impl Fn(&mut serde_json::Value)) -> Vec<u8> {
        let h = u64_at(good, 12) as usize;
        let d = u64_at(good, 20) as usize;
        let mut header: serde_json::Value =
            serde_json::from_slice(&good[PREFIX..PREFIX + h]).unwrap();
        edit(&mut header);
        let header = serde_json::to_vec(&header).unwrap();
        let mut out = good[..12].to_vec();
        out.extend_from_slice(&(header.len() as u64).to_le_bytes());
        out.extend_from_slice(&(d as u64).to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&good[PREFIX + h..PREFIX + h + d]);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    type Edit = Box<dyn Fn(&mut serde_json::Value)>;

    #[test]
    fn inconsistent_graphs_are_errors() {
        let good = encode(&sample()).unwrap();
        let cases: Vec<(&str, Edit)> = vec![
            (
                "does not exist",
                Box::new(|h| h["traces"][0]["outputs"][0] = serde_json::json!({"Node": [99, 0]})),
            ),
            (
                "does not exist",
                Box::new(|h| {
                    h["traces"][0]["nodes"][0]["inputs"][0] = serde_json::json!({"Input": 5})
                }),
            ),
            (
                "does not fit",
                Box::new(|h| h["traces"][0]["consts"][0]["offset"] = serde_json::json!(1u64 << 40)),
            ),
            (
                "does not fit",
                Box::new(|h| h["traces"][0]["consts"][0]["shape"] = serde_json::json!([4])),
            ),
            (
                "records outputs",
                Box::new(|h| {
                    h["traces"][0]["nodes"][0]["outputs"][0]["shape"] = serde_json::json!([7])
                }),
            ),
            ("inputs for", Box::new(|h| h["traces"][0]["positional"] = serde_json::json!(2))),
            (
                "bad header",
                Box::new(|h| {
                    h["traces"][0]["nodes"][0]["prim"] = serde_json::json!({"NoSuchOp": 1})
                }),
            ),
            (
                "Expected 2 inputs",
                Box::new(|h| {
                    h["traces"][0]["nodes"][0]["prim"] = serde_json::json!({"Binary": "Add"})
                }),
            ),
            (
                "fit in memory",
                Box::new(|h| {
                    h["traces"][0]["inputs"][0]["shape"] =
                        serde_json::json!([1u64 << 62, 1u64 << 62])
                }),
            ),
        ];
        for (want, edit) in cases {
            let e = err(&with_header(&good, edit));
            assert!(e.contains(want), "{want}: {e}");
        }
    }

    #[test]
    fn custom_kernels_are_refused() {
        let spec = kiln_base::fast::CKernelSpec {
            name: "k".into(),
            source: String::new(),
            num_inputs: 1,
            output_shapes: vec![Shape::from(&[3][..])],
            output_dtypes: vec![DType::F32],
            init_value: None,
            ensure_row_contiguous: true,
        };
        let graph = Graph {
            inputs: vec![(Shape::from(&[3][..]), DType::F32)],
            consts: vec![],
            nodes: vec![Node {
                prim: Primitive::Fast(FastOp::CKernel(Arc::new(spec))),
                inputs: vec![Value::Input(0)],
                outputs: vec![(Shape::from(&[3][..]), DType::F32)],
                stream: host(),
            }],
            outputs: vec![Value::Node(0, 0)],
        };
        let e = check_exportable(&graph).unwrap_err().to_string();
        assert!(e.contains("custom kernels"), "{e}");
        // A file that carries one anyway is refused on load (it would run its code).
        let good = encode(&sample()).unwrap();
        let text = serde_json::to_value(&graph.nodes[0].prim).unwrap();
        let e = err(&with_header(&good, |h| h["traces"][0]["nodes"][0]["prim"] = text.clone()));
        assert!(e.contains("custom kernels"), "{e}");
    }
}
