//! Gather, Scatter, SliceUpdate, MaskedScatter, View and AsStrided: index clamping and
//! dropping, negative indices, every index dtype, strided inputs, empty and 0-d cases.
mod common;

use common::*;
use half::f16;
use kiln_base::{ArrayData, DType, Layout, Primitive, ScatterReduce, Strides, HOST};

fn gather(axes: &[usize], sizes: &[usize]) -> Primitive {
    Primitive::Gather { axes: axes.to_vec(), slice_sizes: shape(sizes) }
}

fn scatter(axes: &[usize], reduce: ScatterReduce) -> Primitive {
    Primitive::Scatter { axes: axes.to_vec(), reduce }
}

#[test]
fn gather_rows_wraps_negatives_and_clamps() {
    let x = arr(&(0..12).collect::<Vec<i32>>(), &[3, 4], DType::I32);
    let idx = arr(&[2i64, -1, 7, -9], &[4], DType::I64);
    let out = eval(&gather(&[0], &[1, 4]), &[x.clone(), idx]);
    assert_eq!(out.layout.shape.as_slice(), &[4, 1, 4]);
    // -1 -> row 2; 7 clamps to row 2; -9 -> -6 clamps to row 0.
    let want: Vec<i32> =
        [2, 2, 2, 0].iter().flat_map(|&r| (0..4).map(move |c| r * 4 + c)).collect();
    assert_eq!(read::<i32>(&out), want);
    // A 2x2 block at (row, col) pairs; the start clamps so the block fits.
    let r = arr(&[0u8, 2], &[2], DType::U8);
    let c = arr(&[3i16, 1], &[2], DType::I16);
    let out = eval(&gather(&[0, 1], &[2, 2]), &[x, r, c]);
    assert_eq!(read::<i32>(&out), vec![2, 3, 6, 7, 5, 6, 9, 10]);
}

#[test]
fn gather_reads_views_and_every_index_dtype() {
    let base = arr(&(0..12).collect::<Vec<i32>>(), &[3, 4], DType::I32);
    // The transposed, column-reversed view: (4, 3) with negative strides.
    let l = Layout::new(shape(&[4, 3]), Strides::from_slice(&[-1, 4]), 3);
    let v = with_layout(&base, l);
    for dtype in [DType::I8, DType::U8, DType::I16, DType::U16, DType::I32, DType::U32] {
        let bytes: Vec<u8> = match dtype.size() {
            1 => vec![1],
            2 => 1u16.to_le_bytes().to_vec(),
            _ => 1u32.to_le_bytes().to_vec(),
        };
        let buffer = HOST.from_slice(&bytes).unwrap();
        let idx = ArrayData { buffer, layout: Layout::contiguous(&[1]), dtype };
        let out = eval(&gather(&[0], &[1, 3]), &[v.clone(), idx]);
        assert_eq!(read::<i32>(&out), vec![2, 6, 10], "{dtype}");
    }
    // u64 past i64::MAX saturates (and clamps), i64::MIN wraps once and clamps to 0.
    let idx = arr(&[u64::MAX], &[1], DType::U64);
    assert_eq!(read::<i32>(&eval(&gather(&[0], &[1, 3]), &[v.clone(), idx])), vec![0, 4, 8]);
    let idx = arr(&[i64::MIN], &[1], DType::I64);
    assert_eq!(read::<i32>(&eval(&gather(&[0], &[1, 3]), &[v.clone(), idx])), vec![3, 7, 11]);
    // Broadcast (stride-0) index arrays.
    let one = arr(&[2i32], &[1], DType::I32);
    let idx = with_layout(&one, Layout::new(shape(&[2, 2]), Strides::from_slice(&[0, 0]), 0));
    let out = eval(&gather(&[1], &[1, 1]), &[v, idx]);
    assert_eq!(out.layout.shape.as_slice(), &[2, 2, 1, 1]);
    assert_eq!(read::<i32>(&out), vec![11, 11, 11, 11]);
}

#[test]
fn gather_empty_and_checks() {
    let x = arr(&[1.0f32, 2.0], &[2], DType::F32);
    let idx = arr::<i32>(&[], &[0], DType::I32);
    let out = eval(&gather(&[0], &[1]), &[x.clone(), idx]);
    assert_eq!(out.layout.shape.as_slice(), &[0, 1]);
    // Zero-size slices on an empty axis.
    let e = arr::<f32>(&[], &[0, 3], DType::F32);
    let idx = arr(&[5i32], &[1], DType::I32);
    let out = eval(&gather(&[0], &[0, 3]), &[e, idx]);
    assert_eq!(out.layout.shape.as_slice(), &[1, 0, 3]);
    // No index arrays: a block at the origin.
    let out = eval(&gather(&[], &[1]), std::slice::from_ref(&x));
    assert_eq!(read::<f32>(&out), vec![1.0]);
    // Float or bool indices, blocks larger than the input, mismatched index shapes.
    let f = f32s(&[0.0], &[1]);
    assert!(try_eval(&gather(&[0], &[1]), &[x.clone(), f]).is_err());
    let b = arr(&[1u8], &[1], DType::Bool);
    assert!(try_eval(&gather(&[0], &[1]), &[x.clone(), b]).is_err());
    let i = arr(&[0i32], &[1], DType::I32);
    assert!(try_eval(&gather(&[0], &[3]), &[x.clone(), i.clone()]).is_err());
    let y = arr(&[0i32; 4], &[2, 2], DType::I32);
    let j = arr(&[0i32, 1], &[2], DType::I32);
    assert!(try_eval(&gather(&[0, 1], &[1, 1]), &[y.clone(), i, j]).is_err());
    let k = arr(&[0i32], &[1], DType::I32);
    assert!(try_eval(&gather(&[1, 0], &[1, 1]), &[y, k.clone(), k]).is_err());
}

#[test]
fn scatter_reductions_accumulate_duplicates() {
    let x = arr(&[1i32, 2, 3, 4], &[4], DType::I32);
    let idx = arr(&[0i32, 0, -1, 9, -9], &[5], DType::I32);
    let upd = arr(&[10i32, 20, 30, 40, 50], &[5, 1], DType::I32);
    let run = |r| read::<i32>(&eval(&scatter(&[0], r), &[x.clone(), idx.clone(), upd.clone()]));
    // 9 and -9 are out of range: dropped. -1 is the last element.
    assert_eq!(run(ScatterReduce::None), vec![20, 2, 3, 30]);
    assert_eq!(run(ScatterReduce::Add), vec![31, 2, 3, 34]);
    assert_eq!(run(ScatterReduce::Prod), vec![200, 2, 3, 120]);
    assert_eq!(run(ScatterReduce::Max), vec![20, 2, 3, 30]);
    assert_eq!(run(ScatterReduce::Min), vec![1, 2, 3, 4]);
    // Integer adds wrap.
    let x = arr(&[i8::MAX], &[1], DType::I8);
    let idx = arr(&[0i32, 0], &[2], DType::I32);
    let upd = arr(&[1i8, 1], &[2, 1], DType::I8);
    assert_eq!(read::<i8>(&eval(&scatter(&[0], ScatterReduce::Add), &[x, idx, upd])), vec![-127]);
    // Bool: add is or, prod is and.
    let x = arr(&[0u8, 1], &[2], DType::Bool);
    let idx = arr(&[0i32, 1], &[2], DType::I32);
    let upd = arr(&[1u8, 0], &[2, 1], DType::Bool);
    let add = eval(&scatter(&[0], ScatterReduce::Add), &[x.clone(), idx.clone(), upd.clone()]);
    assert_eq!(read::<u8>(&add), vec![1, 1]);
    let prod = eval(&scatter(&[0], ScatterReduce::Prod), &[x, idx, upd]);
    assert_eq!(read::<u8>(&prod), vec![0, 0]);
}

#[test]
fn scatter_blocks_halves_and_nan() {
    // 2x2 blocks into a 3x3 float16 array; the second block does not fit and is dropped.
    let x = arr(&[f16::ZERO; 9], &[3, 3], DType::F16);
    let r = arr(&[1i32, 2], &[2], DType::I32);
    let c = arr(&[1i32, 0], &[2], DType::I32);
    let h = |v: f32| f16::from_f32(v);
    let upd = arr(
        &[h(1.0), h(2.0), h(3.0), h(4.0), h(5.0), h(6.0), h(7.0), h(8.0)],
        &[2, 2, 2],
        DType::F16,
    );
    let out = eval(&scatter(&[0, 1], ScatterReduce::Add), &[x, r, c, upd]);
    let got: Vec<f32> = read::<f16>(&out).iter().map(|v| v.to_f32()).collect();
    assert_eq!(got, vec![0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 0.0, 3.0, 4.0]);
    // NaN wins max/min, as the elementwise maximum.
    let x = f32s(&[1.0, f32::NAN], &[2]);
    let idx = arr(&[0i32, 1], &[2], DType::I32);
    let upd = f32s(&[f32::NAN, 5.0], &[2, 1]);
    let out = read::<f32>(&eval(&scatter(&[0], ScatterReduce::Max), &[x, idx, upd]));
    assert!(out[0].is_nan() && out[1].is_nan());
}

#[test]
fn scatter_reads_strided_inputs_and_checks() {
    let base = arr(&(0..6).collect::<Vec<i32>>(), &[2, 3], DType::I32);
    let t = with_layout(&base, base.layout.transpose(&[1, 0])); // (3, 2)
    let idx = arr(&[2i32], &[1], DType::I32);
    let ubase = arr(&[7i32, 8], &[2], DType::I32);
    let upd =
        with_layout(&ubase, Layout::new(shape(&[1, 1, 2]), Strides::from_slice(&[0, 0, -1]), 1));
    let out = eval(&scatter(&[0], ScatterReduce::None), &[t.clone(), idx.clone(), upd]);
    assert_eq!(read::<i32>(&out), vec![0, 3, 1, 4, 8, 7]);
    // Updates of another dtype, of the wrong rank or too large a block.
    let f = f32s(&[1.0, 2.0], &[1, 1, 2]);
    assert!(try_eval(&scatter(&[0], ScatterReduce::None), &[t.clone(), idx.clone(), f]).is_err());
    let u = arr(&[1i32, 2], &[1, 2], DType::I32);
    assert!(try_eval(&scatter(&[0], ScatterReduce::None), &[t.clone(), idx.clone(), u]).is_err());
    let u = arr(&[0i32; 3], &[1, 1, 3], DType::I32);
    assert!(try_eval(&scatter(&[0], ScatterReduce::None), &[t, idx, u]).is_err());
}

#[test]
fn slice_update_writes_strided_regions() {
    let x = arr(&[0i32; 6], &[2, 3], DType::I32);
    let upd = arr(&[1i32, 2, 3, 4], &[2, 2], DType::I32);
    let p = Primitive::SliceUpdate { start: vec![1, 2], step: vec![-1, -2], len: vec![2, 2] };
    let out = eval(&p, &[x.clone(), upd.clone()]);
    assert_eq!(read::<i32>(&out), vec![4, 0, 3, 2, 0, 1]);
    // A transposed update view, and an empty region.
    let tu = with_layout(&upd, upd.layout.transpose(&[1, 0]));
    let out = eval(&p, &[x.clone(), tu]);
    assert_eq!(read::<i32>(&out), vec![4, 0, 2, 3, 0, 1]);
    let e = arr::<i32>(&[], &[0, 3], DType::I32);
    let p0 = Primitive::SliceUpdate { start: vec![0, 0], step: vec![1, 1], len: vec![0, 3] };
    assert_eq!(read::<i32>(&eval(&p0, &[x.clone(), e])), vec![0; 6]);
    // Out of bounds regions and mismatched updates are rejected.
    let bad = Primitive::SliceUpdate { start: vec![1, 2], step: vec![1, 1], len: vec![2, 2] };
    assert!(try_eval(&bad, &[x.clone(), upd.clone()]).is_err());
    let p1 = Primitive::SliceUpdate { start: vec![0, 0], step: vec![1, 1], len: vec![2, 1] };
    assert!(try_eval(&p1, &[x, upd]).is_err());
}

#[test]
fn masked_scatter_takes_rows_in_order() {
    let x = arr(&[0i32; 6], &[3, 2], DType::I32);
    let mask = arr(&[1u8, 0, 1], &[3], DType::Bool);
    let vals = arr(&[1i32, 2, 3, 4], &[2, 2], DType::I32);
    let out = eval(&Primitive::MaskedScatter, &[x.clone(), mask.clone(), vals]);
    assert_eq!(read::<i32>(&out), vec![1, 2, 0, 0, 3, 4]);
    // Too few rows: an error, not a read past the end.
    let one = arr(&[9i32, 9], &[1, 2], DType::I32);
    assert!(try_eval(&Primitive::MaskedScatter, &[x.clone(), mask.clone(), one]).is_err());
    // A mask over every element with a broadcast value.
    let full = arr(&[1u8, 0, 0, 1, 1, 0], &[3, 2], DType::Bool);
    let v = arr(&[5i32], &[1], DType::I32);
    let v = with_layout(&v, Layout::new(shape(&[6]), Strides::from_slice(&[0]), 0));
    assert_eq!(
        read::<i32>(&eval(&Primitive::MaskedScatter, &[x, full, v])),
        vec![5, 0, 0, 5, 5, 0]
    );
}

#[test]
fn view_reinterprets_bytes() {
    let x = f32s(&[1.0, 2.0], &[2]);
    let out = eval(&Primitive::View(DType::I32), std::slice::from_ref(&x));
    assert!(out.buffer.same(&x.buffer), "contiguous: shares the buffer");
    assert_eq!(read::<i32>(&out), vec![1065353216, 1073741824]);
    let out = eval(&Primitive::View(DType::U16), std::slice::from_ref(&x));
    assert_eq!(read::<u16>(&out), vec![0, 16256, 0, 16384]);
    let out = eval(&Primitive::View(DType::I64), std::slice::from_ref(&x));
    assert_eq!(read::<i64>(&out), vec![4611686019492741120]);
    // A transposed int8 view goes through a row-major copy.
    let b = arr(&(0..8).collect::<Vec<i8>>(), &[2, 4], DType::I8);
    let t = with_layout(&b, b.layout.transpose(&[1, 0]));
    let out = eval(&Primitive::View(DType::I16), &[t]);
    assert_eq!(read::<i16>(&out), vec![1024, 1281, 1538, 1795]);
    // An offset not aligned to the wider type also copies.
    let s = with_layout(&b, Layout::new(shape(&[2]), Strides::from_slice(&[1]), 1));
    assert_eq!(read::<i16>(&eval(&Primitive::View(DType::I16), &[s])), vec![0x0201]);
    // Bytes viewed as bool are normalised to 0/1.
    let u = arr(&[3u8, 0], &[2], DType::U8);
    assert_eq!(read::<u8>(&eval(&Primitive::View(DType::Bool), &[u])), vec![1, 0]);
    // 0-d needs equal sizes; the last axis must divide.
    let z = f32s(&[1.0], &[]);
    assert!(try_eval(&Primitive::View(DType::I16), std::slice::from_ref(&z)).is_err());
    assert_eq!(read::<u32>(&eval(&Primitive::View(DType::U32), &[z])), vec![1065353216]);
    let odd = arr(&[0i8; 3], &[3], DType::I8);
    assert!(try_eval(&Primitive::View(DType::I16), &[odd]).is_err());
}

#[test]
fn as_strided_views_and_bounds() {
    let x = arr(&(0..10).collect::<Vec<i32>>(), &[10], DType::I32);
    let p = |sh: &[usize], st: &[isize], off| Primitive::AsStrided {
        shape: shape(sh),
        strides: Strides::from_slice(st),
        offset: off,
    };
    assert_eq!(
        read::<i32>(&eval(&p(&[3, 3], &[1, 1], 0), std::slice::from_ref(&x))),
        vec![0, 1, 2, 1, 2, 3, 2, 3, 4]
    );
    assert_eq!(read::<i32>(&eval(&p(&[3], &[-2], 5), std::slice::from_ref(&x))), vec![5, 3, 1]);
    assert!(try_eval(&p(&[3, 3], &[5, 1], 0), std::slice::from_ref(&x)).is_err());
    assert!(try_eval(&p(&[2], &[-1], 0), std::slice::from_ref(&x)).is_err());
    assert!(try_eval(&p(&[2], &[1, 1], 0), std::slice::from_ref(&x)).is_err());
    assert_eq!(eval(&p(&[0, 3], &[100, 1], 50), std::slice::from_ref(&x)).layout.size(), 0);
    // A non-row-major input is strided over its row-major order.
    let b = arr(&(0..6).collect::<Vec<i32>>(), &[2, 3], DType::I32);
    let t = with_layout(&b, b.layout.transpose(&[1, 0]));
    assert_eq!(read::<i32>(&eval(&p(&[6], &[1], 0), &[t])), vec![0, 3, 1, 4, 2, 5]);
}
