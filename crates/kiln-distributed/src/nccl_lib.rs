//! NVIDIA's NCCL, loaded at run time (the wheel neither links nor needs it): the functions
//! kiln calls, by the C signatures of nccl.h. Not cudarc's NCCL module: its loader looks
//! for `libnccl.so` (never `libnccl.so.2`, the name NCCL's packages and pip wheels install)
//! and panics when it finds none, where kiln must report a missing backend as an error.

use kiln_base::{bail, Result};
use libloading::os::unix::{Library, Symbol, RTLD_GLOBAL, RTLD_NOW};
use std::ffi::{c_char, c_int, c_void, CStr};

pub type Comm = *mut c_void;
pub type Stream = *mut c_void;
/// `ncclResult_t`.
pub type Status = c_int;
pub const SUCCESS: Status = 0;
pub const IN_PROGRESS: Status = 7;

/// `ncclUniqueId`: the token every rank passes to `ncclCommInitRank`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    pub internal: [u8; 128],
}

/// `ncclDataType_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub enum DataType {
    Int8 = 0,
    Uint8 = 1,
    Int32 = 2,
    Uint32 = 3,
    Int64 = 4,
    Uint64 = 5,
    Float16 = 6,
    Float32 = 7,
    Float64 = 8,
    Bfloat16 = 9,
}

/// `ncclRedOp_t` (the built-in ones kiln uses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub enum RedOp {
    Sum = 0,
    Max = 2,
    Min = 3,
}

type Reduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    DataType,
    RedOp,
    Comm,
    Stream,
) -> Status;
type PointToPoint =
    unsafe extern "C" fn(*const c_void, usize, DataType, c_int, Comm, Stream) -> Status;

/// The functions, resolved once.
pub struct Nccl {
    _lib: Library,
    pub get_version: unsafe extern "C" fn(*mut c_int) -> Status,
    pub get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> Status,
    pub comm_init_rank: unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int) -> Status,
    /// `ncclCommSplit` (NCCL 2.18 and later), with a null config.
    pub comm_split:
        Option<unsafe extern "C" fn(Comm, c_int, c_int, *mut Comm, *mut c_void) -> Status>,
    pub comm_count: unsafe extern "C" fn(Comm, *mut c_int) -> Status,
    pub comm_user_rank: unsafe extern "C" fn(Comm, *mut c_int) -> Status,
    pub comm_abort: unsafe extern "C" fn(Comm) -> Status,
    pub comm_get_async_error: unsafe extern "C" fn(Comm, *mut Status) -> Status,
    pub get_error_string: unsafe extern "C" fn(Status) -> *const c_char,
    pub get_last_error: Option<unsafe extern "C" fn(Comm) -> *const c_char>,
    pub all_reduce: Reduce,
    pub all_gather:
        unsafe extern "C" fn(*const c_void, *mut c_void, usize, DataType, Comm, Stream) -> Status,
    pub reduce_scatter: Reduce,
    pub send: PointToPoint,
    /// `ncclRecv(void *recvbuff, ...)`: the same shape as send's signature.
    pub recv: unsafe extern "C" fn(*mut c_void, usize, DataType, c_int, Comm, Stream) -> Status,
}

// SAFETY: plain C entry points, resolved once and never changed; NCCL's functions may be
// called from any thread (kiln serialises the calls on one communicator, nccl.rs).
unsafe impl Send for Nccl {}
// SAFETY: as for Send.
unsafe impl Sync for Nccl {}

/// Library names tried in order (`KILN_NCCL_LIBRARY` first when set; kiln.core.distributed
/// sets it to the NCCL of an installed `nvidia-nccl` wheel, as torch ships).
fn candidates() -> Vec<String> {
    let mut names: Vec<String> = std::env::var("KILN_NCCL_LIBRARY").into_iter().collect();
    names.extend(["libnccl.so.2", "libnccl.so"].map(String::from));
    names
}

impl Nccl {
    pub fn load() -> Result<Nccl> {
        let mut tried = Vec::new();
        for name in candidates() {
            // SAFETY: loading a shared library runs its initialisers; NCCL's only set up its
            // own state.
            match unsafe { Library::open(Some(&name), RTLD_NOW | RTLD_GLOBAL) } {
                Ok(lib) => return Nccl::resolve(lib),
                Err(e) => tried.push(format!("{name}: {e}")),
            }
        }
        bail!(
            Runtime,
            "distributed",
            "[nccl] NCCL's libnccl could not be loaded ({}); install NCCL (for example `pip \
             install nvidia-nccl-cu12`) or set KILN_NCCL_LIBRARY.",
            tried.join("; ")
        )
    }

    fn resolve(lib: Library) -> Result<Nccl> {
        fn f<T: Copy>(lib: &Library, name: &str) -> Result<T> {
            // SAFETY: each name is resolved into the C signature nccl.h declares.
            let sym: std::result::Result<Symbol<T>, _> = unsafe { lib.get(name.as_bytes()) };
            match sym {
                Ok(s) => Ok(*s),
                Err(e) => bail!(Runtime, "distributed", "[nccl] libnccl lacks `{name}` ({e})."),
            }
        }
        Ok(Nccl {
            get_version: f(&lib, "ncclGetVersion")?,
            get_unique_id: f(&lib, "ncclGetUniqueId")?,
            comm_init_rank: f(&lib, "ncclCommInitRank")?,
            comm_split: f(&lib, "ncclCommSplit").ok(),
            comm_count: f(&lib, "ncclCommCount")?,
            comm_user_rank: f(&lib, "ncclCommUserRank")?,
            comm_abort: f(&lib, "ncclCommAbort")?,
            comm_get_async_error: f(&lib, "ncclCommGetAsyncError")?,
            get_error_string: f(&lib, "ncclGetErrorString")?,
            get_last_error: f(&lib, "ncclGetLastError").ok(),
            all_reduce: f(&lib, "ncclAllReduce")?,
            all_gather: f(&lib, "ncclAllGather")?,
            reduce_scatter: f(&lib, "ncclReduceScatter")?,
            send: f(&lib, "ncclSend")?,
            recv: f(&lib, "ncclRecv")?,
            _lib: lib,
        })
    }

    /// The library's version as "2.21.5".
    pub fn version(&self) -> String {
        let mut v: c_int = 0;
        // SAFETY: an out pointer to a local.
        unsafe { (self.get_version)(&mut v) };
        // NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9.
        format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100)
    }

    /// An NCCL status as text, with the library's last message about `comm` when it has one.
    pub fn describe(&self, status: Status, comm: Comm) -> String {
        // SAFETY: NCCL returns static, NUL-terminated strings (or null).
        let text = |p: *const c_char| unsafe {
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        // SAFETY: any status value is accepted.
        let mut s = text(unsafe { (self.get_error_string)(status) });
        if let Some(last) = self.get_last_error {
            // SAFETY: a null comm asks for the process's last error, which is allowed.
            let detail = text(unsafe { last(comm) });
            if !detail.is_empty() {
                s = format!("{s}: {detail}");
            }
        }
        s
    }
}
