//! Producer-consumer fusion at evaluation time: a call whose first input is the one output
//! of a call still pending in the same evaluation may run with it as one kernel where the
//! backend can (`Backend::eval_chained`), both outputs kept (a decode step's residual add
//! and the rms_norm after it: the sum is also the next residual).
//!
//! Why: mlx-lm's transformer blocks add each sublayer's output to the residual stream and
//! normalise the sum for the next sublayer, two launches a sublayer where one reads and
//! writes the same bytes. The pair runs at the producer's place in the order; the consumer's
//! other inputs must be ready then (evaluated, or a short chain of views over evaluated
//! arrays), so they cannot depend on the producer.

use crate::array::OpCall;
use crate::device::backend;
use crate::horizontal::make_ready;
use crate::walk::Step;
use kiln_base::{ArrayData, Chained, DeviceKind, Result};
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// The pairs found in an evaluation's order: each consumer keyed by its producer's call.
#[derive(Default)]
pub(crate) struct Chains(FxHashMap<usize, Arc<OpCall>>);

impl Chains {
    /// The consumer to run with `call`, when it is a pair's producer.
    pub(crate) fn take(&mut self, call: &Arc<OpCall>) -> Option<Arc<OpCall>> {
        if self.0.is_empty() {
            return None;
        }
        self.0.remove(&(Arc::as_ptr(call) as usize))
    }
}

/// Finds the pairs among `order`'s GPU calls: a consumer the backend chains into
/// (`Backend::chains_into`) whose pending first input a producer it takes computes.
pub(crate) fn find(order: &[Step]) -> Chains {
    let Some(gpu) = crate::backends::gpu() else { return Chains::default() };
    let mut pairs = FxHashMap::default();
    for (array, call) in order {
        let Some(consumer) = call else { continue };
        let Some(first) = consumer.inputs.first() else { continue };
        if first.is_evaluated()
            || consumer.output_meta.len() != 1
            || array.stream().device.kind != DeviceKind::Gpu
            || array.is_tracer()
            || !gpu.chains_into(&consumer.prim)
        {
            continue;
        }
        let Some(producer) = first.call() else { continue };
        if producer.output_meta.len() == 1
            && first.stream().device == array.stream().device
            && gpu.runs_chained(&producer.prim, &consumer.prim)
        {
            // (A producer feeding two such consumers keeps the first.)
            pairs.entry(Arc::as_ptr(&producer) as usize).or_insert_with(|| consumer.clone());
        }
    }
    Chains(pairs)
}

/// Runs `producer` (its inputs evaluated) and `consumer` as one kernel when the consumer's
/// other inputs are ready; `Ok(false)`: nothing ran (each runs on its own).
pub(crate) fn run(
    device: kiln_base::Device,
    producer: &Arc<OpCall>,
    consumer: &Arc<OpCall>,
    evaluation: u64,
) -> Result<bool> {
    for input in &consumer.inputs[1..] {
        if !make_ready(input, evaluation, crate::horizontal::VIEW_DEPTH)? {
            return Ok(false);
        }
    }
    // Another thread running either (an eval of the same graph) keeps them apart.
    let (Ok(_p), Ok(_c)) = (producer.running.try_lock(), consumer.running.try_lock()) else {
        return Ok(false);
    };
    if !crate::horizontal::unevaluated(producer) || !crate::horizontal::unevaluated(consumer) {
        return Ok(false);
    }
    // Inputs elsewhere move to the device once, as the walk would move them.
    let on_device = |arrays: &[crate::Array]| -> Result<Option<Vec<ArrayData>>> {
        let mut out = Vec::with_capacity(arrays.len());
        for a in arrays {
            let Some(d) = a.0.data.get() else { return Ok(None) };
            out.push(if d.buffer.device() == device { d.clone() } else { a.data_on(device)? });
        }
        Ok(Some(out))
    };
    let (Some(p_inputs), Some(c_rest)) =
        (on_device(&producer.inputs)?, on_device(&consumer.inputs[1..])?)
    else {
        return Ok(false);
    };
    let timer = crate::profile::Timer::start(device);
    let ran = backend(device)?.eval_chained(&Chained {
        producer: &producer.prim,
        p_inputs: &p_inputs,
        p_out: &producer.output_meta[0],
        consumer: &consumer.prim,
        c_rest: &c_rest,
        c_out: &consumer.output_meta[0],
    });
    let Some(Ok((made, out))) = ran else { return Ok(false) };
    crate::eval::count_calls(2);
    if let Some(t) = timer {
        t.call(&consumer.prim, &p_inputs, &consumer.output_meta, device, device);
    }
    crate::eval::set_results(producer, vec![made], evaluation, false);
    crate::eval::set_results(consumer, vec![out], evaluation, false);
    Ok(true)
}
