//! The probes behind the gate's roofline roofs (issue 6): the peak f32 FMA rate, the peak
//! rates of the 16-bit and 8-bit dot-product instructions the bf16 and int8 kernels run on
//! (issue 20: their roofs are not f32's), and the memory bandwidth of a STREAM-like triad,
//! over a given number of threads.
//!
//! They live with the kernels because the FMA probe is SIMD code of the same kind (one
//! `#[target_feature]` function per instruction set, picked at run time); the gate decides
//! how many trials to run and how large a triad buffer to use.

use std::time::Instant;

/// Independent accumulator chains per thread: enough to cover the FMA latency (4 cycles) on
/// two FMA pipes, and all of them fit in registers.
const CHAINS: usize = 16;
/// FMA iterations per chain in one trial (≈ 1 ms with AVX-512 at 3 GHz).
const FMA_ITERS: u64 = 400_000;
/// Triad passes over the buffers; the best counts (the first also faults the pages in, so
/// the buffers are touched once before timing).
const TRIAD_PASSES: usize = 3;

/// Best-of-`trials` FMA throughput in GFLOP/s over `threads` threads, and the instruction
/// set it ran on: every thread runs independent FMA chains on registers only (no memory
/// traffic), with the widest vectors the CPU has. On a shared machine the peak is what a
/// trial gets when it has the cores to itself, hence the best of several.
pub fn fma_peak(threads: usize, trials: usize) -> (f64, &'static str) {
    let (lanes, isa) = fma_lanes();
    let mut best = 0.0f64;
    for _ in 0..trials.max(1) {
        let start = Instant::now();
        let sink: f32 = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads).map(|_| s.spawn(fma_chains)).collect();
            handles.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
        });
        let secs = start.elapsed().as_secs_f64().max(1e-9);
        std::hint::black_box(sink);
        let flops = threads as f64 * FMA_ITERS as f64 * CHAINS as f64 * lanes as f64 * 2.0;
        best = best.max(flops / secs / 1e9);
    }
    (best, isa)
}

/// A reduced-precision dot-product instruction whose peak differs from the f32 FMA's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DotPeak {
    /// `vdpbf16ps`: two bf16 products per f32 lane (AVX-512 BF16).
    Bf16,
    /// `vpdpbusd`: four int8 products per i32 lane (AVX-512 VNNI).
    Int8,
    /// `tdpbf16ps`: a 16×16 f32 tile of 32-product bf16 dot products (AMX-BF16).
    Bf16Tiles,
    /// `tdpbssd`: a 16×16 i32 tile of 64-product int8 dot products (AMX-INT8).
    Int8Tiles,
    /// f16 as three `tdpbf16ps` products each (`amx-bf16x3`): a third of the bf16 tiles'.
    F16Tiles,
}

impl DotPeak {
    /// The instruction the dense comparator of `operands` runs on this CPU, where it is not
    /// the f32 FMA: the tiles where Linux grants them, else the AVX-512 dot product.
    pub fn for_comparator(operands: crate::isa::Operands) -> Option<DotPeak> {
        use crate::isa::Operands;
        let tiles = crate::isa::tiles_granted(operands);
        match operands {
            Operands::Bf16 if tiles => Some(DotPeak::Bf16Tiles),
            Operands::Bf16 => Some(DotPeak::Bf16),
            Operands::I8 if tiles => Some(DotPeak::Int8Tiles),
            Operands::I8 => Some(DotPeak::Int8),
            Operands::F16 if tiles => Some(DotPeak::F16Tiles),
            _ => None,
        }
    }
}

/// Best-of-`trials` throughput of `kind`'s instruction in G(FL)OP/s (2 per product) over
/// `threads` threads, as [`fma_peak`] measures the FMA's, and the instruction's name; `None`
/// where the CPU lacks it (the kernels then widen, and the f32 roof is theirs).
pub fn dot_peak(kind: DotPeak, threads: usize, trials: usize) -> Option<(f64, &'static str)> {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::cpu::has;
        let (run, products, name): (fn() -> f32, usize, &str) = match kind {
            DotPeak::Bf16 if has!("avx512f") && has!("avx512bf16") => {
                (x86::bf16_dots_checked, 32, "vdpbf16ps")
            }
            DotPeak::Int8 if has!("avx512f") && has!("avx512vnni") => (x86::i8_dots_checked, 64, "vpdpbusd"),
            DotPeak::Bf16Tiles | DotPeak::Int8Tiles => return tile_peak(kind, threads, trials),
            DotPeak::F16Tiles => {
                let (bf16, _) = tile_peak(DotPeak::Bf16Tiles, threads, trials)?;
                return Some((bf16 / 3.0, "tdpbf16ps x3"));
            }
            _ => return None,
        };
        let mut best = 0.0f64;
        for _ in 0..trials.max(1) {
            let start = Instant::now();
            let sink: f32 = std::thread::scope(|s| {
                let handles: Vec<_> = (0..threads).map(|_| s.spawn(run)).collect();
                handles.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
            });
            let secs = start.elapsed().as_secs_f64().max(1e-9);
            std::hint::black_box(sink);
            let ops = threads as f64 * FMA_ITERS as f64 * CHAINS as f64 * products as f64 * 2.0;
            best = best.max(ops / secs / 1e9);
        }
        Some((best, name))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kind, threads, trials);
        None
    }
}

/// [`dot_peak`] of the AMX tile instructions, where Linux granted this process the tiles.
#[cfg(target_arch = "x86_64")]
fn tile_peak(kind: DotPeak, threads: usize, trials: usize) -> Option<(f64, &'static str)> {
    use crate::amx::{Op, available, peak_ops};
    let (op, name) = match kind {
        DotPeak::Bf16Tiles => (Op::Bf16, "tdpbf16ps"),
        DotPeak::Int8Tiles => (Op::I8, "tdpbssd"),
        _ => return None,
    };
    if !available(op) {
        return None;
    }
    let mut best = 0.0f64;
    for _ in 0..trials.max(1) {
        let start = Instant::now();
        let ops: f64 = std::thread::scope(|s| {
            // SAFETY: `available(op)` above.
            let handles: Vec<_> = (0..threads)
                .map(|_| s.spawn(move || unsafe { peak_ops(op) }))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
        });
        best = best.max(ops / start.elapsed().as_secs_f64().max(1e-9) / 1e9);
    }
    Some((best, name))
}

/// f32 lanes per FMA and the name of the widest instruction set this CPU has.
fn fma_lanes() -> (usize, &'static str) {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::cpu::has!("avx512f") {
            return (16, "avx512f");
        }
        if crate::cpu::has!("avx2") && crate::cpu::has!("fma") {
            return (8, "avx2+fma");
        }
    }
    (1, "portable")
}

/// One thread's share of a trial: [`CHAINS`] independent multiply-add chains on registers.
fn fma_chains() -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::cpu::has!("avx512f") {
            // SAFETY: AVX-512F was detected just above.
            return unsafe { x86::avx512() };
        }
        if crate::cpu::has!("avx2") && crate::cpu::has!("fma") {
            // SAFETY: AVX2 and FMA were detected just above.
            return unsafe { x86::avx2() };
        }
    }
    // Portable: a separate multiply and add (two FLOPs, like an FMA), which the compiler
    // keeps in registers; `mul_add` without hardware FMA would call a slow libm routine.
    let mut acc = [1.0f32; CHAINS];
    for _ in 0..FMA_ITERS {
        for a in &mut acc {
            *a = std::hint::black_box(*a * 0.999_999 + 1e-7);
        }
    }
    acc.iter().sum()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{CHAINS, FMA_ITERS};
    use crate::lanes::Vector;
    use std::arch::x86_64::{__m256, __m512};

    /// # Safety
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn avx512() -> f32 {
        // SAFETY: AVX-512F is enabled here for `__m512`.
        unsafe { chains::<__m512>() }
    }

    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn avx2() -> f32 {
        // SAFETY: AVX2 and FMA are enabled here for `__m256`.
        unsafe { chains::<__m256>() }
    }

    /// [`CHAINS`] named accumulators of type `$t` from `$init`, each updated [`FMA_ITERS`]
    /// times by `$step(acc)`; the array of them (named, so they live in registers: see
    /// [`chains`]).
    macro_rules! named_chains {
        ($init:expr, |$a:ident| $step:expr) => {{
            let (mut a0, mut a1, mut a2, mut a3, mut a4, mut a5, mut a6, mut a7) =
                ($init, $init, $init, $init, $init, $init, $init, $init);
            let (mut b0, mut b1, mut b2, mut b3, mut b4, mut b5, mut b6, mut b7) =
                ($init, $init, $init, $init, $init, $init, $init, $init);
            for _ in 0..FMA_ITERS {
                named_chains!(@step $a, $step, a0 a1 a2 a3 a4 a5 a6 a7 b0 b1 b2 b3 b4 b5 b6 b7);
            }
            [a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, b4, b5, b6, b7]
        }};
        (@step $a:ident, $step:expr, $($acc:ident)+) => {
            $($acc = {
                let $a = $acc;
                $step
            };)+
        };
    }

    /// [`bf16_dots`] where the features were detected (the caller's check).
    pub(super) fn bf16_dots_checked() -> f32 {
        // SAFETY: `dot_peak` picks this only where AVX-512F and BF16 were detected.
        unsafe { bf16_dots() }
    }

    /// [`i8_dots`] where the features were detected (the caller's check).
    pub(super) fn i8_dots_checked() -> f32 {
        // SAFETY: `dot_peak` picks this only where AVX-512F and VNNI were detected.
        unsafe { i8_dots() }
    }

    /// [`CHAINS`] independent `vdpbf16ps` chains; the sum of every lane.
    ///
    /// # Safety
    /// The CPU must support AVX-512F and AVX-512 BF16.
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn bf16_dots() -> f32 {
        use std::arch::x86_64::*;
        // 2⁻¹⁰ · 2⁻¹⁰ per product: the sums stay small and exact enough over the loop.
        // SAFETY: plain bits, no invalid values.
        let x: __m512bh = unsafe { std::mem::transmute(_mm512_set1_epi32(0x3A80_3A80)) };
        let all = named_chains!(_mm512_setzero_ps(), |a| _mm512_dpbf16_ps(a, x, x));
        all.iter().map(|&a| _mm512_reduce_add_ps(a)).sum()
    }

    /// [`CHAINS`] independent `vpdpbusd` chains; the sum of every lane.
    ///
    /// # Safety
    /// The CPU must support AVX-512F and AVX-512 VNNI.
    #[target_feature(enable = "avx512f,avx512vnni")]
    unsafe fn i8_dots() -> f32 {
        use std::arch::x86_64::*;
        let x = _mm512_set1_epi8(1);
        let all = named_chains!(_mm512_setzero_si512(), |a| _mm512_dpbusd_epi32(a, x, x));
        all.iter().map(|&a| _mm512_reduce_add_epi32(a) as f32).sum()
    }

    /// [`CHAINS`] independent FMA chains of [`FMA_ITERS`] steps each; the sum of every lane.
    ///
    /// # Safety
    /// `V`'s instruction set (inlined into the `#[target_feature]` wrappers above).
    #[inline(always)]
    unsafe fn chains<V: Vector>() -> f32 {
        // SAFETY: `V`'s instruction set (contract), for every vector operation below.
        unsafe {
            let (m, c) = (V::splat(0.999_999), V::splat(1e-7));
            let one = V::splat(1.0);
            // Named accumulators, so they live in registers (an array may be kept in memory,
            // and then the loop measures store forwarding, not the FMA pipes).
            let (mut a0, mut a1, mut a2, mut a3, mut a4, mut a5, mut a6, mut a7) =
                (one, one, one, one, one, one, one, one);
            let (mut b0, mut b1, mut b2, mut b3, mut b4, mut b5, mut b6, mut b7) =
                (one, one, one, one, one, one, one, one);
            for _ in 0..FMA_ITERS {
                a0 = V::mul_add(a0, m, c);
                a1 = V::mul_add(a1, m, c);
                a2 = V::mul_add(a2, m, c);
                a3 = V::mul_add(a3, m, c);
                a4 = V::mul_add(a4, m, c);
                a5 = V::mul_add(a5, m, c);
                a6 = V::mul_add(a6, m, c);
                a7 = V::mul_add(a7, m, c);
                b0 = V::mul_add(b0, m, c);
                b1 = V::mul_add(b1, m, c);
                b2 = V::mul_add(b2, m, c);
                b3 = V::mul_add(b3, m, c);
                b4 = V::mul_add(b4, m, c);
                b5 = V::mul_add(b5, m, c);
                b6 = V::mul_add(b6, m, c);
                b7 = V::mul_add(b7, m, c);
            }
            let all = [a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, b4, b5, b6, b7];
            debug_assert_eq!(all.len(), CHAINS);
            let mut sum = 0.0f32;
            for a in all {
                let mut lanes = [0.0f32; 16];
                // `lanes` holds the 16 floats of the widest vector.
                a.store(lanes.as_mut_ptr());
                sum += lanes[..V::LANES].iter().sum::<f32>();
            }
            sum
        }
    }
}

/// Best-of-passes bandwidth of `a[i] = b[i] + s·c[i]` over three f32 arrays of about
/// `total_bytes` together, split across `threads` contiguous chunks; returns GB/s and the
/// bytes one pass moved (12 per element: two reads, one write, as STREAM counts it).
pub fn triad_bandwidth(threads: usize, total_bytes: u64) -> (f64, u64) {
    let len = (total_bytes / 12).max(1024) as usize;
    let (mut a, b, c) = (vec![0.0f32; len], vec![1.0f32; len], vec![2.0f32; len]);
    let chunk = len.div_ceil(threads);
    let scalar = std::hint::black_box(3.0f32);
    let mut best = 0.0f64;
    for _ in 0..TRIAD_PASSES {
        let start = Instant::now();
        std::thread::scope(|s| {
            for ((a, b), c) in a.chunks_mut(chunk).zip(b.chunks(chunk)).zip(c.chunks(chunk)) {
                s.spawn(move || {
                    for ((a, b), c) in a.iter_mut().zip(b).zip(c) {
                        *a = b + scalar * c;
                    }
                });
            }
        });
        let secs = start.elapsed().as_secs_f64().max(1e-9);
        std::hint::black_box(&a);
        best = best.max(12.0 * len as f64 / secs / 1e9);
    }
    (best, 12 * len as u64)
}

/// The largest cache the kernel reports for CPU 0 (`/sys/.../cache/index*/size`), in bytes.
pub fn last_level_cache_bytes() -> Option<u64> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("size")).ok())
        .filter_map(|s| parse_cache_size(s.trim()))
        .max()
}

/// `32768K`, `2M` or `512` (bytes) as the kernel writes cache sizes.
fn parse_cache_size(text: &str) -> Option<u64> {
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => text.split_at(i),
        None => (text, ""),
    };
    let n: u64 = digits.parse().ok()?;
    match unit {
        "" => Some(n),
        "K" => n.checked_mul(1 << 10),
        "M" => n.checked_mul(1 << 20),
        "G" => n.checked_mul(1 << 30),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 20: the dot-product peaks exist exactly where their instructions do, and count
    /// their products (2 bf16 or 4 int8 per lane) above the f32 FMA's one. No timed ratio is
    /// asserted beyond "positive": the machine may be shared.
    #[test]
    fn dot_peaks_follow_the_detected_instructions() {
        #[cfg(target_arch = "x86_64")]
        {
            use crate::cpu::has;
            let bf16 = dot_peak(DotPeak::Bf16, 1, 1);
            assert_eq!(bf16.is_some(), has!("avx512f") && has!("avx512bf16"));
            let int8 = dot_peak(DotPeak::Int8, 1, 1);
            assert_eq!(int8.is_some(), has!("avx512f") && has!("avx512vnni"));
            for (peak, name) in bf16.into_iter().chain(int8) {
                assert!(peak.is_finite() && peak > 0.0, "{name}: {peak}");
            }
            // The tile peaks exist where Linux grants the tiles, and the comparator's roof
            // is theirs there.
            use crate::isa::{Operands, tiles_granted};
            for (kind, operands, name) in [
                (DotPeak::Bf16Tiles, Operands::Bf16, "tdpbf16ps"),
                (DotPeak::Int8Tiles, Operands::I8, "tdpbssd"),
                (DotPeak::F16Tiles, Operands::F16, "tdpbf16ps x3"),
            ] {
                let peak = dot_peak(kind, 1, 1);
                assert_eq!(peak.is_some(), tiles_granted(operands));
                if let Some((gops, instruction)) = peak {
                    assert_eq!(instruction, name);
                    assert!(gops.is_finite() && gops > 0.0, "{name}: {gops}");
                    assert_eq!(DotPeak::for_comparator(operands), Some(kind));
                }
            }
        }
    }

    #[test]
    fn cache_sizes_parse_as_the_kernel_writes_them() {
        assert_eq!(parse_cache_size("32768K"), Some(32 << 20));
        assert_eq!(parse_cache_size("2M"), Some(2 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("12X"), None);
        assert_eq!(parse_cache_size(""), None);
    }
}
