//! Kernel launches with arguments laid out by value: each argument's bytes are kept in one
//! vector and the driver gets a pointer to each, as its API expects; the launch itself goes
//! through `batch.rs` (held back with the evaluation's other kernels).

use crate::nvrtc::Function;
use crate::runtime::gpu;
use kiln_base::Result;

/// Threads per block of the generated elementwise and reduction kernels.
pub const BLOCK: u32 = 256;

/// A kernel's arguments, in order; a launch takes them (the `Args` is left empty).
#[derive(Default)]
pub struct Args {
    /// Each argument as 8-byte words (structs of int64 fields, pointers, int64 scalars).
    words: crate::batch::ArgWords,
}

impl Args {
    pub fn new() -> Args {
        Args::default()
    }
    pub fn ptr(&mut self, device_ptr: u64) -> &mut Args {
        self.words.push([device_ptr]);
        self
    }
    pub fn i64(&mut self, v: i64) -> &mut Args {
        self.words.push([v as u64]);
        self
    }
    /// A struct whose fields are all int64 (shape and stride tables), passed by value.
    pub fn i64_struct(&mut self, fields: &[i64]) -> &mut Args {
        // (an i64 and a u64 have the same bytes)
        self.words.push(fields.iter().map(|&v| v as u64));
        self
    }
}

/// Launches `f` on the GPU's stream with `blocks` x `threads` and `shared` bytes of shared
/// memory.
pub fn launch(
    op: &'static str,
    f: Function,
    blocks: u32,
    threads: u32,
    shared: u32,
    args: &mut Args,
) -> Result<()> {
    gpu()?;
    crate::batch::launch(crate::batch::Launch {
        op,
        func: f.0,
        blocks,
        threads,
        shared,
        words: std::mem::take(&mut args.words),
    })
}

/// Lets `f` take `bytes` of dynamic shared memory where that passes the default 48 KiB
/// (the driver asks kernels to opt in); once per function, as its largest need does not
/// change.
pub(crate) fn allow_shared(op: &'static str, f: Function, bytes: usize) -> Result<()> {
    static DONE: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
    if bytes <= 48 << 10 {
        return Ok(());
    }
    let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
    if done.contains(&(f.0 as usize)) {
        return Ok(());
    }
    use cudarc::driver::sys::CUfunction_attribute_enum as A;
    // SAFETY: a loaded kernel of the current context; a limit past the device's fails cleanly.
    unsafe {
        cudarc::driver::result::function::set_function_attribute(
            f.0,
            A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes as i32,
        )
    }
    .map_err(|e| crate::runtime::driver_error(op, e))?;
    done.push(f.0 as usize);
    Ok(())
}

/// Blocks for `n` work items of `per_block` each, capped so grid-stride loops cover the rest
/// while every multiprocessor stays busy.
pub fn blocks_for(n: u64, per_block: u64) -> u32 {
    let sms = gpu().map(|g| g.multiprocessors).unwrap_or(1) as u64;
    n.div_ceil(per_block.max(1)).clamp(1, sms * 32) as u32
}

/// Blocks for `n` work items of `per_block` each, every item its own slot (up to the grid's
/// limit; grid-stride loops cover anything past it). For streaming kernels: a grid capped at
/// a few blocks per multiprocessor ran 3 to 6% slower on the H200, as its long-lived blocks
/// end unevenly across multiprocessors (adam on 2^26 floats: 0.948 of the copy floor capped
/// at 32 blocks per multiprocessor, 1.004 with a block per 1024 elements).
pub fn blocks_covering(n: u64, per_block: u64) -> u32 {
    n.div_ceil(per_block.max(1)).clamp(1, i32::MAX as u64) as u32
}

/// The comma-separated numbers of a tuning variable (`KILN_GEMV_TILING=4,4,0`), read by the
/// caller once; what does not parse is left out, an unset variable gives none.
pub(crate) fn tuning_numbers(var: &str) -> Vec<usize> {
    std::env::var(var)
        .unwrap_or_default()
        .split(',')
        .filter_map(|x| x.trim().parse().ok())
        .collect()
}
