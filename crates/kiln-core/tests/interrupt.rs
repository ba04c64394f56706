//! A Ctrl-C request (kiln_base::interrupt::request, what kiln-python's SIGINT handler
//! calls) stops evaluations that would run for hours, inside their kernels, and leaves the
//! interrupted arrays pending: evaluated again they run again. One test function: the
//! request is process-wide, so the scenarios must not run concurrently.

mod common;

use kiln_base::{interrupt, Error};
use kiln_core::{eval, ops, Array, DType};
use std::time::{Duration, Instant};

/// Evaluates `x` with a request arriving after 200 ms; returns how long after the request
/// the evaluation returned.
fn interrupted_after_request(x: &Array) -> Duration {
    let requester = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(200));
        let at = Instant::now();
        interrupt::request();
        at
    });
    let result = eval(std::slice::from_ref(x));
    let returned = Instant::now();
    let requested = requester.join().unwrap();
    assert!(matches!(result, Err(Error::Interrupted { .. })), "{result:?}");
    returned.saturating_duration_since(requested)
}

#[test]
fn long_evaluations_stop_on_request() {
    let huge = ops::zeros(&[1 << 40], DType::F32).unwrap();
    let sum = ops::sum(&huge, None, false).unwrap();
    let rows =
        ops::sum(&ops::ones(&[1 << 22, 1 << 18], DType::F32).unwrap(), Some(&[0]), false).unwrap();
    // A dense operand (a broadcast one would first be copied whole): 5.5e11 multiply-adds.
    let square = ops::random::uniform(0.0, 1.0, &[8192, 8192], DType::F32, None).unwrap();
    eval(std::slice::from_ref(&square)).unwrap();
    let product = ops::matmul(&square, &square).unwrap();
    let arg = ops::argmax(&huge, None, false).unwrap();
    for (name, x) in [("sum", &sum), ("rows", &rows), ("matmul", &product), ("argmax", &arg)] {
        let late = interrupted_after_request(x);
        assert!(late < Duration::from_secs(1), "{name}: returned {late:?} after the request");
        assert!(!x.is_evaluated(), "{name}: an interrupted array holds no data");
    }
    // Pending, not failed: interrupted again, and a request ends with its evaluation.
    assert!(interrupted_after_request(&sum) < Duration::from_secs(1));
    assert!(!interrupt::requested());
    let small = ops::sum(&ops::ones(&[1000], DType::F32).unwrap(), None, false).unwrap();
    assert_eq!(small.item::<f32>().unwrap(), 1000.0);
    // A request outside any evaluation is ignored.
    interrupt::request();
    let again = ops::sum(&ops::ones(&[10], DType::F32).unwrap(), None, false).unwrap();
    assert_eq!(again.item::<f32>().unwrap(), 10.0);

    // Injected into one kernel: what ran before it keeps its data, the rest runs again.
    let x = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    let e = ops::exp(&x).unwrap();
    let s = ops::sum(&e, Some(&[1]), false).unwrap();
    kiln_core::eval::inject_interrupt(Some("sum"));
    let first = eval(std::slice::from_ref(&s));
    assert!(matches!(first, Err(Error::Interrupted { op: "sum" })), "{first:?}");
    assert!(e.is_evaluated() && !s.is_evaluated());
    let want: Vec<f32> = vec![1f32.exp() + 2f32.exp(), 3f32.exp() + 4f32.exp()];
    assert_eq!(s.to_vec::<f32>().unwrap(), want);
}
