//! Test helpers: build host arrays and views, evaluate one primitive, read results back.
#![allow(dead_code)]

use bytemuck::Pod;
use kiln_base::{ArrayData, Backend, DType, Layout, Primitive, Result, Shape, HOST};
use kiln_cpu::CpuBackend;

/// A contiguous array holding `data` (bool data is given as u8 0/1).
pub fn arr<T: Pod>(data: &[T], shape: &[usize], dtype: DType) -> ArrayData {
    assert_eq!(data.len(), shape.iter().product::<usize>());
    assert_eq!(std::mem::size_of::<T>(), dtype.size());
    ArrayData { buffer: HOST.from_slice(data).unwrap(), layout: Layout::contiguous(shape), dtype }
}

pub fn f32s(data: &[f32], shape: &[usize]) -> ArrayData {
    arr(data, shape, DType::F32)
}

/// The same buffer under another layout.
pub fn with_layout(x: &ArrayData, layout: Layout) -> ArrayData {
    ArrayData { buffer: x.buffer.clone(), layout, dtype: x.dtype }
}

/// Evaluates `prim`, asking for the output the primitive's own shape rule gives.
pub fn try_eval(prim: &Primitive, inputs: &[ArrayData]) -> Result<ArrayData> {
    let specs: Vec<(&[usize], DType)> =
        inputs.iter().map(|x| (x.layout.shape.as_slice(), x.dtype)).collect();
    let outs: Vec<(Shape, DType)> = prim.output_shapes(&specs)?;
    let mut res = CpuBackend.eval(prim, inputs, &outs)?;
    assert_eq!(res.len(), 1);
    let out = res.pop().unwrap();
    assert_eq!(out.layout.shape, outs[0].0);
    assert_eq!(out.dtype, outs[0].1);
    Ok(out)
}

pub fn eval(prim: &Primitive, inputs: &[ArrayData]) -> ArrayData {
    try_eval(prim, inputs).unwrap()
}

/// Elements in row-major order, whatever the layout.
pub fn read<T: Pod>(x: &ArrayData) -> Vec<T> {
    assert_eq!(std::mem::size_of::<T>(), x.dtype.size());
    let src = x.buffer.host_slice::<T>();
    x.layout.indices().map(|i| src[i]).collect()
}

/// Float equality that treats NaN as equal to NaN and compares signed zeros as equal.
pub fn same_f64(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

pub fn assert_close(got: &[f64], want: &[f64], rtol: f64) {
    assert_eq!(got.len(), want.len(), "length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = same_f64(g, w) || (g - w).abs() <= rtol * w.abs().max(1e-30);
        assert!(ok, "element {i}: got {g}, want {w}");
    }
}

pub fn shape(dims: &[usize]) -> Shape {
    Shape::from_slice(dims)
}

/// Evaluates a primitive with any number of outputs (each checked against its shape rule).
pub fn try_eval_all(prim: &Primitive, inputs: &[ArrayData]) -> Result<Vec<ArrayData>> {
    let specs: Vec<(&[usize], DType)> =
        inputs.iter().map(|x| (x.layout.shape.as_slice(), x.dtype)).collect();
    let outs: Vec<(Shape, DType)> = prim.output_shapes(&specs)?;
    let res = CpuBackend.eval(prim, inputs, &outs)?;
    assert_eq!(res.len(), outs.len());
    for (r, (s, d)) in res.iter().zip(&outs) {
        assert_eq!((&r.layout.shape, r.dtype), (s, *d));
    }
    Ok(res)
}
