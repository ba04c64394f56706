//! Horizontal fusion at evaluation time: calls of one evaluation that apply the same
//! primitive, with the same parameters, to the same first input (a layer's q, k and v
//! projections of one normalised x; its gate and up projections) go to the backend together,
//! which runs them as one kernel where it can (`Backend::eval_together`).
//!
//! Why: a decode step of a small model is bound by its number of kernels (each costs a
//! launch on the host and a drain on the GPU), not by their bytes, and mlx-lm builds those
//! projections as separate products of one input.
//!
//! A group runs where its first member stands in the order. Every other input of every
//! member must be ready by then: evaluated already, or one call away from evaluated arrays
//! (`W.T`, a view of a weight), which is evaluated first. So no member can depend on another,
//! and the later members find themselves evaluated when the walk reaches them.

use crate::array::{Array, OpCall};
use crate::walk::Step;
use crate::device::backend;
use kiln_base::{ArrayData, DeviceKind, Result};
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// Groups of at most this many calls (a layer's q, k, v).
const MAX_GROUP: usize = 4;

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
}

/// A group being gathered: its first call and the calls like it.
type Group = (Arc<OpCall>, Vec<Arc<OpCall>>);

/// Finds the groups among `order`'s GPU calls (an evaluation's nodes, inputs first).
pub(crate) fn find(order: &[Step]) -> Groups {
    let Some(gpu) = crate::backends::gpu() else { return Groups::default() };
    // Candidates by their first input's node: (the first call, the calls like it).
    let mut by_input: FxHashMap<usize, Vec<Group>> = FxHashMap::default();
    for (array, call) in order {
        let Some(call) = call else { continue };
        if array.stream().device.kind != DeviceKind::Gpu || array.is_tracer() {
            continue;
        }
        let Some(first) = call.inputs.first() else { continue };
        if call.output_meta.len() != 1
            || !gpu.runs_together(&call.prim)
            || !call.inputs[1..].iter().all(ready_for_group)
        {
            continue;
        }
        let candidates = by_input.entry(Arc::as_ptr(&first.0) as usize).or_default();
        match candidates.iter_mut().find(|(c, rest)| {
            c.prim == call.prim
                && c.output_meta[0].1 == call.output_meta[0].1
                && rest.len() + 1 < MAX_GROUP
        }) {
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

/// Whether none of `call`'s outputs has data yet (no other evaluation ran it meanwhile).
fn unevaluated(call: &OpCall) -> bool {
    let outputs = call.outputs.get().expect("set at construction");
    outputs.iter().filter_map(|w| w.upgrade()).all(|n| n.data.get().is_none())
}

/// Whether a member's other input is ready when its group runs: evaluated, or computed by
/// one call over evaluated arrays (evaluated just before the group).
fn ready_for_group(input: &Array) -> bool {
    if input.is_evaluated() {
        return true;
    }
    input.call().is_some_and(|c| c.inputs.iter().all(Array::is_evaluated))
}

/// Runs `first` (the call of `array`, whose inputs are evaluated) together with `rest`.
/// `Ok(false)`: the backend did not take them (nothing was run; the walk evaluates each
/// on its own).
pub(crate) fn run(
    array: &Array,
    first: &Arc<OpCall>,
    rest: &[Arc<OpCall>],
    evaluation: u64,
) -> Result<bool> {
    let device = array.stream().device;
    // Another thread running a member (an eval of the same graph) keeps it out.
    let mut calls = vec![first.clone()];
    calls.extend(rest.iter().filter(|c| unevaluated(c)).cloned());
    let guards: Vec<_> = calls.iter().filter_map(|c| c.running.try_lock().ok()).collect();
    if guards.len() != calls.len() || calls.len() < 2 || !calls.iter().all(|c| unevaluated(c)) {
        return Ok(false);
    }
    let mut inputs: Vec<Vec<ArrayData>> = Vec::with_capacity(calls.len());
    for call in &calls {
        let mut data = Vec::with_capacity(call.inputs.len());
        for input in &call.inputs {
            if !input.is_evaluated() {
                // A view of a weight (`W.T`): its inputs are evaluated (`ready_for_group`).
                crate::eval::eval_node(input, evaluation)?;
            }
            let Some(d) = input.0.data.get() else { return Ok(false) };
            if d.buffer.device() != device {
                return Ok(false);
            }
            data.push(d.clone());
        }
        inputs.push(data);
    }
    let metas: Vec<_> = calls.iter().map(|c| &c.output_meta[0]).collect();
    let timer = crate::profile::Timer::start(device);
    let Some(ran) = backend(device)?.eval_together(&first.prim, &inputs, &metas) else {
        return Ok(false);
    };
    let Ok(results) = ran else {
        // Nothing stands half done (the backend runs nothing before it can run all): each
        // call runs on its own and reports its own error.
        return Ok(false);
    };
    crate::eval::count_calls(calls.len() as u64);
    if let Some(t) = timer {
        t.call(&first.prim, &inputs[0], &first.output_meta, device, device);
    }
    for (call, result) in calls.iter().zip(results) {
        crate::eval::set_results(call, vec![result], evaluation, false);
    }
    drop(guards);
    Ok(true)
}
