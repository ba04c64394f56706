//! MPI reductions for float16 and bfloat16, which MPI has no types for: user operations
//! over 16-bit words that widen to float32, combine, and round back (as kiln's CPU kernels
//! round half-float arithmetic).

use crate::mpi_lib::{Handle, Mpi, UserFn, SUCCESS};
use half::{bf16, f16};
use kiln_base::distributed::Reduction;
use kiln_base::{ensure, DType, Result};
use std::ffi::{c_int, c_void};

/// The six operations, created once per process.
pub struct HalfOps {
    ops: [Handle; 6],
}

// SAFETY: MPI operation handles are immutable once created, used only under mpi.rs's lock.
unsafe impl Send for HalfOps {}
// SAFETY: as for Send.
unsafe impl Sync for HalfOps {}

impl HalfOps {
    pub fn op(&self, dtype: DType, r: Reduction) -> Handle {
        let base = if dtype == DType::BF16 { 3 } else { 0 };
        self.ops[base + r as usize]
    }
}

fn combine(r: Reduction, a: f32, b: f32) -> f32 {
    match r {
        Reduction::Sum => a + b,
        // NaN wins, as kiln's max and min reductions.
        Reduction::Max if a.is_nan() || a > b => a,
        Reduction::Min if a.is_nan() || a < b => a,
        _ => b,
    }
}

/// `inout[i] = combine(in[i], inout[i])` over `len` 16-bit words.
///
/// # Safety
/// MPI passes two buffers of `*len` 16-bit elements (the datatype is MPI_UINT16_T).
unsafe fn apply(r: Reduction, bf: bool, input: *mut c_void, inout: *mut c_void, len: *mut c_int) {
    // SAFETY: see the function's contract.
    let n = unsafe { *len }.max(0) as usize;
    // SAFETY: as above; MPI's buffers are distinct and aligned for their datatype.
    let (a, b) = unsafe {
        (
            std::slice::from_raw_parts(input as *const u16, n),
            std::slice::from_raw_parts_mut(inout as *mut u16, n),
        )
    };
    for (x, y) in a.iter().zip(b.iter_mut()) {
        *y = if bf {
            bf16::from_f32(combine(r, bf16::from_bits(*x).to_f32(), bf16::from_bits(*y).to_f32()))
                .to_bits()
        } else {
            f16::from_f32(combine(r, f16::from_bits(*x).to_f32(), f16::from_bits(*y).to_f32()))
                .to_bits()
        };
    }
}

macro_rules! user_fn {
    ($name:ident, $r:expr, $bf:expr) => {
        /// # Safety
        /// Called by MPI with the arguments of an MPI_User_function.
        unsafe extern "C" fn $name(a: *mut c_void, b: *mut c_void, n: *mut c_int, _t: *mut Handle) {
            // SAFETY: forwarded from MPI, see `apply`.
            unsafe { apply($r, $bf, a, b, n) }
        }
    };
}

user_fn!(f16_sum, Reduction::Sum, false);
user_fn!(f16_max, Reduction::Max, false);
user_fn!(f16_min, Reduction::Min, false);
user_fn!(bf16_sum, Reduction::Sum, true);
user_fn!(bf16_max, Reduction::Max, true);
user_fn!(bf16_min, Reduction::Min, true);

pub fn create(mpi: &Mpi) -> Result<HalfOps> {
    let fns: [UserFn; 6] = [f16_sum, f16_max, f16_min, bf16_sum, bf16_max, bf16_min];
    let mut ops = [std::ptr::null_mut(); 6];
    for (f, op) in fns.into_iter().zip(ops.iter_mut()) {
        // SAFETY: a valid user function; commutative (1), as every reduction here is.
        let code = unsafe { (mpi.op_create)(f, 1, op) };
        ensure!(
            code == SUCCESS,
            Runtime,
            "distributed",
            "[mpi] MPI_Op_create failed: {}",
            mpi.describe(code)
        );
    }
    Ok(HalfOps { ops })
}
