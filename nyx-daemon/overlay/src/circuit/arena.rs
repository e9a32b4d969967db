//! Cell buffers without a heap allocation per cell.
//!
//! Every cell the overlay sends is a [`bytes::Bytes`] (what both transports take). Making
//! one per cell from a fresh `Vec`, or from a pooled buffer through `Bytes::from_owner`,
//! costs an allocation per cell. Instead cells are carved from one large reference-counted
//! region: `split_to` hands out a cell's worth of it and bumps the count; when every cell of
//! the region has been sent and dropped, `reserve` finds the region unshared and reuses it
//! from the start. Only while old cells are still held elsewhere (a slow link's queue) does
//! a refill allocate a new region: one allocation per [`CELLS_PER_REGION`] cells at worst.

use bytes::BytesMut;

/// Cells carved from one region.
pub(super) const CELLS_PER_REGION: usize = 64;

/// Hands out zeroed cell buffers of one size, or copies of up to that size.
#[derive(Debug)]
pub struct CellArena {
    region: BytesMut,
    cell_len: usize,
}

impl CellArena {
    /// An arena handing out cells of `cell_len` bytes.
    pub fn new(cell_len: usize) -> Self {
        CellArena {
            region: BytesMut::with_capacity(cell_len * CELLS_PER_REGION),
            cell_len,
        }
    }

    fn refill(&mut self) {
        if self.region.capacity() < self.cell_len {
            // Reuses the region in place when no cell of it is alive any more.
            self.region.reserve(self.cell_len * CELLS_PER_REGION);
        }
    }

    /// A buffer holding a copy of `bytes` (at most one cell long; the overlay's cells are
    /// exactly one, stream packets up to one).
    pub fn copy_of(&mut self, bytes: &[u8]) -> BytesMut {
        debug_assert!(bytes.len() <= self.cell_len);
        self.refill();
        self.region.extend_from_slice(bytes);
        self.region.split_to(bytes.len())
    }

    /// A zeroed cell buffer.
    pub fn zeroed(&mut self) -> BytesMut {
        self.refill();
        self.region.resize(self.cell_len, 0);
        self.region.split_to(self.cell_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_independent_and_zeroed() {
        let mut arena = CellArena::new(16);
        let mut a = arena.copy_of(&[7u8; 16]);
        let b = arena.zeroed();
        a[0] = 1;
        assert_eq!(a[..2], [1, 7]);
        assert!(b.iter().all(|&x| x == 0));
        // Many more than one region, some kept alive: still correct.
        let kept: Vec<_> = (0..200u8)
            .map(|i| arena.copy_of(&[i; 16]).freeze())
            .collect();
        for (i, cell) in kept.iter().enumerate() {
            assert!(cell.iter().all(|&x| usize::from(x) == i));
        }
        // A reused region is zeroed again for `zeroed`.
        drop(kept);
        for _ in 0..3 * CELLS_PER_REGION {
            let _ = arena.copy_of(&[0xff; 16]);
            assert!(arena.zeroed().iter().all(|&x| x == 0));
        }
    }
}
