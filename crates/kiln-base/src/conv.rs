//! Convolution parameters and shape rules (channels last, as MLX: input `(N, ..., C_in)`,
//! weight `(C_out, ..., C_in / groups)`, output `(N, ..., C_out)`).

use crate::shape::{fmt_shape, Shape};
use crate::{ensure, DType, Result};

/// The parameters of an N-d convolution, one entry per spatial axis.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ConvParams {
    /// Step between output positions (>= 1).
    pub stride: Vec<usize>,
    /// Zeros added before / after the (dilated) input; negative values crop.
    pub padding_lo: Vec<i64>,
    pub padding_hi: Vec<i64>,
    /// Gap between kernel taps (>= 1).
    pub kernel_dilation: Vec<usize>,
    /// Gap between input elements (>= 1): `d - 1` zeros between neighbours.
    pub input_dilation: Vec<usize>,
    /// Channel groups: input and output channels split into `groups` independent blocks.
    pub groups: usize,
    /// Flip the kernel spatially (a true convolution instead of a cross-correlation).
    pub flip: bool,
}

impl ConvParams {
    /// Number of spatial axes.
    pub fn spatial(&self) -> usize {
        self.stride.len()
    }

    /// Extent of the dilated, padded input along spatial axis `i` of size `size`.
    pub fn padded_extent(&self, i: usize, size: usize) -> i128 {
        let dilated =
            if size == 0 { 0 } else { (size as i128 - 1) * self.input_dilation[i] as i128 + 1 };
        dilated + self.padding_lo[i] as i128 + self.padding_hi[i] as i128
    }

    /// Extent of the dilated kernel along spatial axis `i` of size `size`.
    pub fn kernel_extent(&self, i: usize, size: usize) -> i128 {
        if size == 0 {
            0
        } else {
            (size as i128 - 1) * self.kernel_dilation[i] as i128 + 1
        }
    }

    /// Checks the parameters against input and weight and returns the output shape.
    pub fn output_shape(
        &self,
        op: &'static str,
        (input, di): (&[usize], DType),
        (weight, dw): (&[usize], DType),
    ) -> Result<Shape> {
        let d = self.spatial();
        ensure!(
            di.is_float() && di == dw,
            Value,
            op,
            "Invalid input array with type {di}. Convolution currently only supports floating \
             point types"
        );
        ensure!(
            d >= 1
                && input.len() == d + 2
                && [&self.padding_lo, &self.padding_hi].iter().all(|p| p.len() == d)
                && self.kernel_dilation.len() == d
                && self.input_dilation.len() == d,
            Value,
            op,
            "Expected {d} stride, padding and dilation values for input of shape {}.",
            fmt_shape(input)
        );
        ensure!(
            weight.len() == input.len(),
            Value,
            op,
            "Invalid weight array with {} dimensions for {d}D convolution. Expected an array \
             with {} dimensions following the format [C_out, ..., C_in].",
            weight.len(),
            input.len()
        );
        ensure!(self.groups >= 1, Value, op, "Groups must be positive, got {}.", self.groups);
        let (c_in, c_out) = (input[d + 1], weight[0]);
        ensure!(
            c_in % self.groups == 0,
            Value,
            op,
            "The input channels must be divisible by the number of groups. Got input with \
             shape {} and {} groups.",
            fmt_shape(input),
            self.groups
        );
        ensure!(
            weight[d + 1].checked_mul(self.groups) == Some(c_in),
            Value,
            op,
            "Expect the input channels in the input and weight array to match but got shapes \
             - input: {} and weight: {}",
            fmt_shape(input),
            fmt_shape(weight)
        );
        ensure!(
            c_out % self.groups == 0,
            Value,
            op,
            "If groups > 1, the output channels must be divisible by the number of groups. \
             Got {c_out} output channels and {} groups.",
            self.groups
        );
        let positive = |v: &[usize], what: &str, plural: &str| -> Result<()> {
            let shown: Vec<String> = v.iter().map(|x| x.to_string()).collect();
            ensure!(
                v.iter().all(|&x| x >= 1),
                Value,
                op,
                "{what} sizes must be positive. Got {plural} ({}).",
                shown.join(",")
            );
            Ok(())
        };
        positive(&self.stride, "Stride", "strides")?;
        positive(&self.kernel_dilation, "Kernel dilation", "kernel dilation")?;
        positive(&self.input_dilation, "Input dilation", "input dilation")?;
        let mut out: Shape = Shape::with_capacity(d + 2);
        out.push(input[0]);
        for i in 0..d {
            let padded = self.padded_extent(i, input[i + 1]);
            let kernel = self.kernel_extent(i, weight[i + 1]);
            ensure!(
                padded >= kernel,
                Value,
                op,
                "Spatial dimensions of input after padding cannot be smaller than weight \
                 spatial dimensions. Got error at axis {} for input with shape {}, padding low \
                 ({}), padding high ({}), and weight of shape {}.",
                i + 1,
                fmt_shape(input),
                self.padding_lo[i],
                self.padding_hi[i],
                fmt_shape(weight)
            );
            let len = (padded - kernel) / self.stride[i] as i128 + 1;
            ensure!(len <= isize::MAX as i128, Value, op, "Output is too large.");
            out.push(len as usize);
        }
        out.push(c_out);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(d: usize) -> ConvParams {
        ConvParams {
            stride: vec![1; d],
            padding_lo: vec![0; d],
            padding_hi: vec![0; d],
            kernel_dilation: vec![1; d],
            input_dilation: vec![1; d],
            groups: 1,
            flip: false,
        }
    }

    #[test]
    fn shapes() {
        let f = DType::F32;
        let p = params(1);
        let out = p.output_shape("conv", (&[2, 5, 3], f), (&[4, 3, 3], f)).unwrap();
        assert_eq!(out.as_slice(), &[2, 3, 4]);
        let mut q = params(2);
        q.stride = vec![2, 1];
        q.padding_lo = vec![1, 0];
        q.padding_hi = vec![1, 0];
        q.kernel_dilation = vec![1, 2];
        let out = q.output_shape("conv", (&[1, 5, 6, 3], f), (&[2, 3, 2, 3], f)).unwrap();
        assert_eq!(out.as_slice(), &[1, 3, 4, 2]);
        let mut r = params(1);
        r.input_dilation = vec![2];
        r.padding_lo = vec![1];
        r.padding_hi = vec![2];
        r.kernel_dilation = vec![2];
        let out = r.output_shape("conv", (&[2, 5, 3], f), (&[4, 3, 3], f)).unwrap();
        assert_eq!(out.as_slice(), &[2, 8, 4]);
    }

    #[test]
    fn errors() {
        let f = DType::F32;
        let p = params(1);
        assert!(p.output_shape("conv", (&[2, 5, 3], f), (&[4, 7, 3], f)).is_err());
        assert!(p.output_shape("conv", (&[2, 5, 3], f), (&[4, 3, 2], f)).is_err());
        assert!(p
            .output_shape("conv", (&[2, 5, 3], DType::I32), (&[4, 3, 3], DType::I32))
            .is_err());
        let mut g = params(1);
        g.groups = 0;
        assert!(g.output_shape("conv", (&[2, 5, 4], f), (&[4, 3, 2], f)).is_err());
        g.groups = 2;
        assert!(g.output_shape("conv", (&[2, 5, 4], f), (&[5, 3, 2], f)).is_err());
        assert!(g.output_shape("conv", (&[2, 5, 4], f), (&[6, 3, 2], f)).is_ok());
    }
}
