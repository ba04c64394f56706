//! A steady loop reuses cached buffers: after warm-up, no iteration takes a new block from
//! the system (so no page faults either) and the live bytes return to where they were. Its own
//! test binary: the counters are process-wide.

mod common;

use kiln_base::buffer::HOST;
use kiln_core::{ops, Array, DType, Scalar};

fn step(x: &Array, w: &Array) -> Array {
    // An MLP-like step: elementwise chain, a matmul, a softmax, a reduction.
    let h = ops::maximum(
        &ops::matmul(x, w).unwrap(),
        &ops::scalar(Scalar::Float(0.0), DType::F32).unwrap(),
    )
    .unwrap();
    let s = ops::softmax(&ops::tanh(&h).unwrap(), Some(&[-1]), false).unwrap();
    ops::sum(&ops::multiply(&s, &ops::exp(&h).unwrap()).unwrap(), Some(&[0]), false).unwrap()
}

#[test]
fn steady_loop_allocates_nothing_new() {
    let x = ops::reshape(&ops::arange(0.0, 1.0, 1.0 / 65536.0, DType::F32).unwrap(), &[256, 256])
        .unwrap();
    let w = ops::transpose(&x, None).unwrap();
    kiln_core::eval(&[x.clone(), w.clone()]).unwrap();
    for _ in 0..3 {
        kiln_core::eval(&[step(&x, &w)]).unwrap(); // warm-up fills the cache
    }
    let (fresh, active) = (HOST.fresh_blocks(), HOST.counters.active());
    for _ in 0..20 {
        let y = step(&x, &w);
        kiln_core::eval(std::slice::from_ref(&y)).unwrap();
        drop(y);
    }
    assert_eq!(HOST.fresh_blocks(), fresh, "a steady iteration took new memory from the system");
    assert_eq!(HOST.counters.active(), active);
    assert!(HOST.cache_memory() > 0);
}
