//! The output buffer of a product, shared by parallel tasks that each write their own part.

/// A raw pointer to an output buffer that tasks on several threads write disjoint elements
/// of (their rows × their tokens), where the split is not a split of the slice into chunks
/// (a task's tokens are a column range of every row).
///
/// Whoever makes one promises that the tasks' elements are disjoint and that the buffer
/// outlives the parallel section, which joins before the kernel returns.
#[derive(Clone, Copy)]
pub(crate) struct SharedOutput<T>(pub(crate) *mut T);

// SAFETY: see the type's doc: the tasks write disjoint elements of a buffer that outlives
// them, so handing the pointer to another thread races with nothing.
unsafe impl<T> Send for SharedOutput<T> {}
// SAFETY: as above; `&SharedOutput` only yields copies of the pointer.
unsafe impl<T> Sync for SharedOutput<T> {}

impl<T> SharedOutput<T> {
    /// The element `offset` past the start (a method, so closures capture the whole `Send`
    /// wrapper rather than its raw field).
    pub(crate) fn at(self, offset: usize) -> *mut T {
        self.0.wrapping_add(offset)
    }
}

/// Runs `task((i, chunk))` for every `len`-element chunk of `y` (the last may be shorter):
/// as tasks of the current rayon pool when `parallel`, else one after another on the calling
/// thread.
///
/// Why one function: every kernel splits its output into whole rows per task this way, and
/// the branch keeps a one-thread product off the pool entirely (no task overhead, the
/// calling thread's caches), which each kernel had spelled out for itself.
#[inline]
pub(crate) fn for_each_chunk<T: Send>(
    y: &mut [T],
    len: usize,
    parallel: bool,
    task: impl Fn((usize, &mut [T])) + Sync + Send,
) {
    use rayon::prelude::*;
    if parallel {
        y.par_chunks_mut(len).enumerate().for_each(task);
    } else {
        y.chunks_mut(len).enumerate().for_each(task);
    }
}

/// Whether a `rows × k` by `k × cols` product has nothing to compute, having written its
/// answer to `y` if so: no rows or no tokens leave `y` (then empty) as it is, and `k == 0`
/// makes every output an empty sum, zero. Every kernel entry point answers these shapes the
/// same way before touching its buffers.
pub(crate) fn trivial_product<T: Copy + Default>(y: &mut [T], rows: usize, k: usize, cols: usize) -> bool {
    if rows == 0 || cols == 0 {
        return true;
    }
    if k == 0 {
        y.fill(T::default());
        return true;
    }
    false
}
