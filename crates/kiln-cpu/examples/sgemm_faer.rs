//! faer's own sgemm speed, the reference for kiln's matmul (bench/harness.py's `faer` rows):
//! row-major float32 `n x n` products on the rayon pool, as kiln-cpu calls faer.
//!
//!     cargo run --release --example sgemm_faer -p kiln-cpu -- [reps] [n ...]
//!
//! Prints one line per size: `n median_seconds`.

use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};
use std::time::Instant;

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let reps = args.first().copied().unwrap_or(3).max(1);
    let sizes = if args.len() > 1 { args[1..].to_vec() } else { vec![1024, 4096] };
    for n in sizes {
        // Deterministic values in [-1, 1).
        let a: Vec<f32> = (0..n * n).map(|i| ((i * 7919 % 2001) as f32 / 1000.0) - 1.0).collect();
        let b: Vec<f32> =
            (0..n * n).map(|i| ((i * 104_729 % 2003) as f32 / 1000.0) - 1.0).collect();
        let mut c = vec![0f32; n * n];
        let mut times = Vec::new();
        for rep in 0..=reps {
            let t = Instant::now();
            let lhs = MatRef::from_row_major_slice(&a, n, n);
            let rhs = MatRef::from_row_major_slice(&b, n, n);
            let dst = MatMut::from_row_major_slice_mut(&mut c, n, n);
            matmul(dst, Accum::Replace, lhs, rhs, 1.0, Par::rayon(0));
            if rep > 0 {
                times.push(t.elapsed().as_secs_f64()); // the first run is warm-up
            }
        }
        times.sort_by(f64::total_cmp);
        println!("{n} {}", times[times.len() / 2]);
    }
}
