//! Per-call scratch that vector loads read whole: packed activation panels.
//!
//! Why: a 64-byte load that straddles two cache lines costs two L1 accesses, and from L2
//! both lines. `Vec` gives the allocator's alignment, which glibc makes 16 bytes (the
//! binary's huge-page allocator aligns only blocks of 4 MiB and more). Measured on a
//! 2-vCPU Emerald Rapids, the int8 token-lane tile (6 rows × 64 tokens over 1024 K-quads)
//! ran 730–754 GOP/s on a line-aligned panel and 649–663 on one 16 bytes off; the int8
//! 512×4096×4096 product had packed its activations 32 bytes off.

/// The first `len` elements of `v`'s storage starting on a cache line, after growing `v`
/// to hold them past whatever offset that takes (contents are whatever `v` held, or
/// `T::default()` where it grew). Where no offset of whole elements aligns (a `T` whose
/// size does not divide 64), the slice starts at 0.
pub(crate) fn line_aligned<T: Copy + Default>(v: &mut Vec<T>, len: usize) -> &mut [T] {
    let spare = 64usize.div_ceil(size_of::<T>().max(1));
    v.resize(len + spare, T::default());
    let at = match v.as_ptr().align_offset(64) {
        a if a <= spare => a,
        _ => 0,
    };
    &mut v[at..at + len]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_starts_on_a_cache_line_whatever_the_vec_gives() {
        for len in [0, 1, 63, 64, 1000, 5 << 20] {
            let mut bytes: Vec<u8> = Vec::with_capacity(3);
            let s = line_aligned(&mut bytes, len);
            assert_eq!((s.len(), s.as_ptr() as usize % 64), (len, 0));
            let mut words: Vec<u32> = vec![7; 5];
            let s = line_aligned(&mut words, len);
            assert_eq!((s.len(), s.as_ptr() as usize % 64), (len, 0));
        }
    }
}
