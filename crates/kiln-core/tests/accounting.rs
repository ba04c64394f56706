//! Tests that read process-wide counters (allocator bytes, calls run). They live in their own
//! test binary and take a lock, so no other test moves the counters underneath them.

mod common;

use kiln_base::buffer::HOST;
use kiln_core::{ops, Array, DType};
use std::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn eval_frees_intermediates() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let n = 1 << 16; // 256 KiB per f32 array
    let x = ops::arange(0.0, n as f64, 1.0, DType::F32).unwrap();
    kiln_core::eval(std::slice::from_ref(&x)).unwrap();
    let mut y = x.clone();
    for _ in 0..50 {
        y = ops::exp(&ops::negative(&y).unwrap()).unwrap();
    }
    let before = HOST.counters.active();
    HOST.counters.reset_peak();
    kiln_core::eval(std::slice::from_ref(&y)).unwrap();
    let bytes = n * 4;
    // Only the output stays, and at most a few intermediates ever lived at once.
    assert_eq!(HOST.counters.active(), before + bytes);
    assert!(HOST.counters.peak() <= before + 3 * bytes, "peak {}", HOST.counters.peak() - before);
    drop(y);
    assert_eq!(HOST.counters.active(), before);
}

#[test]
fn shared_subgraph_runs_once() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let a = Array::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
    let shared = ops::exp(&a).unwrap();
    let l = ops::add(&shared, &shared).unwrap();
    let r = ops::multiply(&shared, &shared).unwrap();
    let out = ops::subtract(&l, &r).unwrap();
    let before = kiln_core::eval::calls_run();
    kiln_core::eval(&[out.clone(), l.clone()]).unwrap();
    // exp, add, multiply, subtract: exp runs once although three paths reach it.
    assert_eq!(kiln_core::eval::calls_run() - before, 4);
    let e = [1f32.exp(), 2f32.exp()];
    let want: Vec<f32> = e.iter().map(|v| v + v - v * v).collect();
    assert_eq!(out.to_vec::<f32>().unwrap(), want);
}

#[test]
fn steady_loop_reuses_cached_blocks() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let x = ops::arange(0.0, 4096.0, 1.0, DType::F32).unwrap();
    kiln_core::eval(std::slice::from_ref(&x)).unwrap();
    let step = || {
        let y = ops::exp(&ops::multiply(&x, &x).unwrap()).unwrap();
        ops::sum(&y, None, false).unwrap().item::<f32>().unwrap()
    };
    step();
    let (active, cached) = (HOST.counters.active(), HOST.cache_memory());
    for _ in 0..10 {
        step();
        // Every block the step needs comes from the cache and goes back to it.
        assert_eq!((HOST.counters.active(), HOST.cache_memory()), (active, cached));
    }
    HOST.clear_cache();
    assert_eq!(HOST.cache_memory(), 0);
}
