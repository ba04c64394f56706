//! CUDA C -> CUBIN with NVRTC for the device's exact architecture, loaded as a module.
//! Built kernels are cached in memory by source and on disk by (source hash, architecture,
//! NVRTC version), so a second process pays no compile. Files are written atomically and
//! checked against their source before use. No lock is held while building: kernels build
//! lazily at their first launch (`function`), or several at once ahead of it (`prebuild`).

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

/// One kernel to build: its CUDA C and the entry point to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub source: String,
    pub symbol: String,
}

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
    /// The parallel batch that built it (`prebuild::BatchReport::id`); `None`: built alone,
    /// at its first launch.
    pub batch: Option<u64>,
}

static BUILT: Mutex<Vec<Built>> = Mutex::new(Vec::new());

/// Every kernel built or loaded from disk so far, in order.
pub fn built() -> Vec<Built> {
    BUILT.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Builds of a parallel batch that failed, by source: the error is given to the first
/// `function` call for that source, so it surfaces where a lazy build would have raised it.
static FAILED: OnceLock<Mutex<HashMap<String, kiln_base::Error>>> = OnceLock::new();

fn failed() -> &'static Mutex<HashMap<String, kiln_base::Error>> {
    FAILED.get_or_init(|| Mutex::new(HashMap::new()))
}

fn modules() -> &'static Mutex<HashMap<String, Function>> {
    MODULES.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Whether `source` is loaded in this process already (no build, no disk read needed).
pub(crate) fn in_memory(source: &str) -> bool {
    modules().lock().unwrap_or_else(|e| e.into_inner()).contains_key(source)
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

/// What kernels are built for: the device's architecture and the NVRTC version (both part
/// of the disk cache key).
pub(crate) struct Target {
    arch: String,
    nvrtc: String,
}

impl Target {
    /// The GPU's target (its context is made current on the calling thread).
    pub(crate) fn of_gpu() -> Result<Target> {
        let gpu = gpu()?;
        let (vmaj, vmin) = nvrtc_version();
        Ok(Target { arch: arch_name(gpu.arch), nvrtc: format!("nvrtc{vmaj}.{vmin}") })
    }
}

/// NVRTC's name for compute capability `arch`: sm_90 as sm_90a, whose architecture-specific
/// instructions (`wgmma`, the tensor memory accelerator) the Hopper kernels use; the code
/// runs only on sm_90, which is the device it is built for.
pub(crate) fn arch_name(arch: (i32, i32)) -> String {
    let suffix = if arch == (9, 0) { "a" } else { "" };
    format!("sm_{}{}{suffix}", arch.0, arch.1)
}

/// A kernel loaded from the disk cache or built, and how.
pub(crate) struct Loaded {
    pub function: Function,
    /// NVRTC wall time on the building thread (zero when loaded from disk).
    pub build_ms: f64,
    pub from_disk: bool,
}

/// The entry point `symbol` of `source`, from the disk cache or built by NVRTC (and written
/// to the cache), then loaded. Takes no lock: several threads may build at once (NVRTC
/// programs are independent); loading binds the GPU's context on the calling thread.
pub(crate) fn obtain(source: &str, symbol: &str, target: &Target) -> Result<Loaded> {
    let key = fnv1a(&[
        source.as_bytes(),
        target.arch.as_bytes(),
        target.nvrtc.as_bytes(),
        prologue().as_bytes(),
        GRID_WAIT_PLACEMENT.as_bytes(),
    ]);
    let paths = cache_dir()
        .map(|d| (d.join(format!("{key:016x}.cubin")), d.join(format!("{key:016x}.cu"))));
    let cached = paths.as_ref().and_then(|(cubin, src)| {
        let same = std::fs::read_to_string(src).ok().is_some_and(|s| s == source);
        same.then(|| std::fs::read(cubin).ok()).flatten()
    });
    if let Some(function) = cached.as_ref().and_then(|image| load(image, symbol).ok()) {
        return Ok(Loaded { function, build_ms: 0.0, from_disk: true });
    }
    let start = Instant::now();
    let image = compile(source, &target.arch)?;
    let build_ms = start.elapsed().as_secs_f64() * 1e3;
    if let Some((cubin, src)) = &paths {
        let _ =
            write_atomically(cubin, &image).and_then(|_| write_atomically(src, source.as_bytes()));
    }
    let function = load(&image, symbol)?;
    Ok(Loaded { function, build_ms, from_disk: false })
}

/// Publishes a kernel `obtain` produced: counters, the explain record, the memory cache.
pub(crate) fn publish(source: &str, symbol: &str, loaded: &Loaded, batch: Option<u64>) {
    {
        let mut stats = STATS.lock().unwrap_or_else(|e| e.into_inner());
        if loaded.from_disk {
            stats.disk_hits += 1;
        } else {
            stats.compiled += 1;
            stats.compile_time += Duration::from_secs_f64(loaded.build_ms / 1e3);
        }
    }
    let built = Built {
        symbol: symbol.into(),
        source: source.into(),
        build_ms: loaded.build_ms,
        from_disk: loaded.from_disk,
        batch,
    };
    BUILT.lock().unwrap_or_else(|e| e.into_inner()).push(built);
    modules().lock().unwrap_or_else(|e| e.into_inner()).insert(source.to_string(), loaded.function);
}

/// Keeps a batch build's error for the first `function` call of `source`.
pub(crate) fn remember_failure(source: &str, error: kiln_base::Error) {
    failed().lock().unwrap_or_else(|e| e.into_inner()).insert(source.to_string(), error);
}

/// The entry point `symbol` of `source`, built (or found in a cache) and loaded. One entry
/// point per source: the memory cache is keyed by the source alone.
pub fn function(source: &str, symbol: &str) -> Result<Function> {
    if let Some(f) = modules().lock().unwrap_or_else(|e| e.into_inner()).get(source) {
        STATS.lock().unwrap_or_else(|e| e.into_inner()).memory_hits += 1;
        return Ok(*f);
    }
    // A parallel batch tried this source and failed: its error, once (a later call builds
    // again, as it would have without the batch).
    if let Some(e) = failed().lock().unwrap_or_else(|e| e.into_inner()).remove(source) {
        return Err(e);
    }
    let target = Target::of_gpu()?;
    let loaded = obtain(source, symbol, &target)?;
    publish(source, symbol, &loaded, None);
    Ok(loaded.function)
}

fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().expect("cache files live in a directory");
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".tmp-{}-{:?}", std::process::id(), std::thread::current().id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// NVRTC: source -> CUBIN for `arch`. Errors carry the compiler log (with line numbers).
pub(crate) fn compile(source: &str, arch: &str) -> Result<Vec<u8>> {
    build(source, arch, false).map(|(image, _)| image)
}

/// Whether cudarc can load NVRTC here (loading it any other way panics when it is absent):
/// the offline build checks skip without it.
#[cfg(test)]
pub(crate) fn loadable() -> bool {
    // SAFETY: only tries to open the library by its candidate names.
    unsafe { nsys::is_culib_present() }
}

/// The problems `check` finds in each of `sources`, checked on up to 8 threads at once
/// (NVRTC programs are independent): the offline build checks.
#[cfg(test)]
pub(crate) fn problems_in_parallel(
    sources: &[(String, String)],
    check: impl Fn(&str, &str) -> Vec<String> + Sync,
) -> Vec<String> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(8);
    let check = &check;
    std::thread::scope(|scope| {
        let handles: Vec<_> = sources
            .chunks(sources.len().div_ceil(threads).max(1))
            .map(|chunk| {
                scope.spawn(move || {
                    chunk.iter().flat_map(|(name, src)| check(name, src)).collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("a build thread panicked")).collect()
    })
}

/// The compiler's log with ptxas's report (`-v`: registers, spills, and its performance
/// notes such as wgmma serialisation) for `source` built for `arch`. NVRTC needs no GPU,
/// so this runs offline (the Hopper kernels' build checks).
#[cfg(test)]
pub(crate) fn ptxas_report(source: &str, arch: &str) -> Result<String> {
    build(source, arch, true).map(|(_, log)| log)
}

/// What every kernel runs first on sm_90 and later: wait until the kernels before it on
/// the stream have finished and their writes are visible (`griddepcontrol.wait`). After a
/// plain launch there is nothing left to wait for; it is what makes a programmatic dependent
/// launch (batch.rs) safe, which lets a kernel's blocks be scheduled while its predecessor's
/// last blocks drain instead of after a full launch gap. On one line: compiler messages
/// keep the source's line numbers.
const GRID_WAIT: &str = " asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");";

/// With `KILN_EARLY_TRIGGER=1`, then, past the wait, let the next kernel launch
/// (`griddepcontrol.launch_dependents`): once every block of this one has started, the next
/// one's blocks are placed and wait in their own `GRID_WAIT`, so they start the moment this
/// one ends. Placed after the wait, a chain never runs more than one kernel ahead. Off by
/// default until it has run on a GPU (session 27 built it after its last device call).
const TRIGGER: &str = " asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");";

/// How [`with_grid_wait`] places the prologue: with the prologue's text, part of the disk
/// cache key (CUBINs built without the wait must not be loaded: a kernel launched early
/// would race). Change it when the placement changes.
const GRID_WAIT_PLACEMENT: &str = "grid-wait-placement-1";

/// The statements [`with_grid_wait`] puts first in every kernel.
fn prologue() -> &'static str {
    static PROLOGUE: OnceLock<String> = OnceLock::new();
    PROLOGUE.get_or_init(|| {
        let trigger = std::env::var("KILN_EARLY_TRIGGER").is_ok_and(|v| v.trim() == "1");
        format!("{GRID_WAIT}{}", if trigger { TRIGGER } else { "" })
    })
}

/// Whether `arch` (`sm_90a`, `sm_86`, ...) has `griddepcontrol` (sm_90 and later).
pub(crate) fn has_grid_dependencies(arch: &str) -> bool {
    let digits: String =
        arch.trim_start_matches("sm_").chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse::<u32>().is_ok_and(|n| n >= 90)
}

/// `source` with [`prologue`] as the first statements of each `extern "C" __global__`
/// function defined in it (kiln's kernels and the wrappers of user kernels all are). Only
/// an entry that starts its line counts: not one in a comment or a macro.
pub(crate) fn with_grid_wait(source: &str) -> String {
    const ENTRY: &str = "extern \"C\" __global__";
    let mut out = String::with_capacity(source.len() + 128);
    let mut rest = source;
    while let Some(at) = rest.find(ENTRY) {
        let line_start = rest[..at].rfind('\n').map_or(0, |i| i + 1);
        let after = at + ENTRY.len();
        if !rest[line_start..at].trim().is_empty() {
            out.push_str(&rest[..after]);
            rest = &rest[after..];
            continue;
        }
        // The body opens at the first brace after the parameter list (which holds none);
        // a `;` first is a declaration.
        let Some(end) = rest[after..].find(['{', ';']).map(|i| after + i) else { break };
        out.push_str(&rest[..=end]);
        if rest.as_bytes()[end] == b'{' {
            out.push_str(prologue());
        }
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

fn build(source: &str, arch: &str, verbose: bool) -> Result<(Vec<u8>, String)> {
    let waiting;
    let source = if has_grid_dependencies(arch) {
        waiting = with_grid_wait(source);
        waiting.as_str()
    } else {
        source
    };
    let src = CString::new(source).map_err(|_| kiln_base::Error::Value {
        op: "cuda_compile",
        msg: "The kernel source contains a NUL byte.".into(),
    })?;
    let prog = nvrtc::create_program(&src, Some(c"kiln_kernel.cu"))
        .map_err(|e| runtime(format!("nvrtcCreateProgram failed: {e}")))?;
    let mut options = vec![
        format!("--gpu-architecture={arch}"),
        // Bit-equal with the CPU where the math is the same: no contraction into FMAs.
        "--fmad=false".to_string(),
        "-std=c++17".to_string(),
    ];
    if verbose {
        options.push("--ptxas-options=-v".to_string());
    }
    // SAFETY: prog is a live program; options are plain strings.
    let compiled = unsafe { nvrtc::compile_program(prog, &options) };
    // SAFETY: prog is live; the log is a NUL-terminated byte string.
    let log = unsafe { nvrtc::get_program_log(prog) }.unwrap_or_default();
    let log: Vec<u8> = log.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
    let log = String::from_utf8_lossy(&log).into_owned();
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
                Ok((image, log))
            }
        }
        Err(_) => Err(kiln_base::Error::Value {
            op: "cuda_compile",
            msg: format!("NVRTC failed to compile the kernel:\n{log}"),
        }),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel defined in a source starts with the grid wait, declarations and other
    /// functions are left alone, and line numbers do not move.
    #[test]
    fn kernels_start_with_the_grid_wait() {
        let source = "extern \"C\" __global__ void kiln_a(int n);\n\
                      __device__ int f(int x) { return x; }\n\
                      extern \"C\" __global__ void __launch_bounds__(128) kiln_a(const Str s,\n\
                      int n) {\n  s.v[0] = n;\n}\n\
                      extern \"C\" __global__ void kiln_b() { }\n";
        let out = with_grid_wait(source);
        let first = prologue();
        assert!(first.starts_with(GRID_WAIT), "the wait comes before anything else");
        assert_eq!(out.matches(first).count(), 2, "{out}");
        assert_eq!(out.lines().count(), source.lines().count());
        assert!(out.contains(&format!("int n) {{{first}\n  s.v[0] = n;")), "{out}");
        assert!(out.contains(&format!("kiln_b() {{{first} }}")), "{out}");
        assert!(out.contains("kiln_a(int n);\n__device__ int f(int x) { return x; }"), "{out}");
        // Not in a comment or a macro.
        let quoted = "// extern \"C\" __global__ void k() { }\n\
                      #define K extern \"C\" __global__ void k() { }\n";
        assert_eq!(with_grid_wait(quoted), quoted);
        assert_eq!(with_grid_wait("no kernel here {"), "no kernel here {");
        for (arch, has) in [("sm_90a", true), ("sm_90", true), ("sm_100a", true), ("sm_89", false)]
        {
            assert_eq!(has_grid_dependencies(arch), has, "{arch}");
        }
        assert!(!has_grid_dependencies("compute_80"));
    }

    /// A batch's failed build is raised by the first launch needing that kernel, with the
    /// same error; later calls build again as without a batch (here: no GPU).
    #[test]
    fn batch_failures_reach_the_launch_once() {
        let source = "extern \"C\" __global__ void kiln_broken() { undeclared; }";
        let error = kiln_base::Error::Value {
            op: "cuda_compile",
            msg: "NVRTC failed to compile the kernel:\nerror: identifier is undefined".into(),
        };
        remember_failure(source, error.clone());
        assert_eq!(function(source, "kiln_broken").err(), Some(error));
        if !crate::is_available() {
            let again = function(source, "kiln_broken").err().expect("no GPU here");
            assert!(again.to_string().contains("GPU is not available"), "{again}");
        }
    }

    /// NVRTC needs no GPU: where libnvrtc loads (`LD_LIBRARY_PATH`), kernels compile on
    /// several threads at once, each to its own CUBIN, and a broken one carries its log.
    #[test]
    fn nvrtc_compiles_in_parallel_without_a_gpu() {
        if !loadable() {
            eprintln!("skipped: libnvrtc not found");
            return;
        }
        let kernel = |k: usize| {
            format!(
                "extern \"C\" __global__ void kiln_t{k}(float* y, const float* x, long long n) {{\n\
                 long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n\
                 if (i < n) y[i] = x[i] * {k}.0f + 1.0f;\n}}\n"
            )
        };
        let mut sources: Vec<String> = (0..6).map(kernel).collect();
        sources.push("extern \"C\" __global__ void kiln_bad() { undeclared_name; }".into());
        let threads = crate::build_threads::threads_for(sources.len()).max(2);
        let start = Instant::now();
        let images =
            crate::build_threads::run_parallel(&sources, threads, |s| compile(s, "sm_90a"));
        let wall = start.elapsed();
        for image in &images[..6] {
            let image = image.as_ref().expect("compiles");
            assert_eq!(&image[..4], b"\x7fELF", "a CUBIN is an ELF image");
        }
        assert_ne!(images[0].as_ref().unwrap(), images[1].as_ref().unwrap());
        let err = images[6].as_ref().expect_err("does not compile").to_string();
        assert!(err.contains("undeclared_name"), "{err}");
        eprintln!("{} kernels on {threads} threads: {wall:?}", sources.len());
    }
}
