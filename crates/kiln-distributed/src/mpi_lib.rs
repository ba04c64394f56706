//! OpenMPI's C library, loaded at run time (the wheel neither links nor needs it): the
//! functions kiln calls and the handles OpenMPI exports as global objects (`MPI_COMM_WORLD`
//! is `&ompi_mpi_comm_world`, `MPI_FLOAT` is `&ompi_mpi_float`, ...). Only OpenMPI's ABI is
//! known here, as for MLX's `mpi` backend; MPICH names its handles differently.

use kiln_base::{bail, Result};
use libloading::os::unix::{Library, Symbol, RTLD_GLOBAL, RTLD_NOW};
use std::ffi::{c_char, c_int, c_void};

pub type Handle = *mut c_void;
pub type UserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut Handle);

/// OpenMPI's `MPI_Status` (three public ints, then a count and a flag of its own).
#[repr(C)]
#[derive(Default)]
pub struct Status {
    pub source: c_int,
    pub tag: c_int,
    pub error: c_int,
    cancelled: c_int,
    ucount: usize,
}

pub const SUCCESS: c_int = 0;
pub const THREAD_SERIALIZED: c_int = 2;

/// The functions and handles, resolved once.
pub struct Mpi {
    _lib: Library,
    pub initialized: unsafe extern "C" fn(*mut c_int) -> c_int,
    pub finalized: unsafe extern "C" fn(*mut c_int) -> c_int,
    pub init_thread: unsafe extern "C" fn(*mut c_int, *mut c_void, c_int, *mut c_int) -> c_int,
    pub finalize: unsafe extern "C" fn() -> c_int,
    pub comm_rank: unsafe extern "C" fn(Handle, *mut c_int) -> c_int,
    pub comm_size: unsafe extern "C" fn(Handle, *mut c_int) -> c_int,
    pub comm_split: unsafe extern "C" fn(Handle, c_int, c_int, *mut Handle) -> c_int,
    pub comm_set_errhandler: unsafe extern "C" fn(Handle, Handle) -> c_int,
    pub allreduce:
        unsafe extern "C" fn(*const c_void, *mut c_void, c_int, Handle, Handle, Handle) -> c_int,
    pub iallreduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        c_int,
        Handle,
        Handle,
        Handle,
        *mut Handle,
    ) -> c_int,
    pub allgather: unsafe extern "C" fn(
        *const c_void,
        c_int,
        Handle,
        *mut c_void,
        c_int,
        Handle,
        Handle,
    ) -> c_int,
    pub reduce_scatter_block:
        unsafe extern "C" fn(*const c_void, *mut c_void, c_int, Handle, Handle, Handle) -> c_int,
    pub send: unsafe extern "C" fn(*const c_void, c_int, Handle, c_int, c_int, Handle) -> c_int,
    pub recv: unsafe extern "C" fn(
        *mut c_void,
        c_int,
        Handle,
        c_int,
        c_int,
        Handle,
        *mut Status,
    ) -> c_int,
    pub isend: unsafe extern "C" fn(
        *const c_void,
        c_int,
        Handle,
        c_int,
        c_int,
        Handle,
        *mut Handle,
    ) -> c_int,
    pub irecv: unsafe extern "C" fn(
        *mut c_void,
        c_int,
        Handle,
        c_int,
        c_int,
        Handle,
        *mut Handle,
    ) -> c_int,
    pub test: unsafe extern "C" fn(*mut Handle, *mut c_int, *mut Status) -> c_int,
    pub op_create: unsafe extern "C" fn(UserFn, c_int, *mut Handle) -> c_int,
    pub error_string: unsafe extern "C" fn(c_int, *mut c_char, *mut c_int) -> c_int,
    pub comm_world: Handle,
    pub errors_return: Handle,
    pub op_sum: Handle,
    pub op_max: Handle,
    pub op_min: Handle,
    pub op_lor: Handle,
    pub op_land: Handle,
    pub byte: Handle,
    pub bool_: Handle,
    pub int8: Handle,
    pub uint8: Handle,
    pub int16: Handle,
    pub uint16: Handle,
    pub int32: Handle,
    pub uint32: Handle,
    pub int64: Handle,
    pub uint64: Handle,
    pub float: Handle,
    pub double: Handle,
    pub complex64: Handle,
}

// SAFETY: the handles are addresses of OpenMPI's global objects and the functions are plain C
// entry points; kiln serialises every call on one group behind a mutex (mpi.rs), and asks for
// MPI_THREAD_SERIALIZED, under which calls from any thread, one at a time, are allowed.
unsafe impl Send for Mpi {}
// SAFETY: as for Send: nothing here is mutated after loading.
unsafe impl Sync for Mpi {}

/// Library names tried in order (`KILN_MPI_LIBRARY` first when set).
fn candidates() -> Vec<String> {
    let mut names: Vec<String> = std::env::var("KILN_MPI_LIBRARY").into_iter().collect();
    names.extend(["libmpi.so.40", "libmpi.so"].map(String::from));
    names
}

impl Mpi {
    pub fn load() -> Result<Mpi> {
        let mut tried = Vec::new();
        for name in candidates() {
            // RTLD_GLOBAL: OpenMPI's plugins, loaded by libmpi itself, resolve its symbols.
            // SAFETY: loading a shared library runs its initialisers; libmpi's only set up
            // its own state.
            match unsafe { Library::open(Some(&name), RTLD_NOW | RTLD_GLOBAL) } {
                Ok(lib) => return Mpi::resolve(lib),
                Err(e) => tried.push(format!("{name}: {e}")),
            }
        }
        bail!(
            Runtime,
            "distributed",
            "[mpi] OpenMPI's libmpi could not be loaded ({}); install OpenMPI (for example \
             `apt-get install openmpi-bin`) or set KILN_MPI_LIBRARY.",
            tried.join("; ")
        )
    }

    fn resolve(lib: Library) -> Result<Mpi> {
        fn f<T: Copy>(lib: &Library, name: &str) -> Result<T> {
            // SAFETY: each name is resolved into the C signature OpenMPI's mpi.h declares.
            let sym: std::result::Result<Symbol<T>, _> = unsafe { lib.get(name.as_bytes()) };
            match sym {
                Ok(s) => Ok(*s),
                Err(e) => bail!(
                    Runtime,
                    "distributed",
                    "[mpi] The MPI library lacks `{name}` ({e}); kiln needs OpenMPI."
                ),
            }
        }
        // A data symbol's address is the handle itself.
        let h = |name: &str| f::<Handle>(&lib, name);
        Ok(Mpi {
            initialized: f(&lib, "MPI_Initialized")?,
            finalized: f(&lib, "MPI_Finalized")?,
            init_thread: f(&lib, "MPI_Init_thread")?,
            finalize: f(&lib, "MPI_Finalize")?,
            comm_rank: f(&lib, "MPI_Comm_rank")?,
            comm_size: f(&lib, "MPI_Comm_size")?,
            comm_split: f(&lib, "MPI_Comm_split")?,
            comm_set_errhandler: f(&lib, "MPI_Comm_set_errhandler")?,
            allreduce: f(&lib, "MPI_Allreduce")?,
            iallreduce: f(&lib, "MPI_Iallreduce")?,
            allgather: f(&lib, "MPI_Allgather")?,
            reduce_scatter_block: f(&lib, "MPI_Reduce_scatter_block")?,
            send: f(&lib, "MPI_Send")?,
            recv: f(&lib, "MPI_Recv")?,
            isend: f(&lib, "MPI_Isend")?,
            irecv: f(&lib, "MPI_Irecv")?,
            test: f(&lib, "MPI_Test")?,
            op_create: f(&lib, "MPI_Op_create")?,
            error_string: f(&lib, "MPI_Error_string")?,
            comm_world: h("ompi_mpi_comm_world")?,
            errors_return: h("ompi_mpi_errors_return")?,
            op_sum: h("ompi_mpi_op_sum")?,
            op_max: h("ompi_mpi_op_max")?,
            op_min: h("ompi_mpi_op_min")?,
            op_lor: h("ompi_mpi_op_lor")?,
            op_land: h("ompi_mpi_op_land")?,
            byte: h("ompi_mpi_byte")?,
            bool_: h("ompi_mpi_c_bool")?,
            int8: h("ompi_mpi_int8_t")?,
            uint8: h("ompi_mpi_uint8_t")?,
            int16: h("ompi_mpi_int16_t")?,
            uint16: h("ompi_mpi_uint16_t")?,
            int32: h("ompi_mpi_int32_t")?,
            uint32: h("ompi_mpi_uint32_t")?,
            int64: h("ompi_mpi_int64_t")?,
            uint64: h("ompi_mpi_uint64_t")?,
            float: h("ompi_mpi_float")?,
            double: h("ompi_mpi_double")?,
            complex64: h("ompi_mpi_c_float_complex")?,
            _lib: lib,
        })
    }

    /// An MPI error code as text.
    pub fn describe(&self, code: c_int) -> String {
        let mut buf = vec![0 as c_char; 512];
        let mut len: c_int = 0;
        // SAFETY: MPI_MAX_ERROR_STRING is 256 in OpenMPI; the buffer holds twice that.
        unsafe { (self.error_string)(code, buf.as_mut_ptr(), &mut len) };
        let bytes: Vec<u8> = buf[..len.clamp(0, 511) as usize].iter().map(|&c| c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}
