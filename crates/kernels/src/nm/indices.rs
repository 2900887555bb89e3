//! Packed in-group indices: each kept weight stores its position inside its group of `m` in
//! `bits_per_index(m)` bits, little-endian within a byte, every row starting on a byte.
//!
//! Widths are 1, 2, 4 or 8 bits so that an index never straddles a byte: 2:4 gets the
//! 2 bits of the hardware format; m = 8 pays 4 bits where 3 would do (reported honestly in
//! `metadata_bytes`), which keeps decoding a shift and a mask.

/// Bits per stored index for group size `m` (2 ≤ m ≤ 256).
pub(crate) fn bits_per_index(m: usize) -> usize {
    match m {
        0..=2 => 1,
        3..=4 => 2,
        5..=16 => 4,
        _ => 8,
    }
}

/// Bytes one row's indices take.
pub(crate) fn row_bytes(kept_per_row: usize, bits: usize) -> usize {
    (kept_per_row * bits).div_ceil(8)
}

/// Write index `value` as entry `entry` of a row.
pub(crate) fn put(row: &mut [u8], entry: usize, bits: usize, value: usize) {
    let pos = entry * bits;
    row[pos / 8] |= ((value & mask(bits)) as u8) << (pos % 8);
}

/// Read entry `entry` of a row.
#[inline(always)]
pub(crate) fn get(row: &[u8], entry: usize, bits: usize) -> usize {
    let pos = entry * bits;
    usize::from(row[pos / 8] >> (pos % 8)) & mask(bits)
}

#[inline(always)]
fn mask(bits: usize) -> usize {
    (1 << bits) - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_of_four_packs_four_indices_per_byte() {
        assert_eq!(bits_per_index(4), 2);
        let mut row = vec![0u8; row_bytes(4, 2)];
        for (e, v) in [1, 3, 0, 2].into_iter().enumerate() {
            put(&mut row, e, 2, v);
        }
        assert_eq!(row, vec![0b10_00_11_01]);
        assert_eq!(
            (0..4).map(|e| get(&row, e, 2)).collect::<Vec<_>>(),
            vec![1, 3, 0, 2]
        );
    }

    #[test]
    fn widths_cover_every_group_size() {
        for m in 2..=256 {
            assert!(1 << bits_per_index(m) >= m, "m = {m}");
        }
    }
}
