//! The Hopper attention kernels built offline (NVRTC needs no GPU) for `sm_90a`, checked in
//! ptxas's report: no wgmma serialised and nothing in local memory (spills, stack arrays) in
//! the forms kiln runs by default.
//! A serialised wgmma is silent otherwise: the results stay right while the forward drops
//! from 560 to 390 TFLOP/s (session 26's first persistent draft). Skipped, with a note, where
//! no libnvrtc is on the library path (scripts/test.sh adds pip's nvidia-cuda-nvrtc-cu12).

use super::attention::{self, Key, Variant};
use super::attention_bwd::{self, BwdKey, Kernel};
use kiln_base::{AttentionMask, DType};

/// (name, source) of the kernels the GPU runs by default on sm_90 for half floats: the
/// forward's persistent and pingpong forms at every head dim, with and without the row
/// logsumexp, and the fused backward's wgmma kernels.
fn default_kernels() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for mask in [AttentionMask::None, AttentionMask::Causal] {
        for d in [64, 96, 128, 256] {
            for form in [2, 3] {
                for lse in [false, true] {
                    let key =
                        Key { dtype: DType::BF16, mask, variant: Variant::HopperWs(d, form), lse };
                    out.push((format!("{key:?}"), attention::source(&key)));
                }
            }
        }
        for d in [64, 128] {
            for kernel in [Kernel::KvHopper, Kernel::QHopper] {
                let key = BwdKey { dtype: DType::BF16, mask, d, kernel };
                out.push((format!("{key:?}"), attention_bwd::source(&key)));
            }
        }
    }
    out
}

/// What ptxas's report for one kernel shows wrong: a serialised wgmma (note C7520), or
/// anything in local memory (spills, or an array the compiler could not keep in registers).
fn problems(name: &str, source: &str) -> Option<String> {
    let log = match crate::nvrtc::ptxas_report(source, "sm_90a") {
        Ok(log) => log,
        Err(e) => return Some(format!("{name}: {e}")),
    };
    let serialised = log.contains("C7520") || log.contains("serialized");
    let local = log
        .lines()
        .filter(|l| l.contains("stack frame"))
        .any(|l| !l.contains(" 0 bytes stack frame") || !l.contains(" 0 bytes spill stores"));
    (serialised || local).then(|| format!("{name}: serialised {serialised}, local {local}\n{log}"))
}

#[test]
fn hopper_attention_keeps_wgmma_asynchronous_and_registers_only() {
    if !crate::nvrtc::loadable() {
        eprintln!("skipped: no libnvrtc on the library path (pip nvidia-cuda-nvrtc-cu12)");
        return;
    }
    let failures = crate::nvrtc::problems_in_parallel(&default_kernels(), |name, src| {
        problems(name, src).into_iter().collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
