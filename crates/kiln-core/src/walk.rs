//! Iterative graph walks (graphs may be a million nodes deep; recursion would overflow).

use crate::array::Array;
use rustc_hash::FxHashSet;

/// The unevaluated nodes `outputs` depend on, inputs before users, each primitive call
/// once (one representative output per call).
pub(crate) fn pending_in_order(outputs: &[Array]) -> Vec<Array> {
    let mut order = Vec::new();
    let mut seen: FxHashSet<usize> = FxHashSet::default();
    // (array, whether its inputs were already pushed)
    let mut stack: Vec<(Array, bool)> = outputs.iter().rev().map(|a| (a.clone(), false)).collect();
    while let Some((array, expanded)) = stack.pop() {
        if expanded {
            // Its inputs are in the order already (an array finished meanwhile by another
            // thread is skipped by eval).
            order.push(array);
            continue;
        }
        if array.is_evaluated() {
            continue;
        }
        let Some(call) = array.call() else {
            // Placeholders are reported by eval.
            if seen.insert(std::sync::Arc::as_ptr(&array.0) as usize) {
                order.push(array);
            }
            continue;
        };
        let key = std::sync::Arc::as_ptr(&call) as usize;
        if !seen.insert(key) {
            continue;
        }
        stack.push((array, true));
        for input in call.inputs.iter().rev() {
            if !input.is_evaluated() {
                stack.push((input.clone(), false));
            }
        }
    }
    order
}
