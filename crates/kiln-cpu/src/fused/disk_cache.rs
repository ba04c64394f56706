//! The on-disk cache of built C kernels, shared by processes: each kernel is `<hash>.c` (its
//! source), `<hash>.so` (the object) and `<hash>.sum` (the object's length and checksum),
//! keyed by a hash of the source, the flags, the compiler and the CPU's features.
//!
//! An object is loaded only after its stored source equals the one wanted and its bytes
//! match the checksum recorded when it was built: a truncated object (which `dlopen` would
//! map past its end: SIGBUS), one swapped for another kernel's, or one rebuilt from edited C
//! is rebuilt instead. Builds write under unique temporary names and rename into place
//! (object and checksum first, the source last: it is what makes an entry visible). The
//! compiler gets `KILN_CC_TIMEOUT` seconds (default 60). Temporary files left by builds that
//! died are removed once older than any live build can be. The folder is trimmed to a size
//! limit, least recently used first.

use kiln_base::Result;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

/// Flags for every kernel besides `-march`: no undefined behaviour on overflow (`-fwrapv`),
/// no fused multiply-add contraction (results match the eager kernels: the math calls FMA
/// explicitly where they do), no errno (lets libm calls inline).
pub(crate) const FLAGS: &[&str] =
    &["-O3", "-std=gnu11", "-fwrapv", "-ffp-contract=off", "-fno-math-errno", "-fPIC", "-shared"];

/// Default seconds the C compiler may take for one kernel (`KILN_CC_TIMEOUT`).
pub const DEFAULT_CC_TIMEOUT_S: u64 = 60;

/// Default bound on the disk cache's size (`KILN_CACHE_LIMIT_MB` or [`set_disk_cache_limit`]
/// change it).
pub const DEFAULT_DISK_CACHE_LIMIT: u64 = 256 << 20;

/// A limit set in code (bytes + 1; 0: none set, the environment decides).
static DISK_LIMIT: AtomicU64 = AtomicU64::new(0);

/// An object ready to load.
pub(crate) struct Stored {
    pub(crate) so_path: PathBuf,
    /// Microseconds in the compiler; `None` when the object came from the cache.
    pub(crate) build_micros: Option<u64>,
}

pub(crate) fn runtime(msg: String) -> kiln_base::Error {
    kiln_base::Error::Runtime { op: "compile", msg }
}

/// The object built from `source`, from the cache when a verified one is there, else built
/// now (`tag` separates kinds of sources that could be equal text).
pub(crate) fn build_or_reuse(tag: &str, source: &str) -> Result<Stored> {
    let cc = compiler();
    let version = compiler_version(&cc)?;
    let march = march_flag()?;
    let hash = fnv1a(&[tag, source, &FLAGS.join(" "), &march, &version, &cpu_features()]);
    let dir = cache_dir();
    std::fs::create_dir_all(&dir)
        .map_err(|e| runtime(format!("cannot create the kernel cache {}: {e}", dir.display())))?;
    let stem = dir.join(format!("{hash:016x}"));
    let paths = Paths::of(&stem);
    if paths.verified(source) {
        // Recently used: the size limit evicts by modification time.
        let now = SystemTime::now();
        for p in [&paths.c, &paths.so, &paths.sum] {
            let _ = std::fs::File::options().write(true).open(p).and_then(|f| f.set_modified(now));
        }
        return Ok(Stored { so_path: paths.so, build_micros: None });
    }
    let unique = format!("{hash:016x}.{}.{:?}", std::process::id(), std::thread::current().id())
        .replace(|c: char| !c.is_ascii_alphanumeric() && c != '.', "");
    let tmp = Paths::of(&dir.join(format!("{unique}.tmp")));
    let started = Instant::now();
    let built = compile(&cc, source, &tmp).and_then(|()| tmp.commit(&paths));
    tmp.remove();
    built?;
    remove_stale_temporaries(&dir);
    trim_disk_cache(&dir);
    Ok(Stored { so_path: paths.so, build_micros: Some(started.elapsed().as_micros() as u64) })
}

/// The three files of one kernel.
struct Paths {
    c: PathBuf,
    so: PathBuf,
    sum: PathBuf,
}

impl Paths {
    fn of(stem: &Path) -> Paths {
        let with = |ext: &str| PathBuf::from(format!("{}.{ext}", stem.display()));
        Paths { c: with("c"), so: with("so"), sum: with("sum") }
    }

    /// Whether these files hold `source` and an intact object built from it.
    fn verified(&self, source: &str) -> bool {
        if !std::fs::read_to_string(&self.c).is_ok_and(|s| s == source) {
            return false;
        }
        let (Ok(sum), Ok(object)) = (std::fs::read_to_string(&self.sum), std::fs::read(&self.so))
        else {
            return false;
        };
        sum.trim() == checksum(&object)
    }

    /// Moves a finished build into place: object and checksum, then the source.
    fn commit(&self, to: &Paths) -> Result<()> {
        let object = std::fs::read(&self.so)
            .map_err(|e| runtime(format!("cannot read the built kernel: {e}")))?;
        std::fs::write(&self.sum, checksum(&object))
            .and_then(|_| std::fs::rename(&self.so, &to.so))
            .and_then(|_| std::fs::rename(&self.sum, &to.sum))
            .and_then(|_| std::fs::rename(&self.c, &to.c))
            .map_err(|e| runtime(format!("cannot store a kernel in the cache: {e}")))
    }

    fn remove(&self) {
        for p in [&self.c, &self.so, &self.sum] {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Length and FNV-1a hash of an object's bytes (corruption and mix-ups, not adversaries:
/// whoever can write the cache can write code that runs anyway).
fn checksum(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{} {h:016x}", bytes.len())
}

/// Runs the compiler on `tmp.c` (written here) into `tmp.so`, killing it past the timeout.
/// Its messages go to a file rather than a pipe, so a chatty compiler cannot block on a
/// full pipe while it is waited for.
fn compile(cc: &str, source: &str, tmp: &Paths) -> Result<()> {
    std::fs::write(&tmp.c, source).map_err(|e| runtime(format!("cannot write kernel: {e}")))?;
    let log_path = tmp.sum.with_extension("log");
    let log = std::fs::File::create(&log_path)
        .map_err(|e| runtime(format!("cannot write kernel: {e}")))?;
    let mut child = Command::new(cc)
        .args(FLAGS)
        .arg(march_flag()?)
        .arg("-o")
        .arg(&tmp.so)
        .arg(&tmp.c)
        .arg("-lm")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| runtime(format!("cannot run `{cc}`: {e}")))?;
    let limit = cc_timeout();
    let started = Instant::now();
    let mut pause = Duration::from_millis(1);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if started.elapsed() >= limit => {
                let _ = child.kill();
                let _ = child.wait();
                break Err(format!(
                    "`{cc}` did not finish building a fused kernel within {} s (KILN_CC_TIMEOUT); \
                     the region runs in the interpreter",
                    limit.as_secs_f64()
                ));
            }
            Ok(None) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Err(e) => break Err(format!("cannot wait for `{cc}`: {e}")),
        }
    };
    let messages = std::fs::read_to_string(&log_path).unwrap_or_default();
    let _ = std::fs::remove_file(&log_path);
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(_) => Err(runtime(format!("`{cc}` failed to build the kernel:\n{messages}"))),
        Err(msg) => Err(runtime(msg)),
    }
}

fn cc_timeout() -> Duration {
    let secs = std::env::var("KILN_CC_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(DEFAULT_CC_TIMEOUT_S as f64);
    Duration::from_secs_f64(secs)
}

/// Deletes `*.tmp.*` files older than any live build can be (twice the compiler timeout,
/// at least ten minutes): what a process that died mid-build left behind.
fn remove_stale_temporaries(dir: &Path) {
    let max_age = (cc_timeout() * 2).max(Duration::from_secs(600));
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.contains(".tmp.") {
            continue;
        }
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > max_age);
        if old {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

pub(crate) fn compiler() -> String {
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
    found.clone().map_err(runtime)
}

/// `-march=<KILN_CPU_MARCH>` (default `native`): the instruction set kernels are built for,
/// so an AVX2 build can be tried on any x86 machine (`KILN_CPU_MARCH=x86-64-v3`).
pub(crate) fn march_flag() -> Result<String> {
    let march = std::env::var("KILN_CPU_MARCH").ok().filter(|m| !m.is_empty());
    let march = march.as_deref().unwrap_or("native");
    if !march.chars().all(|c| c.is_ascii_alphanumeric() || "-_.+".contains(c)) {
        return Err(runtime(format!("KILN_CPU_MARCH={march:?} is not an -march value")));
    }
    Ok(format!("-march={march}"))
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
/// until the cache fits its limit. A kernel's files are removed together, the object first
/// (a source without its object and checksum never loads anything). Files of builds in
/// flight (`*.tmp.*`) and foreign files are left alone; errors are ignored (another process
/// may be trimming too).
pub fn trim_disk_cache(dir: &Path) {
    let limit = disk_cache_limit();
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    // stem -> (newest mtime, total bytes)
    let mut kernels: HashMap<String, (SystemTime, u64)> = HashMap::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((stem, ext)) = name.rsplit_once('.') else { continue };
        let ours = matches!(ext, "c" | "so" | "sum")
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
    let mut order: Vec<(SystemTime, String, u64)> =
        kernels.into_iter().map(|(k, (t, b))| (t, k, b)).collect();
    order.sort();
    for (_, stem, bytes) in order {
        if total <= limit {
            break;
        }
        let paths = Paths::of(&dir.join(stem));
        let _ = std::fs::remove_file(&paths.so);
        let _ = std::fs::remove_file(&paths.sum);
        let _ = std::fs::remove_file(&paths.c);
        total = total.saturating_sub(bytes);
    }
}
