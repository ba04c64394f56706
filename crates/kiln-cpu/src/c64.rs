//! The complex64 element type: two f32s as MLX and numpy lay them out, ordered
//! lexicographically (real part, then imaginary), as MLX compares complex numbers. Its math
//! is `complex.rs`; this file is the type alone, so the element table can name it.

use bytemuck::{Pod, Zeroable};
use num_complex::Complex32;
use std::cmp::Ordering;

/// One complex64 element.
#[derive(Debug, Clone, Copy, PartialEq, Default, Pod, Zeroable)]
#[repr(transparent)]
pub struct C64(pub Complex32);

impl C64 {
    pub const fn new(re: f32, im: f32) -> Self {
        C64(Complex32 { re, im })
    }
    pub fn re(self) -> f32 {
        self.0.re
    }
    pub fn im(self) -> f32 {
        self.0.im
    }
}

impl PartialOrd for C64 {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        match self.0.re.partial_cmp(&other.0.re)? {
            Ordering::Equal => self.0.im.partial_cmp(&other.0.im),
            o => Some(o),
        }
    }
}
