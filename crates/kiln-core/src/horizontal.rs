//! Horizontal fusion at evaluation time: calls of one evaluation that apply the same
//! primitive, with the same parameters, to the same first input (a layer's q, k and v
//! projections of one normalised x; its gate and up projections) go to the backend together,
//! which runs them as one kernel where it can (`Backend::eval_together`).
//!
//! Why: a decode step of a small model is bound by its number of kernels (each costs a
//! launch on the host and a drain on the GPU), not by their bytes, and mlx-lm builds those
//! projections as separate products of one input.
//!
//! Two kinds of groups, as the backend says (`Backend::runs_together`): products of one
//! shared x, and independent calls (a layer's RoPE of q and of k; its two KV-cache writes).
//! A group runs where its first member stands in the order. Every input of every other
//! member must be ready by then: evaluated already, or a short chain of views over
//! evaluated arrays (`W.T` of a weight; `k`'s reshape and transpose of its projection, run
//! earlier in the group of q, k and v), which is evaluated first; a member that is not ready
//! runs on its own later. So no member can depend on another, and the later members find
//! themselves evaluated when the walk reaches them.

use crate::array::{Array, OpCall};
use crate::device::backend;
use crate::walk::Step;
use kiln_base::{ArrayData, DeviceKind, Result, Together};
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// Groups of at most this many calls (a layer's q, k, v).
const MAX_GROUP: usize = 4;
/// Candidates a group's run looks at for members (the rest wait for a later group): RoPE
/// calls of every layer have equal parameters, and only the next layer's are ready.
const SCAN: usize = 8;

/// The groups found in an evaluation's order: each keyed by its first member's call, with
/// the calls of the other members.
#[derive(Default)]
pub(crate) struct Groups(FxHashMap<usize, Vec<Arc<OpCall>>>);

impl Groups {
    /// The calls that run with `call`, when it is a group's first member.
    pub(crate) fn take(&mut self, call: &Arc<OpCall>) -> Option<Vec<Arc<OpCall>>> {
        if self.0.is_empty() {
            return None;
        }
        self.0.remove(&(Arc::as_ptr(call) as usize))
    }

    /// Candidates a group's run left out (not ready yet, or past its size): a group of
    /// their own, led by the first, which comes later in the order.
    pub(crate) fn requeue(&mut self, mut left: Vec<Arc<OpCall>>) {
        if left.len() >= 2 {
            let lead = left.remove(0);
            self.0.insert(Arc::as_ptr(&lead) as usize, left);
        }
    }
}

/// A group being gathered: its first call and the calls like it.
type Group = (Arc<OpCall>, Vec<Arc<OpCall>>);

/// Finds the candidate groups among `order`'s GPU calls (an evaluation's nodes, inputs
/// first): calls the backend may run together with equal parameters (and, for products, the
/// same first input). Whether a member's inputs are ready is decided when its group runs.
pub(crate) fn find(order: &[Step]) -> Groups {
    let Some(gpu) = crate::backends::gpu() else { return Groups::default() };
    // Candidates by their shared input's node (0: none shared).
    let mut by_input: FxHashMap<usize, Vec<Group>> = FxHashMap::default();
    for (array, call) in order {
        let Some(call) = call else { continue };
        if array.stream().device.kind != DeviceKind::Gpu || array.is_tracer() {
            continue;
        }
        if call.output_meta.len() != 1 || call.inputs.is_empty() {
            continue;
        }
        let shared = match gpu.runs_together(&call.prim) {
            Some(Together::SharedInput) => root(&call.inputs[0]),
            Some(Together::Independent) => 0,
            None => continue,
        };
        let candidates = by_input.entry(shared).or_default();
        match candidates
            .iter_mut()
            .find(|(c, _)| c.prim == call.prim && c.output_meta[0].1 == call.output_meta[0].1)
        {
            Some((_, rest)) => rest.push(call.clone()),
            None => candidates.push((call.clone(), Vec::new())),
        }
    }
    let groups = by_input
        .into_values()
        .flatten()
        .filter(|(_, rest)| !rest.is_empty())
        .map(|(first, rest)| (Arc::as_ptr(&first) as usize, rest))
        .collect();
    Groups(groups)
}

/// The node a shared input comes from: itself, or the source of the chain of one-input
/// calls it is pending behind (at most `VIEW_DEPTH`): `matmul` reshapes a `(1, 1, k)` x to
/// `(1, k)` anew for each product, so q, k and v read different views of one x. Members
/// whose first input turns out to hold other data run apart (`run` compares them).
fn root(input: &Array) -> usize {
    let mut node = input.clone();
    for _ in 0..VIEW_DEPTH {
        if node.is_evaluated() {
            break;
        }
        let Some(call) = node.call() else { break };
        let [source] = call.inputs.as_slice() else { break };
        node = source.clone();
    }
    Arc::as_ptr(&node.0) as usize
}

/// Whether two evaluated inputs are the same elements (one buffer, one layout).
fn same_data(a: &ArrayData, b: &ArrayData) -> bool {
    a.buffer.as_ptr() == b.buffer.as_ptr() && a.layout == b.layout && a.dtype == b.dtype
}

/// Whether none of `call`'s outputs has data yet (no other evaluation ran it meanwhile).
pub(crate) fn unevaluated(call: &OpCall) -> bool {
    let outputs = call.outputs.get().expect("set at construction");
    outputs.iter().filter_map(|w| w.upgrade()).all(|n| n.data.get().is_none())
}

/// `KILN_LOG=groups` (read once): each group's members and what kept the others out, on
/// stderr.
fn log(line: impl FnOnce() -> String) {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *ON.get_or_init(|| std::env::var("KILN_LOG").is_ok_and(|v| v.contains("groups"))) {
        eprintln!("[kiln groups] {}", line());
    }
}

/// Views deep at most this many calls are evaluated ahead for a member (`k`'s reshape and
/// transpose over its evaluated projection).
pub(crate) const VIEW_DEPTH: usize = 4;

/// Makes `input` ready for a group running now: true when it is evaluated, or is a chain of
/// views (at most `depth` calls) over an evaluated array, which is then evaluated. A member's
/// input that depends on a member (or on anything else not yet run) is not ready, so a
/// group's members never depend on one another.
pub(crate) fn make_ready(input: &Array, evaluation: u64, depth: usize) -> Result<bool> {
    if input.is_evaluated() {
        return Ok(true);
    }
    let Some(call) = input.call() else { return Ok(false) };
    let [source] = call.inputs.as_slice() else { return Ok(false) };
    if depth == 0 || !make_ready(source, evaluation, depth - 1)? {
        return Ok(false);
    }
    let Some(data) = source.0.data.get() else { return Ok(false) };
    if call.prim.view_layout(&data.layout).is_none() {
        return Ok(false);
    }
    crate::eval::eval_node(input, evaluation)?;
    Ok(input.is_evaluated())
}

/// Runs `first` (the call of `array`, whose inputs are evaluated) together with those of
/// `rest` whose inputs are ready (`make_ready`), up to `MAX_GROUP` calls. Returns whether the
/// backend took them (if not, nothing was run and the walk evaluates `first` on its own),
/// and the candidates left for a later group.
pub(crate) fn run(
    array: &Array,
    first: &Arc<OpCall>,
    rest: &[Arc<OpCall>],
    evaluation: u64,
) -> Result<(bool, Vec<Arc<OpCall>>)> {
    let device = array.stream().device;
    let shared = backend(device)?.runs_together(&first.prim) == Some(Together::SharedInput);
    // (A reference, not a clone: a clone holds the buffer, and a member whose first input is
    // that buffer (a KV cache) would no longer be its sole owner, so it could not be donated.)
    let lead_input = first.inputs[0].0.data.get();
    let mut calls = vec![first.clone()];
    let mut left = Vec::new();
    let mut why = Vec::new();
    for (i, call) in rest.iter().enumerate() {
        if !unevaluated(call) {
            continue;
        }
        let mut ready = calls.len() < MAX_GROUP && i < SCAN;
        let room = ready;
        for input in &call.inputs {
            ready = ready && make_ready(input, evaluation, VIEW_DEPTH)?;
        }
        let inputs_ready = ready;
        if ready && shared {
            let mine = call.inputs[0].0.data.get();
            ready = matches!((mine, lead_input), (Some(a), Some(b)) if same_data(a, b));
        }
        if ready {
            calls.push(call.clone());
        } else {
            why.push(if !room {
                "no room"
            } else if !inputs_ready {
                "not ready"
            } else {
                "other x"
            });
            left.push(call.clone());
        }
    }
    let name = first.prim.name();
    let declined = |calls: Vec<Arc<OpCall>>, mut left: Vec<Arc<OpCall>>, reason: &str| {
        log(|| format!("{name}: {} calls not run together ({reason})", calls.len()));
        let mut back: Vec<_> = calls.into_iter().skip(1).collect();
        back.append(&mut left);
        Ok((false, back))
    };
    log(|| format!("{name}: {} of {} candidates join; left: {why:?}", calls.len(), rest.len() + 1));
    // Another thread running a member (an eval of the same graph) keeps the group apart.
    let guards: Vec<_> = calls.iter().filter_map(|c| c.running.try_lock().ok()).collect();
    if guards.len() != calls.len() || calls.len() < 2 || !calls.iter().all(|c| unevaluated(c)) {
        drop(guards);
        return declined(calls, left, "alone, or run elsewhere");
    }
    let mut inputs: Vec<Vec<ArrayData>> = Vec::with_capacity(calls.len());
    let mut donated: Vec<Vec<bool>> = Vec::with_capacity(calls.len());
    for call in &calls {
        let mut data = Vec::with_capacity(call.inputs.len());
        let mut own = Vec::with_capacity(call.inputs.len());
        for input in &call.inputs {
            let Some(d) = input.0.data.get() else {
                drop(guards);
                return declined(calls, left, "an input without data");
            };
            if d.buffer.device() == device {
                own.push(crate::eval::sole_owner(input, d));
                data.push(d.clone());
            } else {
                // RoPE's offset, a host scalar: moved once (the array keeps the copy).
                own.push(false);
                data.push(input.data_on(device)?);
            }
        }
        inputs.push(data);
        donated.push(own);
    }
    let metas: Vec<_> = calls.iter().map(|c| &c.output_meta[0]).collect();
    let timer = crate::profile::Timer::start(device);
    let ran = backend(device)?.eval_together(&first.prim, &inputs, &donated, &metas);
    // `None` or an error: nothing stands half done (the backend runs nothing before it can
    // run all); each call runs on its own (and reports its own error).
    let results = match ran {
        Some(Ok(results)) => results,
        Some(Err(e)) => {
            drop(guards);
            return declined(calls, left, &format!("the backend failed: {e}"));
        }
        None => {
            drop(guards);
            return declined(calls, left, "the backend declined");
        }
    };
    crate::eval::count_calls(calls.len() as u64);
    if let Some(t) = timer {
        t.call(&first.prim, &inputs[0], &first.output_meta, device, device);
    }
    for (call, result) in calls.iter().zip(results) {
        crate::eval::set_results(call, vec![result], evaluation, false);
    }
    drop(guards);
    Ok((true, left))
}
