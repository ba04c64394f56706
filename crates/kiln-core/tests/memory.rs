//! Intermediates are freed as eval goes (own test binary: the allocator counters are global).

use kiln_base::buffer::HOST;
use kiln_core::{ops, DType};

#[test]
fn eval_frees_intermediates() {
    let n = 1 << 16; // 256 KiB per f32 array
    let x = ops::arange(0.0, n as f64, 1.0, DType::F32).unwrap();
    let mut y = x.clone();
    for _ in 0..50 {
        y = ops::exp(&ops::negative(&y).unwrap()).unwrap();
    }
    let before = HOST.counters.active();
    HOST.counters.reset_peak();
    kiln_core::eval(&[y.clone()]).unwrap();
    let bytes = n * 4;
    // Only the output stays, and at most a few intermediates ever lived at once.
    assert!(HOST.counters.active() <= before + bytes, "active grew by more than the output");
    assert!(HOST.counters.peak() <= before + 3 * bytes, "peak {}", HOST.counters.peak() - before);
    drop(y);
    assert!(HOST.counters.active() <= before);
}
