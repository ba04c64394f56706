//! Building and loading generated C kernels: the system C compiler (`KILN_CC`, else `cc`)
//! builds a shared object, libloading loads it. Built objects are cached in memory for the
//! process and on disk across processes, keyed by a hash of the source, the flags, the
//! compiler's version and the CPU's features (code built with `-march=native` must never load
//! on another CPU). Files are written under temporary names and renamed into place, and the
//! source is stored beside the object and compared before loading, so a truncated, corrupt
//! or colliding file is rebuilt, never run.
//!
//! `KILN_CPU_JIT` picks when kernels build: `async` (default: in a background thread; the
//! interpreter runs the region meanwhile), `sync` (the first call waits), `off` (never).
//! Loaded libraries are never unloaded: a kernel may be running on another thread, and the
//! set of distinct kernels a process builds is small.

use kiln_base::{FusedProgram, Result};
use kiln_codegen::c::{c_kernel, Variant, KERNEL_SYMBOL};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Instant;

/// Flags for every kernel: no undefined behaviour on overflow (`-fwrapv`), no fused
/// multiply-add contraction (results match the eager kernels), no errno (lets libm calls
/// vectorise and inline).
const FLAGS: &[&str] = &[
    "-O3",
    "-march=native",
    "-std=gnu11",
    "-fwrapv",
    "-ffp-contract=off",
    "-fno-math-errno",
    "-fPIC",
    "-shared",
];

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
}

/// Every kernel this process built, loaded or tried (explain).
pub fn kernels() -> Vec<KernelInfo> {
    let slots = registry().slots.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = Vec::new();
    for (program, variants) in slots.iter() {
        for (variant, slot) in variants {
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
            };
            match slot {
                Slot::Building => {}
                Slot::Failed(_) => info.state = "failed",
                Slot::Ready(k) => {
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
    Ready(Arc<Kernel>),
    /// The build failed (the message is kept for explain); the interpreter runs instead.
    Failed(String),
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
        Slot::Ready(k) => State::Ready(k.clone()),
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
pub(crate) fn kernel(program: &FusedProgram, variant: &Variant) -> Option<Arc<Kernel>> {
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
        let get = |slots: &Slots| slots.get(program).and_then(|v| v.get(variant)).map(slot_state);
        match get(&slots) {
            Some(State::Ready(k)) => {
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
                slots.entry(program.clone()).or_default().insert(variant.clone(), Slot::Building);
            }
        }
    }
    let key = (program.clone(), variant.clone());
    let build = move || {
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
                Slot::Ready(Arc::new(k))
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
            Slot::Ready(k) => Some(k.clone()),
            _ => None,
        };
        reg.slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key.0)
            .or_default()
            .insert(key.1, slot);
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
/// Ready kernels never change or unload, so a remembered one stays valid.
const RECENT: usize = 8;

type Recent = Vec<(FusedProgram, Variant, Arc<Kernel>)>;

thread_local! {
    static RECENT_KERNELS: std::cell::RefCell<Recent> = const { std::cell::RefCell::new(Vec::new()) };
}

fn recent_kernel(program: &FusedProgram, variant: &Variant) -> Option<Arc<Kernel>> {
    RECENT_KERNELS.with(|r| {
        r.borrow().iter().find(|(p, v, _)| v == variant && p == program).map(|(_, _, k)| k.clone())
    })
}

fn remember_kernel(program: &FusedProgram, variant: &Variant, kernel: &Arc<Kernel>) {
    RECENT_KERNELS.with(|r| {
        let mut r = r.borrow_mut();
        r.truncate(RECENT - 1);
        r.insert(0, (program.clone(), variant.clone(), kernel.clone()));
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

fn compiler() -> String {
    std::env::var("KILN_CC").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "cc".into())
}

/// Who the compiler is, for the disk key: its resolved path (symlinks followed, so
/// `cc -> gcc-12` names gcc-12), size and modification time, which change whenever the
/// compiler is replaced or upgraded. Cheaper than running `cc --version` (a process start,
/// several milliseconds: too slow for a first call served from the disk cache). An error
/// when there is no such compiler. Probed once per compiler name.
fn compiler_version(cc: &str) -> Result<String> {
    static VERSIONS: OnceLock<Mutex<HashMap<String, std::result::Result<String, String>>>> =
        OnceLock::new();
    let versions = VERSIONS.get_or_init(|| Mutex::new(HashMap::new()));
    let mut versions = versions.lock().unwrap_or_else(|e| e.into_inner());
    let found = versions.entry(cc.to_string()).or_insert_with(|| {
        let candidates: Vec<PathBuf> = if cc.contains('/') {
            vec![PathBuf::from(cc)]
        } else {
            std::env::var_os("PATH")
                .map(|p| std::env::split_paths(&p).map(|d| d.join(cc)).collect())
                .unwrap_or_default()
        };
        for path in candidates {
            let Ok(real) = std::fs::canonicalize(&path) else { continue };
            let Ok(meta) = std::fs::metadata(&real) else { continue };
            if !meta.is_file() {
                continue;
            }
            let mtime = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            return Ok(format!("{} {} {mtime}", real.display(), meta.len()));
        }
        Err(format!("no C compiler `{cc}` (set KILN_CC or put `cc` on PATH)"))
    });
    found.clone().map_err(|msg| kiln_base::Error::Runtime { op: "compile", msg })
}

/// The CPU features `-march=native` may use, as far as they change generated code.
fn cpu_features() -> String {
    let mut s = String::new();
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! probe {
            ($($f:tt),*) => {$(
                if std::arch::is_x86_feature_detected!($f) {
                    s.push_str($f);
                    s.push(',');
                }
            )*};
        }
        probe!(
            "sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq"
        );
    }
    s.push_str(std::env::consts::ARCH);
    s
}

/// FNV-1a, 64 bits: a stable hash for file names (the stored source guards collisions).
fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in part.as_bytes().iter().chain(&[0xff]) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The on-disk cache folder: `KILN_CACHE_DIR`, else the user cache dir.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KILN_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("kiln").join("cpu-kernels")
}

fn runtime(msg: String) -> kiln_base::Error {
    kiln_base::Error::Runtime { op: "compile", msg }
}

fn build_and_load(program: &FusedProgram, variant: &Variant) -> Result<Kernel> {
    let source = c_kernel(program, variant);
    let cc = compiler();
    let version = compiler_version(&cc)?;
    let flags = FLAGS.join(" ");
    let hash = fnv1a(&[&source, &flags, &version, &cpu_features()]);
    let dir = cache_dir();
    std::fs::create_dir_all(&dir)
        .map_err(|e| runtime(format!("cannot create the kernel cache {}: {e}", dir.display())))?;
    let stem = dir.join(format!("{hash:016x}"));
    let (c_path, so_path) = (stem.with_extension("c"), stem.with_extension("so"));
    if std::fs::read_to_string(&c_path).is_ok_and(|s| s == source) {
        if let Ok(kernel) = load(&so_path, variant) {
            DISK_HITS.fetch_add(1, Ordering::Relaxed);
            // Recently used: the size limit evicts by modification time.
            let now = std::time::SystemTime::now();
            for p in [&c_path, &so_path] {
                let _ =
                    std::fs::File::options().write(true).open(p).and_then(|f| f.set_modified(now));
            }
            return Ok(kernel);
        }
    }
    // Build under unique names, then rename into place (atomic; racing processes agree).
    let unique = format!("{hash:016x}.{}.{:?}", std::process::id(), std::thread::current().id())
        .replace(|c: char| !c.is_ascii_alphanumeric() && c != '.', "");
    let tmp_c = dir.join(format!("{unique}.tmp.c"));
    let tmp_so = dir.join(format!("{unique}.tmp.so"));
    let started = Instant::now();
    std::fs::write(&tmp_c, &source).map_err(|e| runtime(format!("cannot write kernel: {e}")))?;
    let out = Command::new(&cc)
        .args(FLAGS)
        .arg("-o")
        .arg(&tmp_so)
        .arg(&tmp_c)
        .arg("-lm")
        .output()
        .map_err(|e| runtime(format!("cannot run `{cc}`: {e}")))?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&tmp_c);
        let _ = std::fs::remove_file(&tmp_so);
        return Err(runtime(format!(
            "`{cc}` failed to build a fused kernel: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let build_micros = started.elapsed().as_micros() as u64;
    BUILDS.fetch_add(1, Ordering::Relaxed);
    BUILD_MICROS.fetch_add(build_micros, Ordering::Relaxed);
    let renamed = std::fs::rename(&tmp_so, &so_path).and_then(|_| std::fs::rename(&tmp_c, &c_path));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&tmp_c);
        let _ = std::fs::remove_file(&tmp_so);
        return Err(runtime(format!("cannot store a kernel in {}", dir.display())));
    }
    let kernel = load(&so_path, variant)?;
    trim_disk_cache(&dir);
    Ok(Kernel { build_micros, from_disk: false, ..kernel })
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

/// Default bound on the disk cache's size (`KILN_CACHE_LIMIT_MB` or [`set_disk_cache_limit`]
/// change it).
pub const DEFAULT_DISK_CACHE_LIMIT: u64 = 256 << 20;

/// A limit set in code (bytes + 1; 0: none set, the environment decides).
static DISK_LIMIT: AtomicU64 = AtomicU64::new(0);

/// Sets the disk cache's size limit in bytes (`None`: back to `KILN_CACHE_LIMIT_MB`, else
/// the default). Applied after each kernel is stored.
pub fn set_disk_cache_limit(bytes: Option<u64>) {
    DISK_LIMIT.store(bytes.map_or(0, |b| b.saturating_add(1)), Ordering::Relaxed);
}

/// The disk cache's size limit in bytes.
pub fn disk_cache_limit() -> u64 {
    match DISK_LIMIT.load(Ordering::Relaxed) {
        0 => std::env::var("KILN_CACHE_LIMIT_MB")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(DEFAULT_DISK_CACHE_LIMIT, |mb| mb.saturating_mul(1 << 20)),
        b => b - 1,
    }
}

/// Deletes the least recently used kernels (by modification time; a disk hit refreshes it)
/// until the cache fits its limit. A kernel is its `.c` and `.so` pair, removed together
/// (the `.so` first: a lone `.c` never loads anything). Files of builds in flight
/// (`*.tmp.*`) and foreign files are left alone; errors are ignored (another process may
/// be trimming too).
pub fn trim_disk_cache(dir: &Path) {
    let limit = disk_cache_limit();
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    // stem -> (newest mtime, total bytes)
    let mut kernels: HashMap<String, (std::time::SystemTime, u64)> = HashMap::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((stem, ext)) = name.rsplit_once('.') else { continue };
        let ours = (ext == "c" || ext == "so")
            && stem.len() == 16
            && stem.bytes().all(|b| b.is_ascii_hexdigit());
        let Ok(meta) = entry.metadata() else { continue };
        if !ours || !meta.is_file() {
            continue;
        }
        let mtime = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
        let e = kernels.entry(stem.to_string()).or_insert((mtime, 0));
        e.0 = e.0.max(mtime);
        e.1 += meta.len();
    }
    let mut total: u64 = kernels.values().map(|e| e.1).sum();
    if total <= limit {
        return;
    }
    let mut order: Vec<(std::time::SystemTime, String, u64)> =
        kernels.into_iter().map(|(k, (t, b))| (t, k, b)).collect();
    order.sort();
    for (_, stem, bytes) in order {
        if total <= limit {
            break;
        }
        let stem = dir.join(stem);
        let _ = std::fs::remove_file(stem.with_extension("so"));
        let _ = std::fs::remove_file(stem.with_extension("c"));
        total = total.saturating_sub(bytes);
    }
}

/// Builds a complete C translation unit (user kernels: `mx.fast.c_kernel`) with the same
/// compiler, flags and on-disk cache as fused kernels, and loads it. A failed build is an
/// error carrying the compiler's message (with its line numbers).
pub fn build_source(source: &str) -> Result<libloading::Library> {
    let cc = compiler();
    let version = compiler_version(&cc)?;
    let flags = FLAGS.join(" ");
    let hash = fnv1a(&["c_kernel", source, &flags, &version, &cpu_features()]);
    let dir = cache_dir();
    std::fs::create_dir_all(&dir)
        .map_err(|e| runtime(format!("cannot create the kernel cache {}: {e}", dir.display())))?;
    let stem = dir.join(format!("{hash:016x}"));
    let (c_path, so_path) = (stem.with_extension("c"), stem.with_extension("so"));
    if std::fs::read_to_string(&c_path).is_ok_and(|s| s == source) {
        // SAFETY: the object was built by kiln from this very source (the stored copy
        // matched); generated sources define no initialisers.
        if let Ok(lib) = unsafe { libloading::Library::new(&so_path) } {
            DISK_HITS.fetch_add(1, Ordering::Relaxed);
            return Ok(lib);
        }
    }
    let unique = format!("{hash:016x}.{}.{:?}", std::process::id(), std::thread::current().id())
        .replace(|c: char| !c.is_ascii_alphanumeric() && c != '.', "");
    let (tmp_c, tmp_so) =
        (dir.join(format!("{unique}.tmp.c")), dir.join(format!("{unique}.tmp.so")));
    let started = Instant::now();
    std::fs::write(&tmp_c, source).map_err(|e| runtime(format!("cannot write kernel: {e}")))?;
    let out = Command::new(&cc)
        .args(FLAGS)
        .arg("-o")
        .arg(&tmp_so)
        .arg(&tmp_c)
        .arg("-lm")
        .output()
        .map_err(|e| runtime(format!("cannot run `{cc}`: {e}")));
    let out = match out {
        Ok(o) if o.status.success() => o,
        other => {
            let _ = std::fs::remove_file(&tmp_c);
            let _ = std::fs::remove_file(&tmp_so);
            let o = other?;
            return Err(runtime(format!(
                "`{cc}` failed to build the kernel:\n{}",
                String::from_utf8_lossy(&o.stderr)
            )));
        }
    };
    drop(out);
    BUILDS.fetch_add(1, Ordering::Relaxed);
    BUILD_MICROS.fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    let renamed = std::fs::rename(&tmp_so, &so_path).and_then(|_| std::fs::rename(&tmp_c, &c_path));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&tmp_c);
        let _ = std::fs::remove_file(&tmp_so);
        return Err(runtime(format!("cannot store a kernel in {}", dir.display())));
    }
    // SAFETY: the object was just built from `source`, which defines no initialisers.
    unsafe { libloading::Library::new(&so_path) }
        .map_err(|e| runtime(format!("cannot load {}: {e}", so_path.display())))
}
