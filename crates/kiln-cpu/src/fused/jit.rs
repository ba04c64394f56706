//! Building and loading generated C kernels: the system C compiler (`KILN_CC`, else `cc`)
//! builds a shared object, libloading loads it. Built objects are cached in memory for the
//! process and on disk across processes (`disk_cache.rs`: verified before they load).
//!
//! `KILN_CPU_JIT` picks when kernels build: `async` (default: in a background thread; the
//! interpreter runs the region meanwhile), `sync` (the first call waits), `off` (never).
//! A loaded kernel remembers (weakly) the compiled programs that asked for it; once none of
//! them is alive (their compiled functions' entries were dropped) it leaves the registry,
//! and its library is unmapped when the last run holding it returns. A long-running process
//! that compiles many functions keeps only the kernels it can still call.

use super::disk_cache::{build_or_reuse, runtime};
pub use super::disk_cache::{
    cache_dir, disk_cache_limit, set_disk_cache_limit, trim_disk_cache, DEFAULT_CC_TIMEOUT_S,
    DEFAULT_DISK_CACHE_LIMIT,
};
use kiln_base::{FusedProgram, Result};
use kiln_codegen::c::{c_kernel, Variant, KERNEL_SYMBOL};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};

/// `kiln_kernel(begin, end, in, out)`.
pub(crate) type ContiguousFn = unsafe extern "C" fn(i64, i64, *const *const u8, *const *mut u8);
/// `kiln_kernel(begin, end, in, out, ndim, shape, strides)`.
pub(crate) type StridedFn =
    unsafe extern "C" fn(i64, i64, *const *const u8, *const *mut u8, i64, *const i64, *const i64);

/// A loaded kernel: the library stays alive as long as the function pointer may be called.
pub(crate) struct Kernel {
    _library: libloading::Library,
    pub(crate) entry: Entry,
    /// Time in the C compiler (0 when loaded from the disk cache).
    build_micros: u64,
    from_disk: bool,
    /// Runs and their total time (explain).
    runs: AtomicU64,
    run_nanos: AtomicU64,
}

impl Kernel {
    /// Records one run of `nanos` (explain's per-kernel run times).
    pub(crate) fn record_run(&self, nanos: u64) {
        self.runs.fetch_add(1, Ordering::Relaxed);
        self.run_nanos.fetch_add(nanos, Ordering::Relaxed);
    }
}

/// What one kernel did, for explain.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelInfo {
    /// The region's name (`Compiled_...`) and variant (`contiguous` / `strided`).
    pub name: String,
    pub variant: &'static str,
    /// `ready`, `building` or `failed`.
    pub state: &'static str,
    /// Milliseconds in the C compiler (0 for a disk-cache hit).
    pub build_ms: f64,
    pub from_disk: bool,
    pub runs: u64,
    pub run_ms: f64,
    /// The generated C (filled by [`kernels_for`]; empty in [`kernels`]).
    pub source: String,
}

/// Every kernel this process built, loaded or tried (explain).
pub fn kernels() -> Vec<KernelInfo> {
    kernels_where(|_| true, false)
}

/// The kernels built, loaded or tried for `program` (one per variant), with their C source
/// (the compile report).
pub fn kernels_for(program: &FusedProgram) -> Vec<KernelInfo> {
    kernels_where(|p| p == program, true)
}

fn kernels_where(wanted: impl Fn(&FusedProgram) -> bool, sources: bool) -> Vec<KernelInfo> {
    let slots = registry().slots.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = Vec::new();
    for (program, variants) in slots.iter().filter(|(p, _)| wanted(p)) {
        for (variant, slot) in variants {
            let source = if sources { c_kernel(program, variant) } else { String::new() };
            let variant = match variant {
                Variant::Contiguous(_) => "contiguous",
                Variant::Strided => "strided",
            };
            let mut info = KernelInfo {
                name: program.name(),
                variant,
                state: "building",
                build_ms: 0.0,
                from_disk: false,
                runs: 0,
                run_ms: 0.0,
                source,
            };
            match slot {
                Slot::Building => {}
                Slot::Failed(_) => info.state = "failed",
                Slot::Ready(k, _) => {
                    info.state = "ready";
                    info.build_ms = k.build_micros as f64 / 1e3;
                    info.from_disk = k.from_disk;
                    info.runs = k.runs.load(Ordering::Relaxed);
                    info.run_ms = k.run_nanos.load(Ordering::Relaxed) as f64 / 1e6;
                }
            }
            out.push(info);
        }
    }
    out.sort_by(|a, b| (&a.name, a.variant).cmp(&(&b.name, b.variant)));
    out
}

/// Whether `KILN_LOG` asks for compile's messages.
pub fn log_enabled() -> bool {
    std::env::var("KILN_LOG").is_ok_and(|v| v.contains("compile"))
}

pub(crate) enum Entry {
    Contiguous(ContiguousFn),
    Strided(StridedFn),
}

enum Slot {
    Building,
    /// Loaded, with the programs (compile graphs' `Arc`s) that use it.
    Ready(Arc<Kernel>, Vec<Weak<FusedProgram>>),
    /// The build failed (the message is kept for explain); the interpreter runs instead.
    Failed(String),
}

/// Records that `program` uses the kernel of `slot` (once per program allocation).
fn add_user(slot: &mut Slot, program: &Arc<FusedProgram>) {
    if let Slot::Ready(_, users) = slot {
        let p = Arc::as_ptr(program);
        if !users.iter().any(|w| w.as_ptr() == p) {
            users.push(Arc::downgrade(program));
        }
    }
}

/// Drops the kernels no live program uses (their libraries unload once no run holds them).
fn drop_unused(slots: &mut Slots) {
    for variants in slots.values_mut() {
        variants.retain(|_, slot| match slot {
            Slot::Ready(_, users) => {
                users.retain(|w| w.strong_count() > 0);
                !users.is_empty()
            }
            _ => true,
        });
    }
    slots.retain(|_, variants| !variants.is_empty());
}

/// Program, then variant: a lookup borrows both (no clone on the hot path).
type Slots = HashMap<FusedProgram, HashMap<Variant, Slot>>;

struct Registry {
    slots: Mutex<Slots>,
    /// Signalled when a background build finishes.
    done: Condvar,
}

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| Registry { slots: Mutex::new(HashMap::new()), done: Condvar::new() })
}

/// A slot's state, cheap to return from under the lock.
enum State {
    Building,
    Ready(Arc<Kernel>),
    Failed,
}

fn slot_state(slot: &Slot) -> State {
    match slot {
        Slot::Building => State::Building,
        Slot::Ready(k, _) => State::Ready(k.clone()),
        Slot::Failed(_) => State::Failed,
    }
}

/// Counters for explain and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JitStats {
    /// Kernels built by the C compiler in this process.
    pub builds: u64,
    /// Kernels loaded from the disk cache.
    pub disk_hits: u64,
    /// Builds that failed (the region ran in the interpreter).
    pub failures: u64,
    /// Total time spent in the C compiler, in microseconds.
    pub build_micros: u64,
}

static BUILDS: AtomicU64 = AtomicU64::new(0);
static DISK_HITS: AtomicU64 = AtomicU64::new(0);
static FAILURES: AtomicU64 = AtomicU64::new(0);
static BUILD_MICROS: AtomicU64 = AtomicU64::new(0);

pub fn stats() -> JitStats {
    JitStats {
        builds: BUILDS.load(Ordering::Relaxed),
        disk_hits: DISK_HITS.load(Ordering::Relaxed),
        failures: FAILURES.load(Ordering::Relaxed),
        build_micros: BUILD_MICROS.load(Ordering::Relaxed),
    }
}

/// When kernels build (`KILN_CPU_JIT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JitMode {
    Async,
    Sync,
    Off,
}

/// A mode set in code (tests, benchmarks) wins over the environment: 0 none, 1 async,
/// 2 sync, 3 off.
static MODE_OVERRIDE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Overrides `KILN_CPU_JIT` for this process (`None`: back to the environment).
pub fn set_mode(mode: Option<JitMode>) {
    let v = match mode {
        None => 0,
        Some(JitMode::Async) => 1,
        Some(JitMode::Sync) => 2,
        Some(JitMode::Off) => 3,
    };
    MODE_OVERRIDE.store(v, Ordering::Relaxed);
}

pub fn mode() -> JitMode {
    match MODE_OVERRIDE.load(Ordering::Relaxed) {
        1 => return JitMode::Async,
        2 => return JitMode::Sync,
        3 => return JitMode::Off,
        _ => {}
    }
    match std::env::var("KILN_CPU_JIT").as_deref() {
        Ok("sync") => JitMode::Sync,
        Ok("off") => JitMode::Off,
        _ => JitMode::Async,
    }
}

/// The kernel for `program` as `variant` if it is loaded; starts (async) or runs (sync) its
/// build otherwise. `None`: run the interpreter.
pub(crate) fn kernel(program: &Arc<FusedProgram>, variant: &Variant) -> Option<Arc<Kernel>> {
    let mode = mode();
    if mode == JitMode::Off {
        return None;
    }
    if let Some(k) = recent_kernel(program, variant) {
        return Some(k);
    }
    let reg = registry();
    {
        let mut slots = reg.slots.lock().unwrap_or_else(|e| e.into_inner());
        let get = |slots: &Slots| {
            slots.get(program.as_ref()).and_then(|v| v.get(variant)).map(slot_state)
        };
        match get(&slots) {
            Some(State::Ready(k)) => {
                if let Some(slot) = slots.get_mut(program.as_ref()).and_then(|v| v.get_mut(variant))
                {
                    add_user(slot, program);
                }
                remember_kernel(program, variant, &k);
                return Some(k);
            }
            Some(State::Failed) => return None,
            Some(State::Building) if mode == JitMode::Async => return None,
            Some(State::Building) => {
                // Another thread builds it: wait for that build.
                while matches!(get(&slots), Some(State::Building)) {
                    slots = reg.done.wait(slots).unwrap_or_else(|e| e.into_inner());
                }
                return match get(&slots) {
                    Some(State::Ready(k)) => Some(k),
                    _ => None,
                };
            }
            None => {
                slots
                    .entry(program.as_ref().clone())
                    .or_default()
                    .insert(variant.clone(), Slot::Building);
            }
        }
    }
    let key = (program.as_ref().clone(), variant.clone());
    let user = Arc::downgrade(program);
    let progress = kiln_base::build_progress::building(1);
    let build = move || {
        let _progress = progress;
        let slot = match build_and_load(&key.0, &key.1) {
            Ok(k) => {
                if log_enabled() {
                    let how = if k.from_disk {
                        "loaded from the disk cache".to_string()
                    } else {
                        format!("built in {:.1} ms", k.build_micros as f64 / 1e3)
                    };
                    eprintln!("[kiln compile] kernel {} ({:?}) {how}", key.0.name(), key.1);
                }
                Slot::Ready(Arc::new(k), vec![user])
            }
            Err(e) => {
                FAILURES.fetch_add(1, Ordering::Relaxed);
                if log_enabled() {
                    eprintln!("[kiln compile] kernel {} build failed: {e}", key.0.name());
                }
                Slot::Failed(e.to_string())
            }
        };
        let ready = match &slot {
            Slot::Ready(k, _) => Some(k.clone()),
            _ => None,
        };
        let mut slots = reg.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.entry(key.0).or_default().insert(key.1, slot);
        // Each new kernel is a moment to let go of those nothing can call any more.
        drop_unused(&mut slots);
        drop(slots);
        reg.done.notify_all();
        ready
    };
    match mode {
        JitMode::Sync => build(),
        _ => {
            std::thread::spawn(build);
            None
        }
    }
}

/// Kernels this thread used last, most recent first: a replay loop asks for the same few
/// again and again, and comparing programs beats hashing one under the registry's lock.
/// Held weakly, so remembering a kernel never keeps it loaded.
const RECENT: usize = 8;

type Recent = Vec<(FusedProgram, Variant, Weak<Kernel>)>;

thread_local! {
    static RECENT_KERNELS: std::cell::RefCell<Recent> = const { std::cell::RefCell::new(Vec::new()) };
}

fn recent_kernel(program: &FusedProgram, variant: &Variant) -> Option<Arc<Kernel>> {
    RECENT_KERNELS.with(|r| {
        r.borrow()
            .iter()
            .find(|(p, v, _)| v == variant && p == program)
            .and_then(|(_, _, k)| k.upgrade())
    })
}

fn remember_kernel(program: &FusedProgram, variant: &Variant, kernel: &Arc<Kernel>) {
    RECENT_KERNELS.with(|r| {
        let mut r = r.borrow_mut();
        r.truncate(RECENT - 1);
        r.insert(0, (program.clone(), variant.clone(), Arc::downgrade(kernel)));
    });
}

/// Blocks until no kernel is building (tests, benchmarks, explain).
pub fn wait_for_builds() {
    let reg = registry();
    let mut slots = reg.slots.lock().unwrap_or_else(|e| e.into_inner());
    while slots.values().flat_map(HashMap::values).any(|s| matches!(s, Slot::Building)) {
        slots = reg.done.wait(slots).unwrap_or_else(|e| e.into_inner());
    }
}

/// The build failures recorded so far (explain).
pub fn failures() -> Vec<String> {
    let slots = registry().slots.lock().unwrap_or_else(|e| e.into_inner());
    slots
        .values()
        .flat_map(HashMap::values)
        .filter_map(|s| match s {
            Slot::Failed(m) => Some(m.clone()),
            _ => None,
        })
        .collect()
}

fn build_and_load(program: &FusedProgram, variant: &Variant) -> Result<Kernel> {
    let stored = build_or_reuse("fused", &c_kernel(program, variant))?;
    let kernel = load(&stored.so_path, variant)?;
    match stored.build_micros {
        None => {
            DISK_HITS.fetch_add(1, Ordering::Relaxed);
            Ok(kernel)
        }
        Some(micros) => {
            BUILDS.fetch_add(1, Ordering::Relaxed);
            BUILD_MICROS.fetch_add(micros, Ordering::Relaxed);
            Ok(Kernel { build_micros: micros, from_disk: false, ..kernel })
        }
    }
}

fn load(path: &Path, variant: &Variant) -> Result<Kernel> {
    // SAFETY: the library is one kiln generated and built (its stored source matched); it
    // has no initialisers, and it stays loaded while its function pointer is reachable
    // (the `Kernel` owns both).
    let library = unsafe { libloading::Library::new(path) }
        .map_err(|e| runtime(format!("cannot load {}: {e}", path.display())))?;
    let name = KERNEL_SYMBOL.as_bytes();
    // SAFETY: `kiln_kernel` has exactly the C signature the variant's type spells
    // (kiln-codegen writes it from the same variant).
    let entry = unsafe {
        match variant {
            Variant::Contiguous(_) => {
                library.get::<ContiguousFn>(name).map(|f| Entry::Contiguous(*f))
            }
            Variant::Strided => library.get::<StridedFn>(name).map(|f| Entry::Strided(*f)),
        }
    }
    .map_err(|e| runtime(format!("kernel symbol missing in {}: {e}", path.display())))?;
    Ok(Kernel {
        _library: library,
        entry,
        build_micros: 0,
        from_disk: true,
        runs: AtomicU64::new(0),
        run_nanos: AtomicU64::new(0),
    })
}

/// Builds a complete C translation unit (user kernels: `mx.fast.c_kernel`) with the same
/// compiler, flags and on-disk cache as fused kernels, and loads it. A failed build is an
/// error carrying the compiler's message (with its line numbers).
pub fn build_source(source: &str) -> Result<libloading::Library> {
    let stored = build_or_reuse("c_kernel", source)?;
    match stored.build_micros {
        None => DISK_HITS.fetch_add(1, Ordering::Relaxed),
        Some(micros) => {
            BUILD_MICROS.fetch_add(micros, Ordering::Relaxed);
            BUILDS.fetch_add(1, Ordering::Relaxed)
        }
    };
    // SAFETY: the object was built by kiln from this very source (stored beside it and
    // compared, its bytes checked against the checksum taken when it was built); generated
    // and user sources are plain functions without initialisers.
    unsafe { libloading::Library::new(&stored.so_path) }
        .map_err(|e| runtime(format!("cannot load {}: {e}", stored.so_path.display())))
}
