//! The Hopper attention kernels built offline (NVRTC needs no GPU) for `sm_90a`, checked in
//! ptxas's report: no wgmma serialised and nothing in local memory (spills, stack arrays) in
//! the forms kiln runs by default.
//! A serialised wgmma is silent otherwise: the results stay right while the forward drops
//! from 560 to 390 TFLOP/s (session 26's first persistent draft). Skipped, with a note, where
//! no libnvrtc is on the library path (scripts/test.sh adds pip's nvidia-cuda-nvrtc-cu12).
//! With cuobjdump too (`KILN_CUOBJDUMP`, which scripts/test.sh points at pip's
//! nvidia-cuda-cuobjdump), the `-overlap` forms' machine code is checked for what they are
//! for: no wait for the last `P V` before the softmax's exponentials.

use super::attention::{self, Key, Variant};
use super::attention_bwd::{self, BwdKey, Kernel};
use super::attention_hopper::OVERLAP;
use kiln_base::{AttentionMask, DType};

/// Whether cudarc can load NVRTC here (loading it any other way panics when it is absent).
fn nvrtc_present() -> bool {
    // SAFETY: only tries to open the library by its candidate names.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// (name, source) of the kernels the GPU runs by default on sm_90 for half floats: the
/// forward's persistent and pingpong forms (and their `-overlap` trials) at every head dim,
/// with and without the row logsumexp, and the fused backward's wgmma kernels.
fn default_kernels() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for mask in [AttentionMask::None, AttentionMask::Causal] {
        for d in [64, 96, 128, 256] {
            for form in [2, 3, 2 | OVERLAP, 3 | OVERLAP] {
                for lse in [false, true] {
                    let key =
                        Key { dtype: DType::BF16, mask, variant: Variant::HopperWs(d, form), lse };
                    out.push((format!("{key:?}"), attention::source(&key)));
                }
            }
        }
        for d in [64, 128] {
            for kernel in [Kernel::KvHopper, Kernel::QHopper] {
                for step in [false, true] {
                    let key = BwdKey { dtype: DType::BF16, mask, d, kernel, step };
                    out.push((format!("{key:?}"), attention_bwd::source(&key)));
                }
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
    if !nvrtc_present() {
        eprintln!("skipped: no libnvrtc on the library path (pip nvidia-cuda-nvrtc-cu12)");
        return;
    }
    let kernels = default_kernels();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(8);
    let failures: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = kernels
            .chunks(kernels.len().div_ceil(threads))
            .map(|chunk| {
                scope.spawn(move || {
                    chunk.iter().filter_map(|(n, src)| problems(n, src)).collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("a build thread panicked")).collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// `cuobjdump -sass` of `cubin`, where `KILN_CUOBJDUMP` names the tool.
fn sass(cubin: &[u8], name: &str) -> Option<String> {
    let tool = std::env::var_os("KILN_CUOBJDUMP")?;
    let path = std::env::temp_dir().join(format!("kiln-check-{}-{name}.cubin", std::process::id()));
    std::fs::write(&path, cubin).ok()?;
    let out = std::process::Command::new(tool).arg("-sass").arg(&path).output();
    let _ = std::fs::remove_file(&path);
    let out = out.ok().filter(|o| o.status.success())?;
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether the wait for every product (`wait_group 0`, the last tile's `P V`) comes before
/// the first exponential after the wait for the scores (`wait_group 1`) in `sass`.
fn waits_before_the_softmax(sass: &str) -> bool {
    let lines: Vec<&str> = sass.lines().collect();
    let Some(scores) = lines.iter().position(|l| l.contains("WARPGROUP.DEPBAR.LE gsb0, 0x1"))
    else {
        return true; // no overlap to lose
    };
    let exp = lines[scores..].iter().position(|l| l.contains("MUFU.EX2")).unwrap_or(0);
    lines[scores..scores + exp].iter().any(|l| l.contains("WARPGROUP.DEPBAR.LE gsb0, 0x0"))
}

#[test]
fn overlap_forms_keep_p_v_in_flight_across_the_softmax() {
    if !nvrtc_present() || std::env::var_os("KILN_CUOBJDUMP").is_none() {
        eprintln!("skipped: needs libnvrtc on the library path and KILN_CUOBJDUMP");
        return;
    }
    let mut checked = 0;
    for mask in [AttentionMask::None, AttentionMask::Causal] {
        for d in [64, 128, 256] {
            for (form, overlap) in [(3, false), (3 | OVERLAP, true), (2 | OVERLAP, true)] {
                let key = Key {
                    dtype: DType::BF16,
                    mask,
                    variant: Variant::HopperWs(d, form),
                    lse: false,
                };
                let cubin = crate::nvrtc::cubin(&attention::source(&key), "sm_90a").unwrap();
                let name = format!("{d}-{form}-{}", mask == AttentionMask::Causal);
                let code = sass(&cubin, &name).expect("cuobjdump -sass failed");
                assert!(code.contains("MUFU.EX2"), "{key:?}: no SASS read");
                // The default forms show the early wait (what `OVERLAP` is for); the trial
                // forms must not.
                assert_eq!(waits_before_the_softmax(&code), !overlap, "{key:?}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 18);
}
