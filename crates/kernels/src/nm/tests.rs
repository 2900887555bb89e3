use super::microkernel::Isa;
use super::*;
use crate::reference::gemm_naive;
use crate::schedule::CpuSchedule;
use crate::sparse_rows::RowKernel;
use crate::testing::data;
use proptest::prelude::*;

fn check_against_oracle(
    rows: usize,
    groups: usize,
    cols: usize,
    n: usize,
    m: usize,
    threads: usize,
    seed: u64,
) {
    let k = groups * m;
    let w = prune_magnitude(&data(rows * k, seed), rows, k, n, m);
    let x = data(k * cols, seed + 1);
    let a = NmMatrix::compress(&w, rows, k, n, m).unwrap();
    assert_eq!(a.decompress(), w);
    let mut want = vec![0.0; rows * cols];
    gemm_naive(&w, &x, &mut want, rows, k, cols);
    let tol = 1e-5 * (k as f32).max(10.0);
    let close = |got: &[f32]| {
        got.iter()
            .zip(&want)
            .position(|(g, w)| (g - w).is_nan() || (g - w).abs() > tol * w.abs().max(1.0))
    };
    let schedule = crate::schedule::schedule_cpu(cols, rows, k, threads);
    // Every instruction set the machine has, not only the one detection would pick.
    for isa in Isa::available() {
        let mut y = vec![f32::NAN; rows * cols];
        a.spmm_on(isa, &schedule, (&x, cols), &mut y, cols);
        if let Some(i) = close(&y) {
            panic!("{isa:?} {n}:{m} at {i}: {} vs {}", y[i], want[i]);
        }
    }
    let mut y = vec![f32::NAN; rows * cols];
    a.spmm(threads, &x, &mut y, cols).unwrap();
    assert_eq!(close(&y), None);
    // The AVX-512 kernels, whatever the token count would pick.
    if Isa::available().contains(&Isa::Avx512) {
        if a.runs_as_two_of_four() || super::feature_lanes::LaneLayout::supports(m) {
            let mut y = vec![f32::NAN; rows * cols];
            super::feature_lanes::spmm(a.lane_layout(), threads, (&x, cols), &mut y, cols);
            assert_eq!(close(&y), None, "feature lanes {n}:{m}");
        }
        if super::token_lanes::TokenLayout::supports(m) {
            // Both weight loads (broadcast, spread by shuffles), whichever this CPU takes.
            for shuffles_apart in [false, true] {
                let mut y = vec![f32::NAN; rows * cols];
                let layout = a.token_layout();
                super::token_lanes::spmm_spreading(layout, threads, (&x, cols), &mut y, cols, shuffles_apart);
                assert_eq!(
                    close(&y),
                    None,
                    "token lanes {n}:{m}, shuffles apart {shuffles_apart}"
                );
            }
        }
    }
}

fn pattern() -> impl Strategy<Value = (usize, usize)> {
    prop_oneof![
        Just((2, 4)),
        Just((1, 2)),
        Just((4, 8)),
        Just((1, 4)),
        (2usize..=32).prop_flat_map(|m| (1..m, Just(m))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn spmm_matches_the_naive_oracle(
        (n, m) in pattern(), rows in 1usize..20, groups in 1usize..12, cols in 1usize..70,
        threads in 1usize..3, seed in any::<u64>(),
    ) {
        check_against_oracle(rows, groups, cols, n, m, threads, seed);
    }

    #[test]
    fn decompress_inverts_compress_on_kept_values((n, m) in pattern(), rows in 0usize..6, groups in 0usize..6, seed in any::<u64>()) {
        let k = groups * m;
        let w = prune_magnitude(&data(rows * k, seed), rows, k, n, m);
        let a = NmMatrix::compress(&w, rows, k, n, m).unwrap();
        prop_assert_eq!(a.decompress(), w);
        prop_assert_eq!(a.values().len(), rows * groups * n);
    }

    #[test]
    fn every_blocking_gives_the_same_answer(
        strip in 1usize..5, k_block in 1usize..6, rows_per_task in 1usize..7, threads in 1usize..3,
    ) {
        let (rows, k, cols) = (13, 48, 37);
        let w = prune_magnitude(&data(rows * k, 3), rows, k, 2, 4);
        let x = data(k * cols, 4);
        let a = NmMatrix::compress(&w, rows, k, 2, 4).unwrap();
        let (mut want, mut got) = (vec![0.0; rows * cols], vec![0.0; rows * cols]);
        a.spmm(1, &x, &mut want, cols).unwrap();
        let s = CpuSchedule { threads, strip_width: strip * 8, k_block: k_block * 4, rows_per_task, working_set_bytes: 0 };
        a.spmm_scheduled(&s, &x, &mut got, cols).unwrap();
        for (g, w) in got.iter().zip(&want) {
            prop_assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0));
        }
    }
}

#[test]
fn bert_sized_two_of_four_matches_the_oracle() {
    check_against_oracle(64, 192, 128, 2, 4, 2, 11);
}

#[test]
fn two_of_four_metadata_is_two_bits_per_kept_value() {
    let w = prune_magnitude(&data(8 * 64, 1), 8, 64, 2, 4);
    let a = NmMatrix::compress(&w, 8, 64, 2, 4).unwrap();
    assert_eq!(a.value_bytes(), 8 * 32 * 4);
    assert_eq!(a.metadata_bytes(), 8 * 32 / 4);
    assert_eq!(a.bits_per_index(), 2);
}

#[test]
fn sparse_groups_are_padded_with_explicit_zeros() {
    let w = [0.0, 0.0, 5.0, 0.0];
    let a = NmMatrix::compress(&w, 1, 4, 2, 4).unwrap();
    assert_eq!(a.values(), &[0.0, 5.0]);
    assert_eq!(a.decompress(), w);
}

#[test]
fn refuses_unpruned_weights_bad_groups_and_bad_patterns() {
    let err = NmMatrix::compress(&[1.0, 1.0, 1.0, 0.0], 1, 4, 2, 4).unwrap_err();
    assert_eq!(
        err,
        KernelError::Overfull {
            row: 0,
            group: 0,
            nonzeros: 3,
            n: 2,
            m: 4
        }
    );
    assert_eq!(
        NmMatrix::compress(&[0.0; 6], 1, 6, 2, 4).unwrap_err(),
        KernelError::GroupSize { k: 6, m: 4 }
    );
    assert_eq!(
        NmMatrix::compress(&[0.0; 4], 1, 4, 4, 4).unwrap_err(),
        KernelError::Pattern { n: 4, m: 4 }
    );
    assert!(matches!(
        NmMatrix::compress(&[0.0; 3], 1, 4, 2, 4),
        Err(KernelError::Length { .. })
    ));
}

#[test]
fn spmm_refuses_mismatched_buffers() {
    let a = NmMatrix::compress(&[0.0; 8], 2, 4, 2, 4).unwrap();
    let mut y = vec![0.0; 6];
    assert!(matches!(
        a.spmm(1, &[0.0; 8], &mut y, 3),
        Err(KernelError::Length { what: "x", .. })
    ));
}

#[test]
fn issue_3_column_panels_when_activations_exceed_l2() {
    // K × cols × 4 = 1024 × 200 × 4 > 512 KiB: the product runs in strip-wide panels, with a
    // narrow last panel.
    check_against_oracle(6, 256, 200, 2, 4, 2, 11);
    check_against_oracle(5, 128, 300, 3, 8, 1, 12);
}

#[test]
fn issue_3_feature_lanes_cross_every_block_boundary() {
    // 270 rows: two tasks of 240, the last panel 14 rows and tiles of 3, 2 and 1 panels; 71
    // groups: an index byte holding a single group; 197 tokens: two token blocks and tiles of
    // every width.
    check_against_oracle(270, 71, 197, 2, 4, 2, 21);
    check_against_oracle(17, 64, 13, 2, 4, 1, 22);
}

#[test]
fn issue_20_two_of_four_takes_feature_lanes_to_23_tokens_from_k_1024() {
    // K = 1200 (the feature lanes' K blocks and the 1024 crossover), 16 and 23 tokens on
    // feature lanes, 24 on token lanes: all match the oracle.
    for (cols, seed) in [(16, 31), (23, 32), (24, 33)] {
        check_against_oracle(40, 300, cols, 2, 4, 2, seed);
    }
}

#[test]
fn issue_3_execution_copy_is_reported_and_metadata_stays_two_bits() {
    let (rows, k, cols) = (20, 64, 9);
    let w = prune_magnitude(&data(rows * k, 5), rows, k, 2, 4);
    let a = NmMatrix::compress(&w, rows, k, 2, 4).unwrap();
    assert_eq!(a.execution_copy_bytes(), 0);
    let mut y = vec![0.0; rows * cols];
    a.spmm(1, &data(k * cols, 6), &mut y, cols).unwrap();
    assert_eq!(a.metadata_bytes(), rows * k / 2 / 4);
    if Isa::detect() == Isa::Avx512 {
        // 9 tokens: the feature-lane copy, two panels of 16 rows, 8 index bytes each:
        // 2·8·(64 values · 4 B + 16 index bytes).
        let lanes = 2 * 8 * (64 * 4 + 16);
        assert_eq!(a.execution_copy_bytes(), lanes);
        // 64 tokens add the token-lane copy: 20 rows × 8 index bytes × (4 values · 4 B + 1).
        let cols = 64;
        let mut y = vec![0.0; rows * cols];
        a.spmm(1, &data(k * cols, 6), &mut y, cols).unwrap();
        assert_eq!(a.execution_copy_bytes(), lanes + 20 * 8 * (4 * 4 + 1));
    }
    // The copy takes no part in equality.
    assert_eq!(a, NmMatrix::compress(&w, rows, k, 2, 4).unwrap());
}

/// Patterns other than 2:4 with groups of up to 16 have a feature-lane kernel of their own
/// (a window of 16 activations per group, nibble selectors): odd and even kept counts (a
/// lone slot in the last selector byte), groups of 16 (the window exactly), 1:2 with K = 2
/// mod 4 (which does not run as 2:4), every panel and token tile shape, one and two threads.
#[test]
fn issue_3_feature_lanes_take_every_pattern_with_groups_up_to_16() {
    for (n, m, groups) in [
        (4, 8, 37),
        (1, 4, 50),
        (3, 8, 21),
        (7, 16, 9),
        (15, 16, 5),
        (1, 2, 33),
        (2, 3, 40),
    ] {
        for (rows, cols, threads) in [(270, 13, 2), (17, 1, 1), (33, 7, 2)] {
            check_against_oracle(rows, groups, cols, n, m, threads, 31);
        }
    }
}

/// The feature-lane copy of a non-2:4 pattern is `n` values and `⌈n/2⌉` selector bytes per
/// row and group, and a 4:8 product with one token takes it (not the token lanes, which
/// would pad the token to 16 lanes).
#[test]
fn issue_3_other_patterns_keep_a_nibble_per_kept_weight() {
    let (rows, k) = (20, 64);
    let w = prune_magnitude(&data(rows * k, 5), rows, k, 4, 8);
    let a = NmMatrix::compress(&w, rows, k, 4, 8).unwrap();
    let mut y = vec![0.0; rows];
    a.spmm(2, &data(k, 6), &mut y, 1).unwrap();
    // Stored: 4 bits per kept weight for groups of 5–16.
    assert_eq!(a.metadata_bytes(), rows * (k / 2) / 2);
    if Isa::detect() == Isa::Avx512 {
        // Two panels of 16 rows × 8 groups × (4 values · 4 B + 2 selectors) × 16 lanes.
        assert_eq!(a.execution_copy_bytes(), 2 * 8 * (4 * 4 + 2) * 16);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    #[test]
    fn issue_3_feature_lanes_match_the_oracle_on_odd_sizes(
        rows in 1usize..300, groups in 1usize..90, cols in 1usize..210, threads in 1usize..3,
        seed in any::<u64>(),
    ) {
        check_against_oracle(rows, groups, cols, 2, 4, threads, seed);
    }
}

/// 1:2 with K a multiple of 4 runs on the 2:4 kernels (as the 2:4 matrix it is) and still
/// reports its own 1-bit metadata; with K = 2 mod 4 it keeps the generic loops. Both match
/// the oracle at token counts on either side of the feature/token-lane crossover.
#[test]
fn issue_3_one_of_two_runs_on_the_two_of_four_kernels() {
    let w = prune_magnitude(&data(8 * 64, 5), 8, 64, 1, 2);
    let a = NmMatrix::compress(&w, 8, 64, 1, 2).unwrap();
    assert!(a.runs_as_two_of_four());
    assert_eq!((a.bits_per_index(), a.metadata_bytes()), (1, 8 * 32 / 8));
    let as_24 = NmMatrix::compress(&w, 8, 64, 2, 4).unwrap();
    assert_eq!(
        &*a.two_of_four_indices(),
        as_24.indices(),
        "the 2:4 indices of the same weights"
    );
    assert!(
        !NmMatrix::compress(&[0.0; 6], 1, 6, 1, 2)
            .unwrap()
            .runs_as_two_of_four()
    );
    for (groups, cols) in [(32, 1), (32, 7), (32, 40), (33, 5), (33, 40)] {
        check_against_oracle(9, groups, cols, 1, 2, 2, 21);
    }
}
