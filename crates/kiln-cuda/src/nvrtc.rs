//! CUDA C -> CUBIN with NVRTC for the device's exact architecture, loaded as a module.
//! Built kernels are cached in memory by source and on disk by (source hash, architecture,
//! NVRTC version), so a second process pays no compile. Files are written atomically and
//! checked against their source before use.

use crate::runtime::{driver_error, gpu};
use cudarc::driver::{result as driver, sys as dsys};
use cudarc::nvrtc::{result as nvrtc, sys as nsys};
use kiln_base::{bail, Result};
use std::collections::HashMap;
use std::ffi::CString;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A loaded kernel entry point. Modules stay loaded for the life of the process: a function
/// may be running or captured in a graph whenever its cache entry goes.
#[derive(Clone, Copy)]
pub struct Function(pub dsys::CUfunction);

// SAFETY: a CUfunction is a process-wide driver handle usable from any thread that has the
// context current (every launch goes through `gpu()`, which binds it).
unsafe impl Send for Function {}
// SAFETY: as for Send; launching does not mutate the handle.
unsafe impl Sync for Function {}

/// Compile statistics (explain, tests).
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub compiled: usize,
    pub disk_hits: usize,
    pub memory_hits: usize,
    pub compile_time: Duration,
}

static MODULES: OnceLock<Mutex<HashMap<String, Function>>> = OnceLock::new();
static STATS: Mutex<Stats> =
    Mutex::new(Stats { compiled: 0, disk_hits: 0, memory_hits: 0, compile_time: Duration::ZERO });

pub fn stats() -> Stats {
    STATS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// One kernel built (or loaded from the disk cache) in this process: what explain shows.
#[derive(Debug, Clone)]
pub struct Built {
    pub symbol: String,
    pub source: String,
    /// NVRTC time (zero when loaded from disk).
    pub build_ms: f64,
    pub from_disk: bool,
}

static BUILT: Mutex<Vec<Built>> = Mutex::new(Vec::new());

/// Every kernel built or loaded from disk so far, in order.
pub fn built() -> Vec<Built> {
    BUILT.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn record(symbol: &str, source: &str, build_ms: f64, from_disk: bool) {
    let built = Built { symbol: symbol.into(), source: source.into(), build_ms, from_disk };
    BUILT.lock().unwrap_or_else(|e| e.into_inner()).push(built);
}

fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for part in parts {
        for &b in *part {
            h = (h ^ b as u64).wrapping_mul(0x100000001b3);
        }
    }
    h
}

fn nvrtc_version() -> (i32, i32) {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: nvrtc was probed present when the GPU was opened; plain out-parameters.
    unsafe { nsys::nvrtcVersion(&mut major, &mut minor) };
    (major, minor)
}

fn cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("KILN_CACHE_DIR") {
        return Some(PathBuf::from(dir).join("cuda-kernels"));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("kiln").join("cuda-kernels"))
}

/// The entry point `symbol` of `source`, built (or found in a cache) and loaded.
pub fn function(source: &str, symbol: &str) -> Result<Function> {
    let modules = MODULES.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(f) = modules.lock().unwrap_or_else(|e| e.into_inner()).get(source) {
        STATS.lock().unwrap_or_else(|e| e.into_inner()).memory_hits += 1;
        return Ok(*f);
    }
    let gpu = gpu()?;
    let arch = format!("sm_{}{}", gpu.arch.0, gpu.arch.1);
    let (vmaj, vmin) = nvrtc_version();
    let key =
        fnv1a(&[source.as_bytes(), arch.as_bytes(), format!("nvrtc{vmaj}.{vmin}").as_bytes()]);
    let paths = cache_dir()
        .map(|d| (d.join(format!("{key:016x}.cubin")), d.join(format!("{key:016x}.cu"))));
    let cached = paths.as_ref().and_then(|(cubin, src)| {
        let same = std::fs::read_to_string(src).ok().is_some_and(|s| s == source);
        same.then(|| std::fs::read(cubin).ok()).flatten()
    });
    let image = match cached.as_ref().and_then(|image| load(image, symbol).ok()) {
        Some(f) => {
            STATS.lock().unwrap_or_else(|e| e.into_inner()).disk_hits += 1;
            record(symbol, source, 0.0, true);
            modules.lock().unwrap_or_else(|e| e.into_inner()).insert(source.to_string(), f);
            return Ok(f);
        }
        None => {
            let start = Instant::now();
            let image = compile(source, &arch)?;
            let mut stats = STATS.lock().unwrap_or_else(|e| e.into_inner());
            stats.compiled += 1;
            stats.compile_time += start.elapsed();
            record(symbol, source, start.elapsed().as_secs_f64() * 1e3, false);
            image
        }
    };
    if let Some((cubin, src)) = &paths {
        let _ =
            write_atomically(cubin, &image).and_then(|_| write_atomically(src, source.as_bytes()));
    }
    let f = load(&image, symbol)?;
    modules.lock().unwrap_or_else(|e| e.into_inner()).insert(source.to_string(), f);
    Ok(f)
}

fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().expect("cache files live in a directory");
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".tmp-{}-{:?}", std::process::id(), std::thread::current().id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// NVRTC: source -> CUBIN for `arch`. Errors carry the compiler log (with line numbers).
fn compile(source: &str, arch: &str) -> Result<Vec<u8>> {
    let src = CString::new(source).map_err(|_| kiln_base::Error::Value {
        op: "cuda_compile",
        msg: "The kernel source contains a NUL byte.".into(),
    })?;
    let prog = nvrtc::create_program(&src, Some(c"kiln_kernel.cu"))
        .map_err(|e| runtime(format!("nvrtcCreateProgram failed: {e}")))?;
    let options = vec![
        format!("--gpu-architecture={arch}"),
        // Bit-equal with the CPU where the math is the same: no contraction into FMAs.
        "--fmad=false".to_string(),
        "-std=c++17".to_string(),
    ];
    // SAFETY: prog is a live program; options are plain strings.
    let compiled = unsafe { nvrtc::compile_program(prog, &options) };
    let outcome = match compiled {
        Ok(()) => {
            let mut size = 0usize;
            // SAFETY: a compiled program; out-parameter.
            let status = unsafe { nsys::nvrtcGetCUBINSize(prog, &mut size) };
            let mut image = vec![0u8; size];
            // SAFETY: image has the size NVRTC reported.
            let status2 = unsafe { nsys::nvrtcGetCUBIN(prog, image.as_mut_ptr() as *mut _) };
            if status != nsys::nvrtcResult::NVRTC_SUCCESS
                || status2 != nsys::nvrtcResult::NVRTC_SUCCESS
            {
                Err(runtime("NVRTC could not return the CUBIN.".into()))
            } else {
                Ok(image)
            }
        }
        Err(_) => {
            // SAFETY: prog is live; the log is a NUL-terminated byte string.
            let log = unsafe { nvrtc::get_program_log(prog) }.unwrap_or_default();
            let log: Vec<u8> = log.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
            Err(kiln_base::Error::Value {
                op: "cuda_compile",
                msg: format!(
                    "NVRTC failed to compile the kernel:\n{}",
                    String::from_utf8_lossy(&log)
                ),
            })
        }
    };
    // SAFETY: prog is live and not used after.
    let _ = unsafe { nvrtc::destroy_program(prog) };
    outcome
}

fn runtime(msg: String) -> kiln_base::Error {
    kiln_base::Error::Runtime { op: "cuda_compile", msg }
}

fn load(image: &[u8], symbol: &str) -> Result<Function> {
    gpu()?;
    // SAFETY: `image` is a CUBIN (or fails to load with an error); it is copied by the driver.
    let module = unsafe { driver::module::load_data(image.as_ptr() as *const _) }
        .map_err(|e| driver_error("cuda_load", e))?;
    let name = CString::new(symbol).expect("symbols have no NUL");
    // SAFETY: module is live (never unloaded).
    let f = unsafe { driver::module::get_function(module, name) }
        .map_err(|e| driver_error("cuda_load", e))?;
    Ok(Function(f))
}

/// Fails clearly when `n` blocks cannot be launched.
pub fn check_grid(op: &'static str, blocks: u64) -> Result<u32> {
    if blocks > u32::MAX as u64 {
        bail!(Value, op, "Too many elements for one GPU launch.");
    }
    Ok(blocks.max(1) as u32)
}

/// Per-family kernel lookup by a small key (no source building or hashing on a hit): the
/// hand-written kernel families (indexing, scans, creation) keep one of these each.
pub struct KernelCache<K>(OnceLock<Mutex<rustc_hash::FxHashMap<K, Function>>>);

impl<K: std::hash::Hash + Eq + Clone> Default for KernelCache<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: std::hash::Hash + Eq + Clone> KernelCache<K> {
    pub const fn new() -> Self {
        KernelCache(OnceLock::new())
    }

    /// The kernel for `key`, built from `source(key)` on the first request.
    pub fn get(&self, key: &K, symbol: &str, source: impl FnOnce() -> String) -> Result<Function> {
        let map = self.0.get_or_init(|| Mutex::new(Default::default()));
        if let Some(f) = map.lock().unwrap_or_else(|e| e.into_inner()).get(key) {
            return Ok(*f);
        }
        let f = function(&source(), symbol)?;
        map.lock().unwrap_or_else(|e| e.into_inner()).insert(key.clone(), f);
        Ok(f)
    }
}

/// Tests: with `KILN_CUDA_DUMP=dir`, writes each `(file name, source)` there, for an offline
/// NVRTC check of generated kernels (no GPU needed).
#[cfg(test)]
pub(crate) fn dump_sources(sources: &[(String, String)]) {
    if let Some(dir) = std::env::var_os("KILN_CUDA_DUMP") {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, source) in sources {
            std::fs::write(dir.join(name), source).unwrap();
        }
    }
}
