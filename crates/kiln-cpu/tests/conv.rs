//! Convolution against a direct loop: strides, padding (negative too), dilations, groups,
//! flipping, half precision, strided inputs and empty sizes.
mod common;

use common::*;
use half::f16;
use kiln_base::{ArrayData, ConvParams, DType, Layout, Primitive};

fn params1(
    stride: usize,
    lo: i64,
    hi: i64,
    kdil: usize,
    idil: usize,
    groups: usize,
    flip: bool,
) -> ConvParams {
    ConvParams {
        stride: vec![stride],
        padding_lo: vec![lo],
        padding_hi: vec![hi],
        kernel_dilation: vec![kdil],
        input_dilation: vec![idil],
        groups,
        flip,
    }
}

/// 1-d convolution of row-major `(n, l, c)` and `(o, k, c / groups)` by the definition.
fn direct1(p: &ConvParams, x: &[f64], xs: [usize; 3], w: &[f64], ws: [usize; 3]) -> Vec<f64> {
    let ([n, l, c], [o, k, cg]) = (xs, ws);
    let dilated = if l == 0 { 0 } else { (l as i64 - 1) * p.input_dilation[0] as i64 + 1 };
    let padded = dilated + p.padding_lo[0] + p.padding_hi[0];
    let ext = (k as i64 - 1) * p.kernel_dilation[0] as i64 + 1;
    let out_len = ((padded - ext) / p.stride[0] as i64 + 1) as usize;
    let og = o / p.groups;
    let mut out = vec![0.0; n * out_len * o];
    for b in 0..n {
        for t in 0..out_len {
            for oc in 0..o {
                let g = oc / og;
                let mut acc = 0.0;
                for tap in 0..k {
                    let wk = if p.flip { k - 1 - tap } else { tap };
                    let pos = (t * p.stride[0]) as i64 + (tap * p.kernel_dilation[0]) as i64
                        - p.padding_lo[0];
                    let step = p.input_dilation[0] as i64;
                    if pos < 0 || pos >= dilated || pos % step != 0 {
                        continue;
                    }
                    let i = (pos / step) as usize;
                    for ci in 0..cg {
                        acc += x[(b * l + i) * c + g * cg + ci] * w[(oc * k + wk) * cg + ci];
                    }
                }
                out[(b * out_len + t) * o + oc] = acc;
            }
        }
    }
    out
}

fn values(n: usize, seed: usize) -> Vec<f64> {
    (0..n).map(|i| (((i * 31 + seed * 7) % 17) as f64 - 8.0) / 4.0).collect()
}

fn run(p: &ConvParams, x: &ArrayData, w: &ArrayData) -> Vec<f64> {
    let out = eval(&Primitive::Conv(p.clone()), &[x.clone(), w.clone()]);
    match out.dtype {
        DType::F64 => read::<f64>(&out),
        DType::F32 => read::<f32>(&out).into_iter().map(f64::from).collect(),
        _ => read::<f16>(&out).into_iter().map(f64::from).collect(),
    }
}

#[test]
fn one_d_cases_match_the_definition() {
    let cases = [
        (params1(1, 0, 0, 1, 1, 1, false), [2, 7, 3], [4, 3, 3]),
        (params1(2, 1, 2, 1, 1, 1, false), [1, 7, 2], [3, 3, 2]),
        (params1(1, 0, 0, 2, 1, 1, true), [2, 9, 2], [2, 3, 2]),
        (params1(3, 2, 1, 1, 2, 1, true), [1, 5, 2], [2, 2, 2]),
        (params1(1, -1, -2, 1, 1, 1, false), [1, 8, 1], [1, 2, 1]),
        (params1(1, 1, 1, 1, 1, 2, false), [2, 6, 4], [6, 3, 2]),
        (params1(1, 0, 0, 1, 1, 4, false), [1, 5, 4], [4, 2, 1]),
    ];
    for (p, xs, ws) in cases {
        let (xv, wv) = (values(xs.iter().product(), 1), values(ws.iter().product(), 2));
        let want = direct1(&p, &xv, xs, &wv, ws);
        let got = run(&p, &f64s(&xv, &xs), &f64s(&wv, &ws));
        assert_close(&got, &want, 1e-12);
        let x32: Vec<f32> = xv.iter().map(|&v| v as f32).collect();
        let w32: Vec<f32> = wv.iter().map(|&v| v as f32).collect();
        assert_close(&run(&p, &f32s(&x32, &xs), &f32s(&w32, &ws)), &want, 1e-5);
    }
}

fn f64s(data: &[f64], shape: &[usize]) -> ArrayData {
    arr(data, shape, DType::F64)
}

#[test]
fn two_d_equals_sum_of_one_d_rows() {
    // A (1, 3) kernel over a (2, 5) image is a 1-d convolution of each row.
    let p2 = ConvParams {
        stride: vec![1, 1],
        padding_lo: vec![0, 1],
        padding_hi: vec![0, 1],
        kernel_dilation: vec![1, 1],
        input_dilation: vec![1, 1],
        groups: 1,
        flip: false,
    };
    let xv = values(2 * 5 * 2, 3);
    let wv = values(3 * 2, 4);
    let got = run(&p2, &f64s(&xv, &[1, 2, 5, 2]), &f64s(&wv, &[1, 1, 3, 2]));
    let p1 = params1(1, 1, 1, 1, 1, 1, false);
    let want = direct1(&p1, &xv, [2, 5, 2], &wv, [1, 3, 2]);
    assert_close(&got, &want, 1e-12);
}

#[test]
fn strided_inputs_half_precision_and_empty() {
    let p = params1(1, 0, 0, 1, 1, 1, false);
    // Input (1, 4, 1) read backwards through a negative stride.
    let base = f64s(&[1.0, 2.0, 3.0, 4.0], &[1, 4, 1]);
    let rev = with_layout(&base, Layout::new(shape(&[1, 4, 1]), [4, -1, 1].as_slice().into(), 3));
    let w = f64s(&[1.0, 10.0], &[1, 2, 1]);
    assert_eq!(run(&p, &rev, &w), vec![34.0, 23.0, 12.0]);
    let h = |v: &[f32]| v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>();
    let xh = arr(&h(&[1.0, 2.0, 3.0, 4.0]), &[1, 4, 1], DType::F16);
    let wh = arr(&h(&[1.0, 10.0]), &[1, 2, 1], DType::F16);
    assert_eq!(run(&p, &xh, &wh), vec![21.0, 32.0, 43.0]);
    let empty_c = run(&p, &f64s(&[], &[2, 3, 0]), &f64s(&[], &[2, 2, 0]));
    assert_eq!(empty_c, vec![0.0; 2 * 2 * 2]);
    assert!(run(&p, &f64s(&[], &[0, 3, 1]), &f64s(&[1.0, 1.0], &[1, 2, 1])).is_empty());
    assert!(try_eval(
        &Primitive::Conv(p),
        &[f64s(&[1.0], &[1, 1, 1]), f64s(&[1.0, 1.0], &[1, 2, 1])]
    )
    .is_err());
}
