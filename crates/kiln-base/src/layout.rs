//! How an evaluated array's elements sit in its buffer: shape, element strides and the offset
//! of element `[0, ..., 0]`. Views (transpose, broadcast, slice, most reshapes) are new layouts
//! over the same buffer; this file computes them, the same for every device.

use crate::shape::{row_major_strides, size_of, Shape, Strides};

/// A strided view description.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layout {
    pub shape: Shape,
    pub strides: Strides,
    /// Element offset of `[0, ..., 0]` in the buffer.
    pub offset: usize,
    /// Elements are in row-major order without gaps, starting at `offset`.
    pub row_contiguous: bool,
    /// Elements are in column-major order without gaps, starting at `offset`.
    pub col_contiguous: bool,
}

impl Layout {
    /// A fresh row-major layout.
    pub fn contiguous(shape: &[usize]) -> Layout {
        Layout::new(shape.into(), row_major_strides(shape), 0)
    }

    pub fn new(shape: Shape, strides: Strides, offset: usize) -> Layout {
        let row_contiguous = is_dense(&shape, &strides, false);
        let col_contiguous = is_dense(&shape, &strides, true);
        Layout { shape, strides, offset, row_contiguous, col_contiguous }
    }

    pub fn size(&self) -> usize {
        size_of(&self.shape)
    }

    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// Buffer index of every element in row-major order (reference path for kernels that
    /// do not special-case contiguity).
    pub fn indices(&self) -> impl Iterator<Item = usize> + '_ {
        StridedIndices::new(self)
    }

    /// Permuted axes; `perm` must be a permutation (checked by the op).
    pub fn transpose(&self, perm: &[usize]) -> Layout {
        let shape = perm.iter().map(|&p| self.shape[p]).collect();
        let strides = perm.iter().map(|&p| self.strides[p]).collect();
        Layout::new(shape, strides, self.offset)
    }

    /// Broadcast to `shape` (trailing-aligned; checked by the op): new and size-1 dims get
    /// stride 0.
    pub fn broadcast_to(&self, shape: &[usize]) -> Layout {
        let lead = shape.len() - self.ndim();
        let strides = (0..shape.len())
            .map(|i| {
                if i < lead || (self.shape[i - lead] == 1 && shape[i] != 1) {
                    0
                } else {
                    self.strides[i - lead]
                }
            })
            .collect();
        Layout::new(shape.into(), strides, self.offset)
    }

    /// A strided slice: per axis, the first index, the step (nonzero, maybe negative) and
    /// the number of elements taken. All indices are in bounds (checked by the op).
    pub fn slice(&self, start: &[usize], step: &[isize], len: &[usize]) -> Layout {
        let mut offset = self.offset as isize;
        let mut strides = Strides::new();
        for i in 0..self.ndim() {
            if len[i] > 0 {
                offset += start[i] as isize * self.strides[i];
            }
            strides.push(self.strides[i] * step[i]);
        }
        let empty = len.contains(&0);
        Layout::new(len.into(), strides, if empty { self.offset } else { offset as usize })
    }

    /// The same elements under a new shape without copying, when the strides allow it
    /// (numpy's rule: each group of old dims that merges or splits must be contiguous).
    pub fn reshape(&self, shape: &[usize]) -> Option<Layout> {
        if self.row_contiguous || self.size() == 0 {
            return Some(Layout::new(shape.into(), row_major_strides(shape), self.offset));
        }
        // Old dims without size-1 axes; they carry no stride information.
        let old: Vec<(usize, isize)> = self
            .shape
            .iter()
            .zip(&self.strides)
            .filter(|(&d, _)| d != 1)
            .map(|(&d, &s)| (d, s))
            .collect();
        let mut strides: Strides = smallvec::smallvec![0; shape.len()];
        let (mut oi, mut ni) = (0usize, 0usize);
        while ni < shape.len() {
            if shape[ni] == 1 {
                strides[ni] = 0;
                ni += 1;
                continue;
            }
            // Grow a group of old dims and a group of new dims until their products match.
            let (ostart, nstart) = (oi, ni);
            let (mut op, mut np) = (old.get(oi)?.0, shape[ni]);
            oi += 1;
            ni += 1;
            while op != np {
                if op < np {
                    op *= old.get(oi)?.0;
                    oi += 1;
                } else {
                    np *= *shape.get(ni)?;
                    ni += 1;
                }
            }
            // The old group must be one contiguous run.
            for k in ostart..oi - 1 {
                if old[k].1 != old[k + 1].1 * old[k + 1].0 as isize {
                    return None;
                }
            }
            // Split the run's innermost stride over the new group.
            let mut acc = old[oi - 1].1;
            for k in (nstart..ni).rev() {
                strides[k] = acc;
                acc *= shape[k] as isize;
            }
        }
        if oi != old.len() {
            return None;
        }
        Some(Layout::new(shape.into(), strides, self.offset))
    }
}

/// Dense in row-major (or column-major) order: strides equal the contiguous ones on every
/// axis longer than 1.
fn is_dense(shape: &[usize], strides: &[isize], col_major: bool) -> bool {
    if size_of(shape) == 0 {
        return true;
    }
    let mut expected = 1isize;
    let mut check = |d: usize, s: isize| {
        if d != 1 {
            if s != expected {
                return false;
            }
            expected *= d as isize;
        }
        true
    };
    if col_major {
        shape.iter().zip(strides).all(|(&d, &s)| check(d, s))
    } else {
        shape.iter().zip(strides).rev().all(|(&d, &s)| check(d, s))
    }
}

/// Row-major walk over a strided layout, yielding buffer element indices.
struct StridedIndices<'a> {
    layout: &'a Layout,
    index: Shape,
    pos: isize,
    remaining: usize,
}

impl<'a> StridedIndices<'a> {
    fn new(layout: &'a Layout) -> Self {
        StridedIndices {
            layout,
            index: smallvec::smallvec![0; layout.ndim()],
            pos: layout.offset as isize,
            remaining: layout.size(),
        }
    }
}

impl Iterator for StridedIndices<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let out = self.pos as usize;
        // Advance the multi-index like an odometer.
        for ax in (0..self.index.len()).rev() {
            self.index[ax] += 1;
            self.pos += self.layout.strides[ax];
            if self.index[ax] < self.layout.shape[ax] {
                break;
            }
            self.pos -= self.layout.strides[ax] * self.layout.shape[ax] as isize;
            self.index[ax] = 0;
        }
        Some(out)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idx(l: &Layout) -> Vec<usize> {
        l.indices().collect()
    }

    #[test]
    fn views() {
        let l = Layout::contiguous(&[2, 3]);
        assert!(l.row_contiguous && !l.col_contiguous);
        let t = l.transpose(&[1, 0]);
        assert!(t.col_contiguous && !t.row_contiguous);
        assert_eq!(idx(&t), vec![0, 3, 1, 4, 2, 5]);
        let b = Layout::contiguous(&[3]).broadcast_to(&[2, 3]);
        assert_eq!(idx(&b), vec![0, 1, 2, 0, 1, 2]);
        let s = Layout::contiguous(&[5]).slice(&[4], &[-2], &[3]);
        assert_eq!(idx(&s), vec![4, 2, 0]);
    }

    #[test]
    fn reshape_views_and_copies() {
        let l = Layout::contiguous(&[2, 3, 4]);
        let t = l.transpose(&[1, 0, 2]); // (3, 2, 4), strides (4, 12, 1)
                                         // Splitting an axis keeps a view; merging non-adjacent memory cannot.
        let r = t.reshape(&[3, 2, 2, 2]).unwrap();
        assert_eq!(idx(&r), idx(&t));
        assert!(t.reshape(&[6, 4]).is_none());
        assert!(t.reshape(&[3, 8]).is_none());
        let s = Layout::contiguous(&[4, 6]).slice(&[0, 0], &[1, 1], &[4, 3]);
        let r = s.reshape(&[2, 2, 3]).unwrap();
        assert_eq!(idx(&r), idx(&s));
        assert!(s.reshape(&[12]).is_none());
        // Size-1 axes come and go freely.
        let e = t.reshape(&[3, 1, 2, 4, 1]).unwrap();
        assert_eq!(idx(&e), idx(&t));
    }
}
