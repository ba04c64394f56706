//! Walking an array one line at a time along an axis (scan, sort, partition): the buffer
//! index of each line's first element, in row-major order of the other axes, and the stride
//! along the line. Any layout works (negative or zero strides, offsets, empty).

use kiln_base::Layout;

pub(crate) struct Lines {
    /// The layout without `axis`: its indices are the lines' first elements.
    outer: Layout,
    /// Elements per line.
    pub len: usize,
    stride: isize,
}

impl Lines {
    pub fn new(l: &Layout, axis: usize) -> Lines {
        let mut outer = l.clone();
        let len = outer.shape.remove(axis);
        let stride = outer.strides.remove(axis);
        Lines { outer: Layout::new(outer.shape, outer.strides, l.offset), len, stride }
    }

    /// Buffer index of each line's first element.
    pub fn starts(&self) -> impl Iterator<Item = usize> + '_ {
        self.outer.indices()
    }

    /// Buffer index of element `j` of the line starting at `start` (`j < len`; in bounds
    /// because kiln-cpu validates every input layout against its buffer).
    #[inline(always)]
    pub fn at(&self, start: usize, j: usize) -> usize {
        (start as isize + j as isize * self.stride) as usize
    }
}
