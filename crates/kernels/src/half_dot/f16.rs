//! 16-bit storage widened in registers for f32 FMA on AVX-512F: dense ([`DenseHalves`]) and
//! 2:4 compact ([`TwoOfFourHalves`]), on the parent module's driver (rows in lanes, tokens
//! broadcast, K blocks, per-thread scratch). f16 widens with `vcvtph2ps`; bf16 with a zero
//! extension and a 16-bit shift (its bits are an f32's top half), the [`Widen`] of each.
//!
//! Why bf16 too: where `vdpbf16ps` is no faster than the f32 FMA it replaces, widening wins.
//! Measured on an Intel Xeon (family 6, model 207, Emerald Rapids; 2 vCPUs), one thread:
//! `vdpbf16ps` 86.6 GFLOP/s against the FMA's 175.4 (0.49×; `examples/fma_peak.rs`), and
//! MKL's own bf16 GEMM ran at about half its sgemm there. On Zen 5 the dot-product runs at
//! the FMA's instruction rate, twice its FLOPs, and the pairs kernel stays the faster one;
//! the parent module measures which (`bf16_widens`).
//!
//! Why not AVX-512 FP16: its multiply-adds (`vfmadd231ph`) accumulate in f16, 11 significant
//! bits, and a 4096-term sum in f16 loses most of them; no x86 instruction short of AMX-FP16
//! (Granite Rapids) multiplies f16 into f32 sums. The best f16 comparator with f32
//! accumulation on AVX-512 is therefore the f32 multiply-add rate on f16 *storage*: the
//! weights stream as f16 (half the bytes of f32, which is what decides few-token products)
//! and are widened in registers with `vcvtph2ps`, never into f32 panels in memory.
//!
//! * **Dense.** A line holds one panel's 16 rows at K step `2q` (low 32 bytes) and `2q + 1`
//!   (high 32 bytes), `[block][pair][panel]` as the bf16 pairs are, so the stream and its
//!   prefetches are the bf16 kernel's. Each half is one `vcvtph2ps` into 16 rows of f32; the
//!   activations are packed per call as f32 pairs per token and broadcast.
//! * **2:4.** A line holds one panel's 16 rows' first kept value of a group (low half) and
//!   second (high half), the two 2-bit positions one nibble per row as in the bf16 layout.
//!   Per token the group's four activations are broadcast to every 128-bit lane and one
//!   `vpermilps` per kept value hands each row its own (the control is the nibble, moved
//!   into its lane by `vpmultishiftqb`: `vpermilps` reads bits 1:0, so the first position
//!   needs no masking and the second one shift). Two shuffles and two FMAs per group of four
//!   per row, where dense takes four FMAs: where the product is compute-bound the two are
//!   level, and where the weight bytes decide (few tokens) the 2:4 stream is 9/16 of dense.
//! * **Widening once per K block.** A tile of eight tokens converts each weight vector once
//!   for eight FMAs; when a task runs several tiles over a K block, the first converts the
//!   block into a per-thread f32 copy (24 KiB dense, 16 KiB 2:4: L1) and every tile reads
//!   that, so a many-token product pays the conversions once per task instead of per tile.
//!
//! Numerics: a product of two f16 (11-bit significands) is exact in f32, so as for bf16 the
//! only error is the f32 summation, `|ŷ − y| ≤ γ_K · Σ_k |w·x|` with `γ_K ≈ K · 2⁻²⁴`;
//! f16 subnormals convert exactly.

use super::{DENSE_PANELS, SPARSE_PANELS, pack_dense, pack_two_of_four};
use super::{
    FAR, KC_GROUPS, KC_PAIRS, LANES, Line, Packed, Pass, TOKENS, TileFn, load_sums, product, store_sums,
};
use std::arch::x86_64::*;
use std::cell::RefCell;
use std::thread::LocalKey;

thread_local! {
    /// Dense activations packed as f32 pairs per token, per calling thread.
    static PAIRS: RefCell<Vec<[f32; 2]>> = const { RefCell::new(Vec::new()) };
    /// 2:4 activations packed as f32 groups of four per token, per calling thread.
    static QUADS: RefCell<Vec<[f32; 4]>> = const { RefCell::new(Vec::new()) };
    /// A K block's weights widened to f32 (two zmm per line), per worker thread.
    static WIDE: RefCell<Vec<__m512>> = const { RefCell::new(Vec::new()) };
}

/// Whether this CPU runs the kernels: AVX-512F (with F16C's conversions) and VBMI
/// (`vpmultishiftqb`, for the 2:4 controls), detected at run time.
pub(in crate::half_dot) fn available() -> bool {
    crate::cpu::has!("avx512f") && crate::cpu::has!("f16c") && crate::cpu::has!("avx512vbmi")
}

/// How a 16-bit storage format becomes f32 in registers.
pub(crate) trait Widen: Copy + Send + Sync + std::fmt::Debug + PartialEq + 'static {
    /// 16 values (one half of a line) as f32.
    ///
    /// # Safety
    /// AVX-512F (called from the tiles, which enable it).
    unsafe fn zmm(h: __m256i) -> __m512;
    /// 8 values as f32.
    ///
    /// # Safety
    /// AVX2 and F16C (called from the activation packer, which enables them).
    unsafe fn ymm(h: __m128i) -> __m256;
    /// One value as f32.
    fn one(bits: u16) -> f32;
    /// The low value of `h` as f32 in the low lane (the others unspecified).
    ///
    /// # Safety
    /// F16C (callers enable it with AVX-512F).
    unsafe fn xmm(h: __m128i) -> __m128;
}

/// IEEE binary16: `vcvtph2ps` (exact, subnormals included).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct F16;

/// bfloat16: zero-extend to 32 bits and shift into the top half (exact, subnormals kept).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Bf16;

impl Widen for F16 {
    #[inline(always)]
    unsafe fn zmm(h: __m256i) -> __m512 {
        // SAFETY: AVX-512F (contract).
        unsafe { _mm512_cvtph_ps(h) }
    }
    #[inline(always)]
    unsafe fn ymm(h: __m128i) -> __m256 {
        // SAFETY: F16C (contract).
        unsafe { _mm256_cvtph_ps(h) }
    }
    fn one(bits: u16) -> f32 {
        half::f16::from_bits(bits).to_f32()
    }
    #[inline(always)]
    unsafe fn xmm(h: __m128i) -> __m128 {
        // SAFETY: F16C (contract).
        unsafe { _mm_cvtph_ps(h) }
    }
}

impl Widen for Bf16 {
    #[inline(always)]
    unsafe fn zmm(h: __m256i) -> __m512 {
        // SAFETY: AVX-512F (contract).
        unsafe { _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h))) }
    }
    #[inline(always)]
    unsafe fn ymm(h: __m128i) -> __m256 {
        // SAFETY: AVX2 (contract).
        unsafe { _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h))) }
    }
    fn one(bits: u16) -> f32 {
        half::bf16::from_bits(bits).to_f32()
    }
    #[inline(always)]
    unsafe fn xmm(h: __m128i) -> __m128 {
        // SAFETY: SSE2, which every x86-64 CPU has.
        unsafe { _mm_castsi128_ps(_mm_slli_epi32::<16>(h)) }
    }
}

/// A line of two 16-row halves of 16-bit values (bits): `lo[r]` in the low 32 bytes, `hi[r]`
/// in the high.
fn halves(lo: [u16; LANES], hi: [u16; LANES]) -> Line {
    let at = |i: usize| if i < LANES { lo[i] } else { hi[i - LANES] };
    Line(std::array::from_fn(|j| {
        u32::from(at(2 * j)) | (u32::from(at(2 * j + 1)) << 16)
    }))
}

/// Dense 16-bit weights of format `W`, [`DENSE_PANELS`] panels per block, K steps of two.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DenseHalves<W> {
    n: usize,
    k: usize,
    /// `[block][pair][panel]` lines.
    w: Vec<Line>,
    format: std::marker::PhantomData<W>,
}

impl<W: Widen> DenseHalves<W> {
    /// Pack the row-major `n × k` weights (their bits).
    pub(crate) fn new(w: &[u16], n: usize, k: usize) -> DenseHalves<W> {
        let w = pack_dense(w, n, k, |lo, hi| halves(*lo, *hi));
        DenseHalves {
            n,
            k,
            w,
            format: std::marker::PhantomData,
        }
    }

    /// `y[n × m] = W · x[k × m]` (x as bits of the same format), f32 sums, on `threads`
    /// workers of the current rayon pool (1 runs on the calling thread).
    ///
    /// # Safety
    /// [`available`] returned true; `x.len() == k·m` and `y.len() == n·m`.
    pub(crate) unsafe fn gemm(&self, threads: usize, x: &[u16], y: &mut [f32], m: usize) {
        debug_assert!(x.len() == self.k * m && y.len() == self.n * m);
        // SAFETY: the caller's contract.
        unsafe { product(self, threads, x, y, m) }
    }
}

/// 2:4 16-bit weights of format `W`: per row and group of four the two kept values and one
/// nibble of positions, packed per block of [`SPARSE_PANELS`] panels.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TwoOfFourHalves<W> {
    n: usize,
    k: usize,
    /// `[block][group][panel]` lines: first kept values low, second high.
    values: Vec<Line>,
    /// `[block][group][panel]`: row `r`'s nibble `ia | ib << 2` in bits `4r..`.
    nibbles: Vec<u64>,
    format: std::marker::PhantomData<W>,
}

impl<W: Widen> TwoOfFourHalves<W> {
    /// Pack `n` rows of 2:4 weights as the stored format holds them (see
    /// [`super::TwoOfFourPairs::new`]): two kept values (bits) per row and group, 2-bit
    /// positions four to a byte, `row_bytes` per row.
    pub(crate) fn new(
        n: usize,
        k: usize,
        values: &[u16],
        indices: &[u8],
        row_bytes: usize,
    ) -> TwoOfFourHalves<W> {
        let (values, nibbles) = pack_two_of_four(n, k, (values, indices, row_bytes), |a, b| halves(*a, *b));
        TwoOfFourHalves {
            n,
            k,
            values,
            nibbles,
            format: std::marker::PhantomData,
        }
    }

    /// `y[n × m] = W · x[k × m]` (x as bits of the same format), f32 sums, on `threads`
    /// workers of the current rayon pool (1 runs on the calling thread).
    ///
    /// # Safety
    /// [`available`] returned true; `x.len() == k·m` and `y.len() == n·m`.
    pub(crate) unsafe fn spmm(&self, threads: usize, x: &[u16], y: &mut [f32], m: usize) {
        debug_assert!(x.len() == self.k * m && y.len() == self.n * m);
        // SAFETY: the caller's contract.
        unsafe { product(self, threads, x, y, m) }
    }
}

/// Where a register tile reads its widened weights: converting the lines itself, or
/// from the K block's f32 copy that the first tile of the pass made.
#[derive(Clone, Copy)]
enum Source {
    /// Widening on every load.
    Convert,
    /// The per-thread f32 copy, two zmm per line, from the block's first step.
    Wide(*const __m512),
}

/// The per-thread f32 copy of `lines` lines from `from`, made by the first tile of a pass
/// that has others after it; `None` when the tile is alone (converting in registers costs
/// the same then).
///
/// # Safety
/// AVX-512F; `from` addresses `lines` lines.
#[target_feature(enable = "avx512f")]
unsafe fn widen_block<W: Widen>(from: *const Line, lines: usize, pass: Pass) -> Source {
    if pass.prefetch.1 < 2 {
        return Source::Convert;
    }
    WIDE.with(|w| {
        let mut wide = w.borrow_mut();
        if pass.prefetch.0 == 0 {
            wide.clear();
            for i in 0..lines {
                // SAFETY: line i < lines (contract); a line is two aligned 32-byte halves of
                // 16 values each; AVX-512F is enabled here.
                let (lo, hi) = unsafe {
                    let line = from.add(i).cast::<__m256i>();
                    (
                        W::zmm(_mm256_load_si256(line)),
                        W::zmm(_mm256_load_si256(line.add(1))),
                    )
                };
                wide.push(lo);
                wide.push(hi);
            }
        }
        // Later tiles of the pass read what the first wrote: the tiles of a task run one
        // after another on its thread, over the same block and K steps.
        Source::Wide(wide.as_ptr())
    })
}

/// Line `i`'s two halves as f32, from `w` or the widened copy.
///
/// # Safety
/// AVX-512F; line `i` is in range of `w` (and of the copy when `Wide`).
#[inline(always)]
unsafe fn widened<W: Widen>(source: Source, w: *const Line, i: usize) -> (__m512, __m512) {
    match source {
        // SAFETY: the contract.
        Source::Wide(wide) => unsafe { (wide.add(2 * i).read(), wide.add(2 * i + 1).read()) },
        Source::Convert => {
            // SAFETY: the contract; a line is two aligned 32-byte halves.
            unsafe {
                let line = w.add(i).cast::<__m256i>();
                (
                    W::zmm(_mm256_load_si256(line)),
                    W::zmm(_mm256_load_si256(line.add(1))),
                )
            }
        }
    }
}

impl<W: Widen> Packed for DenseHalves<W> {
    type Step = [f32; 2];
    const PANELS: usize = DENSE_PANELS;
    const KC: usize = KC_PAIRS;

    fn shape(&self) -> (usize, usize) {
        (self.n, self.k)
    }

    fn steps(&self) -> usize {
        self.k.div_ceil(2)
    }

    fn scratch() -> &'static LocalKey<RefCell<Vec<[f32; 2]>>> {
        &PAIRS
    }

    fn pack_tile(x: &[u16], k: usize, m: usize, tile: usize, out: &mut [[f32; 2]]) {
        // SAFETY: `available` (AVX-512F, F16C) was checked before any product packs a tile.
        unsafe { pack_f32_steps::<W, 2>(x, k, m, tile, out) }
    }

    unsafe fn tile(
        &self,
        (panels, tokens): (usize, usize),
        b: usize,
        (s0, s1): (usize, usize),
        x: *const [f32; 2],
        acc: *mut f32,
        pass: Pass,
    ) {
        let f = pick_tile!(dense_tile[W], panels, tokens, [1, 2, 3]);
        let w = self.w[(b * self.steps() + s0) * DENSE_PANELS..].as_ptr();
        // SAFETY: the trait's contract: block `b` holds `steps` pairs of `DENSE_PANELS`
        // lines from `w`'s start, and the tile reads `s1 - s0` of them.
        unsafe {
            let source = widen_block::<W>(w, (s1 - s0) * DENSE_PANELS, pass);
            f((w, source), x.cast(), s1 - s0, acc, pass)
        }
    }
}

impl<W: Widen> Packed for TwoOfFourHalves<W> {
    type Step = [f32; 4];
    const PANELS: usize = SPARSE_PANELS;
    const KC: usize = KC_GROUPS;

    fn shape(&self) -> (usize, usize) {
        (self.n, self.k)
    }

    fn steps(&self) -> usize {
        self.k / 4
    }

    fn scratch() -> &'static LocalKey<RefCell<Vec<[f32; 4]>>> {
        &QUADS
    }

    fn pack_tile(x: &[u16], k: usize, m: usize, tile: usize, out: &mut [[f32; 4]]) {
        // SAFETY: as for the dense layout.
        unsafe { pack_f32_steps::<W, 4>(x, k, m, tile, out) }
    }

    unsafe fn tile(
        &self,
        (panels, tokens): (usize, usize),
        b: usize,
        (s0, s1): (usize, usize),
        x: *const [f32; 4],
        acc: *mut f32,
        pass: Pass,
    ) {
        let f = pick_tile!(two_of_four_tile[W], panels, tokens, [1, 2]);
        let at = (b * self.steps() + s0) * SPARSE_PANELS;
        let (v, nib) = (self.values[at..].as_ptr(), self.nibbles[at..].as_ptr());
        // SAFETY: the trait's contract: block `b` holds `steps` groups of `SPARSE_PANELS`
        // lines and nibble words from `at`, and the tile reads `s1 - s0` of them.
        unsafe {
            let source = widen_block::<W>(v, (s1 - s0) * SPARSE_PANELS, pass);
            f(((v, source), nib), x.cast(), s1 - s0, acc, pass)
        }
    }
}

/// Tile `tile` of the `k × m` 16-bit activations as `[step][TOKENS]` runs of `S` f32 (K
/// steps of `S`; zero past `k` and `m`).
///
/// # Safety
/// AVX2, F16C; `x.len() == k·m`; `out` holds `⌈k/S⌉ · TOKENS` steps.
#[target_feature(enable = "avx2,f16c")]
unsafe fn pack_f32_steps<W: Widen, const S: usize>(
    x: &[u16],
    k: usize,
    m: usize,
    tile: usize,
    out: &mut [[f32; S]],
) {
    let t0 = tile * TOKENS;
    let mut rows = [[0f32; TOKENS]; S];
    for (q, dst) in out.chunks_exact_mut(TOKENS).enumerate() {
        for (j, row) in rows.iter_mut().enumerate() {
            let kk = S * q + j;
            if kk < k && t0 + TOKENS <= m {
                // SAFETY: 8 readable 16-bit values (16 bytes) of row `kk`, 8 writable f32;
                // AVX2 and F16C are enabled here.
                unsafe {
                    let h = _mm_loadu_si128(x[kk * m + t0..].as_ptr().cast());
                    _mm256_storeu_ps(row.as_mut_ptr(), W::ymm(h));
                }
            } else {
                for (t, v) in row.iter_mut().enumerate() {
                    let tok = t0 + t;
                    *v = if kk < k && tok < m {
                        W::one(x[kk * m + tok])
                    } else {
                        0.0
                    };
                }
            }
        }
        // A transpose of S × 8 floats, left to the compiler: it is a sliver of the product.
        for (t, d) in dst.iter_mut().enumerate() {
            *d = std::array::from_fn(|j| rows[j][t]);
        }
    }
}

/// `P` panels × `T` tokens of dense sums over `pairs` K-pairs, in `U` copies.
///
/// # Safety
/// AVX-512F is available; `w.0` addresses `pairs · DENSE_PANELS` lines (and `w.1` their
/// widened copy when `Wide`) and `x` `pairs · TOKENS` pairs; `acc` has `T` rows of
/// `DENSE_PANELS · 16` floats (read when `pass.load`), written by no one else meanwhile.
#[target_feature(enable = "avx512f")]
unsafe fn dense_tile<W: Widen, const P: usize, const T: usize, const U: usize>(
    (w, source): (*const Line, Source),
    x: *const u32,
    pairs: usize,
    acc: *mut f32,
    pass: Pass,
) {
    let x = x.cast::<f32>();
    let mut next = pass.prefetch.0;
    // A macro, not a closure as in the bf16 tiles: with two multiply-adds per sum and step
    // the closure grew past what LLVM inlines for the wider tiles, and a step that is a call
    // keeps its 24 sums in memory.
    macro_rules! step {
        ($a:expr, $q:expr) => {{
            let q = $q;
            if q == next {
                next += pass.prefetch.1;
                for p in 0..P {
                    // A hint: an address past the weights fetches nothing that matters.
                    let ahead = w.wrapping_add((q + KC_PAIRS) * DENSE_PANELS + p);
                    _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                    let far = w.wrapping_add((q + FAR * KC_PAIRS) * DENSE_PANELS + p);
                    _mm_prefetch::<_MM_HINT_T1>(far.cast());
                }
            }
            let wv: [(__m512, __m512); P] = std::array::from_fn(|p| {
                // SAFETY: pair q < pairs of the block's lines.
                unsafe { widened::<W>(source, w, q * DENSE_PANELS + p) }
            });
            for t in 0..T {
                // SAFETY: pair q, token t < TOKENS of the packed tile.
                let (x0, x1) = unsafe {
                    let at = x.add(2 * (q * TOKENS + t));
                    (_mm512_set1_ps(at.read()), _mm512_set1_ps(at.add(1).read()))
                };
                for (ap, &(lo, hi)) in $a.iter_mut().zip(&wv) {
                    ap[t] = _mm512_fmadd_ps(hi, x1, _mm512_fmadd_ps(lo, x0, ap[t]));
                }
            }
        }};
    }
    // SAFETY: the scratch rows (contract).
    let mut a = unsafe { start::<P, T, U>(acc, DENSE_PANELS * LANES, pass.load) };
    let mut q = 0;
    while q + U <= pairs {
        for (u, au) in a.iter_mut().enumerate() {
            step!(au, q + u);
        }
        q += U;
    }
    for q in q..pairs {
        step!(a[0], q);
    }
    // SAFETY: as for the start.
    unsafe { finish(&a, acc, DENSE_PANELS * LANES) };
}

/// `U` copies of a register tile's sums, the first from the scratch (when `load`) or zero.
///
/// # Safety
/// AVX-512F; `acc` has `T` rows of `stride ≥ 16·P` readable floats when `load`.
#[inline(always)]
unsafe fn start<const P: usize, const T: usize, const U: usize>(
    acc: *const f32,
    stride: usize,
    load: bool,
) -> [[[__m512; T]; P]; U] {
    // SAFETY: AVX-512F (contract).
    let mut a = [[[unsafe { _mm512_setzero_ps() }; T]; P]; U];
    // SAFETY: the contract.
    a[0] = unsafe { load_sums::<P, T>(acc, stride, load) };
    a
}

/// Add the copies of a register tile's sums and store the total into the scratch.
///
/// # Safety
/// AVX-512F; `acc` has `T` rows of `stride ≥ 16·P` writable floats.
#[inline(always)]
unsafe fn finish<const P: usize, const T: usize, const U: usize>(
    a: &[[[__m512; T]; P]; U],
    acc: *mut f32,
    stride: usize,
) {
    let mut total = a[0];
    for au in &a[1..] {
        for (tp, up) in total.iter_mut().zip(au) {
            for (tv, &uv) in tp.iter_mut().zip(up) {
                // SAFETY: AVX-512F (contract).
                *tv = unsafe { _mm512_add_ps(*tv, uv) };
            }
        }
    }
    // SAFETY: the contract.
    unsafe { store_sums(&total, acc, stride) };
}

/// `vpmultishiftqb` offsets that put row `r`'s nibble (bits `4r..4r+4` of the panel word) in
/// the low bits of lane `r` (the other bytes of a lane do not matter to `vpermilps`).
const NIBBLE_SHIFTS: [u8; 64] = {
    let mut s = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        s[i] = ((i / 4) * 4 % 64) as u8;
        i += 1;
    }
    s
};

/// `P` panels × `T` tokens of 2:4 sums over `groups` groups of four, in `U` copies.
///
/// # Safety
/// AVX-512F/VBMI are available; `vn.0.0` addresses `groups · SPARSE_PANELS` lines (and
/// `vn.0.1` their widened copy when `Wide`), `vn.1` as many nibble words, `x` `groups ·
/// TOKENS` groups of four f32; `acc` has `T` rows of `SPARSE_PANELS · 16` floats (read when
/// `pass.load`), written by no one else meanwhile.
#[target_feature(enable = "avx512f,avx512vbmi")]
unsafe fn two_of_four_tile<W: Widen, const P: usize, const T: usize, const U: usize>(
    ((v, source), nib): ((*const Line, Source), *const u64),
    x: *const u32,
    groups: usize,
    acc: *mut f32,
    pass: Pass,
) {
    let x = x.cast::<f32>();
    // SAFETY: 64 readable bytes.
    let shifts = unsafe { _mm512_loadu_si512(NIBBLE_SHIFTS.as_ptr().cast()) };
    let mut next = pass.prefetch.0;
    // A macro for the reason the dense tile's is.
    macro_rules! step {
        ($a:expr, $g:expr) => {{
            let g = $g;
            let at = g * SPARSE_PANELS;
            if g == next {
                next += pass.prefetch.1;
                // Hints, as in the bf16 2:4 tile.
                for p in 0..P {
                    _mm_prefetch::<_MM_HINT_T0>(v.wrapping_add(at + KC_GROUPS * SPARSE_PANELS + p).cast());
                    _mm_prefetch::<_MM_HINT_T1>(
                        v.wrapping_add(at + FAR * KC_GROUPS * SPARSE_PANELS + p).cast(),
                    );
                }
                if g.is_multiple_of(4) {
                    _mm_prefetch::<_MM_HINT_T0>(nib.wrapping_add(at + KC_GROUPS * SPARSE_PANELS).cast());
                    _mm_prefetch::<_MM_HINT_T1>(
                        nib.wrapping_add(at + FAR * KC_GROUPS * SPARSE_PANELS).cast(),
                    );
                }
            }
            let wv: [(__m512, __m512); P] = std::array::from_fn(|p| {
                // SAFETY: group g < groups of the block's lines.
                unsafe { widened::<W>(source, v, at + p) }
            });
            let ctrl: [(__m512i, __m512i); P] = std::array::from_fn(|p| {
                // SAFETY: as above, for the nibble words.
                let word = _mm512_set1_epi64(unsafe { nib.add(at + p).read() } as i64);
                let first = _mm512_multishift_epi64_epi8(shifts, word);
                (first, _mm512_srli_epi32::<2>(first))
            });
            for t in 0..T {
                // SAFETY: group g, token t < TOKENS of the packed tile: four f32.
                let quad = _mm512_broadcast_f32x4(unsafe { _mm_loadu_ps(x.add(4 * (g * TOKENS + t))) });
                for ((ap, &(va, vb)), &(ca, cb)) in $a.iter_mut().zip(&wv).zip(&ctrl) {
                    let (xa, xb) = (_mm512_permutevar_ps(quad, ca), _mm512_permutevar_ps(quad, cb));
                    ap[t] = _mm512_fmadd_ps(vb, xb, _mm512_fmadd_ps(va, xa, ap[t]));
                }
            }
        }};
    }
    // SAFETY: the scratch rows (contract).
    let mut a = unsafe { start::<P, T, U>(acc, SPARSE_PANELS * LANES, pass.load) };
    let mut g = 0;
    while g + U <= groups {
        for (u, au) in a.iter_mut().enumerate() {
            step!(au, g + u);
        }
        g += U;
    }
    for g in g..groups {
        step!(a[0], g);
    }
    // SAFETY: as for the start.
    unsafe { finish(&a, acc, SPARSE_PANELS * LANES) };
}
