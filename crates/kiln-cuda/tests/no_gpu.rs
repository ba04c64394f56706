//! kiln-cuda on any machine: probing never panics, and without a GPU every entry point gives
//! a typed error instead of touching CUDA. With a GPU (the device machine) the same tests
//! check the positive answers.

use kiln_base::{ArrayData, Backend, DType, Layout, Primitive, UnaryOp, HOST};
use kiln_cuda::alloc::DEVICE;

#[test]
fn probing_is_safe_and_consistent() {
    let available = kiln_cuda::is_available();
    assert_eq!(available, kiln_cuda::unavailable_reason().is_none());
    assert!(kiln_cuda::synchronize().is_ok());
}

#[test]
fn without_a_gpu_entry_points_fail_cleanly() {
    if kiln_cuda::is_available() {
        let buf = DEVICE.alloc(1000).expect("device memory");
        assert!(buf.nbytes() >= 1000);
        return;
    }
    let err = kiln_cuda::runtime::gpu().err().expect("no GPU here");
    assert!(err.to_string().contains("GPU is not available"), "{err}");
    assert!(DEVICE.alloc(16).is_err());
    let host = ArrayData {
        buffer: HOST.from_slice(&[1.0f32, 2.0]).unwrap(),
        layout: Layout::contiguous(&[2]),
        dtype: DType::F32,
    };
    assert!(kiln_cuda::transfer::upload(&host).is_err());
    let out = kiln_cuda::CudaBackend.eval(
        &Primitive::Unary(UnaryOp::Exp),
        &[host],
        &[([2].as_slice().into(), DType::F32)],
    );
    assert!(out.is_err());
}

#[test]
fn gpu_support_table() {
    let f32s = || [DType::F32, DType::F32].into_iter();
    assert!(kiln_cuda::supports(&Primitive::Matmul, f32s()));
    assert!(kiln_cuda::supports(&Primitive::Unary(UnaryOp::Erf), f32s()));
    // complex64: elementwise math is generated; ops the CPU rejects on complex stay there.
    assert!(kiln_cuda::supports(&Primitive::Unary(UnaryOp::Exp), [DType::C64].into_iter()));
    assert!(!kiln_cuda::supports(&Primitive::Unary(UnaryOp::Floor), [DType::C64].into_iter()));
    assert!(kiln_cuda::supports(&Primitive::Sort { axis: 0, arg: false }, f32s()));
    assert!(kiln_cuda::supports(&Primitive::SearchSorted { right: false }, f32s()));
    assert!(kiln_cuda::supports(&Primitive::MaskedScatter, f32s()));
    // complex64 sorts, products, arg reductions and scans have GPU kernels; the complex
    // log-add-exp scan and linalg stay on the CPU (which refuses or computes them).
    let c64 = || [DType::C64].into_iter();
    assert!(kiln_cuda::supports(&Primitive::Sort { axis: 0, arg: true }, c64()));
    assert!(kiln_cuda::supports(&Primitive::Matmul, [DType::C64, DType::C64].into_iter()));
    let arg = Primitive::ArgReduce { op: kiln_base::ArgReduceOp::ArgMin, axis: 0 };
    assert!(kiln_cuda::supports(&arg, c64()));
    let scan = |op| Primitive::Scan { op, axis: 0, reverse: true, inclusive: false };
    assert!(kiln_cuda::supports(&scan(kiln_base::ScanOp::Max), c64()));
    assert!(!kiln_cuda::supports(&scan(kiln_base::ScanOp::LogAddExp), c64()));
    let inv = Primitive::Linalg(kiln_base::LinalgOp::Inv);
    assert!(!kiln_cuda::supports(&inv, c64()));
}
