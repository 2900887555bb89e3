//! Inputs shared by the kernel examples (`mod common;` in each): deterministic weights and
//! activations in [-1, 1], the same in every example so that their numbers compare.

/// `len` weights, row-major.
pub fn weights(len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 7919 % 2003) as f32 / 1001.0) - 1.0)
        .collect()
}

/// `len` activations, row-major `k × tokens`.
pub fn activations(len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 104729 % 1999) as f32 / 999.0) - 1.0)
        .collect()
}
