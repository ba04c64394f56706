//! The Hopper attention kernels built offline (NVRTC needs no GPU) for `sm_90a`, checked in
//! ptxas's report: no wgmma serialised and no spills in the forms kiln runs by default.
//! A serialised wgmma is silent otherwise: the results stay right while the forward drops
//! from 560 to 390 TFLOP/s (session 26's first persistent draft). Skipped, with a note, where
//! no libnvrtc is on the library path (scripts/test.sh adds pip's nvidia-cuda-nvrtc-cu12).

use super::attention::{self, Key, Variant};
use super::attention_bwd::{self, BwdKey, Kernel};
use kiln_base::{AttentionMask, DType};

/// Whether cudarc can load NVRTC here (loading it any other way panics when it is absent).
fn nvrtc_present() -> bool {
    // SAFETY: only tries to open the library by its candidate names.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

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

#[test]
fn hopper_attention_keeps_wgmma_asynchronous_and_spills_nothing() {
    if !nvrtc_present() {
        eprintln!("skipped: no libnvrtc on the library path (pip nvidia-cuda-nvrtc-cu12)");
        return;
    }
    let kernels = default_kernels();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(8);
    let failures: Vec<String> = std::thread::scope(|scope| {
        let chunks: Vec<_> = kernels.chunks(kernels.len().div_ceil(threads)).collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                scope.spawn(move || {
                    let mut bad = Vec::new();
                    for (name, source) in chunk {
                        match crate::nvrtc::ptxas_report(source, "sm_90a") {
                            Err(e) => bad.push(format!("{name}: {e}")),
                            Ok(log) => {
                                // C7520: "wgmma.mma_async instructions are serialized".
                                if log.contains("C7520") || log.contains("serialized") {
                                    bad.push(format!("{name}: wgmma serialised\n{log}"));
                                }
                                let spills = log.lines().filter(|l| l.contains("spill stores"));
                                if spills.into_iter().any(|l| !l.contains(" 0 bytes spill stores"))
                                {
                                    bad.push(format!("{name}: spills\n{log}"));
                                }
                            }
                        }
                    }
                    bad
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("a build thread panicked")).collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
