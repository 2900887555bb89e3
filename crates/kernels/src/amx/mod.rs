//! The dense bf16 and int8 comparators on AMX tiles (issue 20): `y[N×M] = w[N×K] · x[K×M]`
//! with `tdpbf16ps` (bf16 pairs, f32 sums) and `tdpbssd` (signed int8 quads, exact i32 sums).
//!
//! Why: on a CPU with AMX the vendor library's dense bf16 and int8 run on the tiles, four to
//! five times the AVX-512 dot products; a sparse kernel judged against anything slower is
//! judged against a straw man. Stable Rust has no AMX intrinsics, so the instructions are
//! written in `asm!` (tract-linalg and oneDNN do the same in their own assemblers).
//!
//! * **Permission.** Linux hands out tile data only to a process that asks
//!   (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`); [`available`] asks once, after
//!   checking CPUID and XCR0, and the answer holds for every thread of the process.
//! * **Tiles.** All eight are configured 16 rows × 64 bytes. A *weight tile* (A) is 16 rows
//!   of one panel × one K step (32 bf16 or 64 int8), row-major; an *activation tile* (B) is
//!   one K step × 16 tokens in the pair/quad layout the instructions read (row `j` holds, per
//!   token, k = 2j, 2j+1 for bf16 and 4j…4j+3 for int8); a sum tile (C) is 16 rows × 16
//!   tokens of f32 or i32. The register tile is 2 panels × 2 token tiles (C in tmm0–3, A in
//!   tmm4–5, B in tmm6–7), narrower at the edges.
//! * **Layout.** The weights are packed once ([`AmxWeights`]): `[panel][step]` tiles of
//!   1 KiB, N padded to whole panels and K to whole steps with zeros. The activations are
//!   packed per call into `[token tile][step]` tiles (masked AVX-512 loads, zero-extended
//!   and shifted into pairs/quads), padded with zero tokens and zero k.
//! * **Blocking.** A task owns a range of panel pairs and of token tiles (a [`TaskGrid`]);
//!   it walks its tokens in blocks of [`TOKEN_TILES`] tiles and K in blocks of [`KC`] steps;
//!   a panel pair's weight tiles of a K block stay in L1 across the token tiles. Where a
//!   token block is at most two token tiles (32 tokens), one register tile runs each panel
//!   pair's whole K, its weight tiles made a step at a time ([`whole_k`]); where a larger
//!   block's activations fit [`WHOLE_K_ACTIVATIONS`], each panel pair still walks its whole
//!   K a block at a time, so the weights stream in address order; above, each K block of the
//!   activations stays in L2 while every panel pair meets it. Sums live in a task-local
//!   buffer of tiles between K blocks and are copied into `y` at the end.
//! * **Sparse weights.** 2:4 is expanded into weight tiles on the fly ([`SparseTiles`]);
//!   block sparsity keeps only the tiles holding a non-zero and skips the rest
//!   ([`KeptTiles`], `blocks.rs`). Both share the packing, the task grid and the register
//!   tile steps.
//! * **Semantics.** bf16: products of bf16 pairs summed into f32 by the instruction (inputs
//!   and outputs denormal-flushed, round-to-nearest-even), so the error bound is the f32
//!   summation's as for the AVX-512 dot product. int8: `tdpbssd` multiplies signed by
//!   signed bytes and adds into i32 modulo 2^32; the true sums fit i32 for
//!   `K ≤ INT8_MAX_K`, so the result is exact.

mod blocks;
mod split;

pub(super) use blocks::KeptTiles;
pub(super) use split::{F16Tiles, f16_available};

use super::schedule::TaskGrid;
use super::shared_output::{SharedOutput, trivial_product};
use rayon::prelude::*;
use std::arch::asm;
use std::arch::x86_64::*;
use std::cell::RefCell;
use std::sync::OnceLock;

/// Rows of a tile (and tokens of a sum tile).
const ROWS: usize = 16;
/// Bytes of a tile row.
const ROW_BYTES: usize = 64;
/// K steps per K block: a panel pair's block of weight tiles is `2 · KC` KiB, which 2:4 writes
/// to L1 and reads back beside the activations' (16 thrashed the 48 KiB L1 of a Sapphire
/// Rapids core: 2:4 bf16 at 16 tokens ran 0.8× dense with 16, 1.4× with 8; dense alike).
const KC: usize = 8;
/// Activation bytes of a token block small enough to sweep a panel pair's whole K over (a
/// quarter of a Sapphire Rapids core's 2 MiB L2): then weights stream in address order. At
/// 1 MiB, bf16 2048³ (16 token tiles × 64 KiB) swept whole K and ran 1473–1559 GFLOP/s
/// against 1647–1816 with K blocks outermost; 128 tokens at 4096² alike either way.
const WHOLE_K_ACTIVATIONS: usize = 512 << 10;
/// Token tiles per token block of a task.
const TOKEN_TILES: usize = 16;
/// Most panel pairs per task, so that a task's sum buffer stays in L2.
const MAX_PAIRS: usize = 8;

thread_local! {
    /// The packed activations of the calling thread's last product, reused so that a repeated
    /// product does not page-fault fresh megabytes every call.
    static ACTIVATIONS: RefCell<Vec<Tile>> = const { RefCell::new(Vec::new()) };
    /// A task's expanded 2:4 weight tiles, reused per worker thread.
    static EXPANDED: RefCell<Vec<Tile>> = const { RefCell::new(Vec::new()) };
    /// A task's sums between K blocks, reused per worker thread likewise.
    static SUMS: RefCell<Vec<Tile>> = const { RefCell::new(Vec::new()) };
}

/// One tile's worth of bytes: 16 rows of 64, line-aligned.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C, align(64))]
pub(super) struct Tile([u8; ROWS * ROW_BYTES]);

const ZERO_TILE: Tile = Tile([0; ROWS * ROW_BYTES]);

/// The operand type of a product, which picks the instruction and the K step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    /// bf16 × bf16 → f32, `tdpbf16ps`, 32 k per step.
    Bf16,
    /// i8 × i8 → i32, `tdpbssd`, 64 k per step.
    I8,
}

impl Op {
    /// Bytes per operand.
    fn elem(self) -> usize {
        match self {
            Op::Bf16 => 2,
            Op::I8 => 1,
        }
    }

    /// k values per step (one 64-byte tile row of weights).
    pub(super) fn k_step(self) -> usize {
        ROW_BYTES / self.elem()
    }
}

/// An operand stored as its little-endian bytes in a tile.
pub(super) trait Operand: Copy + Send + Sync {
    /// The product this operand feeds.
    const OP: Op;
    /// Write the value's bytes at the start of `out`.
    fn put(self, out: &mut [u8]);
}

impl Operand for u16 {
    const OP: Op = Op::Bf16;
    fn put(self, out: &mut [u8]) {
        out[..2].copy_from_slice(&self.to_le_bytes());
    }
}

impl Operand for i8 {
    const OP: Op = Op::I8;
    fn put(self, out: &mut [u8]) {
        out[0] = self as u8;
    }
}

/// A sum the tiles produce: f32 for bf16, i32 for int8.
///
/// # Safety
/// Four bytes, every bit pattern a valid value (the sums are copied from the tiles' bytes).
pub(super) unsafe trait Sum: Copy + Default + Send + Sync {}

// SAFETY: 4 bytes, any bits are an f32.
unsafe impl Sum for f32 {}
// SAFETY: 4 bytes, any bits are an i32.
unsafe impl Sum for i32 {}

/// Whether this process runs the tile kernels for `op`: the CPU has AMX-TILE and the
/// instruction's extension (AMX-BF16 / AMX-INT8) and AVX-512F/BW/VL (packing), the OS
/// enables tile state in XCR0, and Linux granted this process tile data. Asked once.
pub(super) fn available(op: Op) -> bool {
    static GRANTED: OnceLock<(bool, bool)> = OnceLock::new();
    let (bf16, int8) = *GRANTED.get_or_init(detect);
    match op {
        Op::Bf16 => bf16,
        Op::I8 => int8,
    }
}

/// (bf16, int8) tile support, asking Linux for tile data if the CPU has any.
fn detect() -> (bool, bool) {
    #[cfg(target_os = "linux")]
    {
        if !crate::cpu::allows(crate::cpu::IsaLevel::Amx) {
            return (false, false);
        }
        let avx512 =
            crate::cpu::has!("avx512f") && crate::cpu::has!("avx512bw") && crate::cpu::has!("avx512vl");
        // CPUID.(EAX=7,ECX=0):EDX bit 24 AMX-TILE, 22 AMX-BF16, 25 AMX-INT8.
        let leaf7 = __cpuid_count(7, 0).edx;
        let (tile, bf16, int8) = (leaf7 >> 24 & 1 == 1, leaf7 >> 22 & 1 == 1, leaf7 >> 25 & 1 == 1);
        // CPUID.1:ECX bit 27: the OS uses XSAVE, so XGETBV is allowed.
        let osxsave = __cpuid(1).ecx >> 27 & 1 == 1;
        if !(avx512 && tile && (bf16 || int8) && osxsave) {
            return (false, false);
        }
        let xcr0_low: u32;
        // SAFETY: XGETBV with ECX = 0 reads XCR0; OSXSAVE (checked above) makes it legal.
        unsafe {
            asm!("xgetbv", in("ecx") 0u32, out("eax") xcr0_low, out("edx") _, options(nomem, nostack, preserves_flags));
        }
        // XCR0 bits 17 (TILECFG) and 18 (TILEDATA).
        if xcr0_low >> 17 & 3 != 3 || !request_tile_data() {
            return (false, false);
        }
        (bf16, int8)
    }
    #[cfg(not(target_os = "linux"))]
    (false, false)
}

/// `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`: Linux (5.16+) enables tile data
/// for this process; false where it refuses or predates the call.
#[cfg(target_os = "linux")]
fn request_tile_data() -> bool {
    const SYS_ARCH_PRCTL: u64 = 158;
    const ARCH_REQ_XCOMP_PERM: u64 = 0x1023;
    const XFEATURE_XTILEDATA: u64 = 18;
    let ret: i64;
    // SAFETY: the syscall takes two integers and touches no memory of ours; `syscall`
    // clobbers rcx and r11, declared.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL as i64 => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret == 0
}

/// The tile configuration every kernel loads: palette 1, tiles 0–7 of 16 rows × 64 bytes.
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

static CONFIG: TileConfig = TileConfig {
    palette: 1,
    start_row: 0,
    reserved: [0; 14],
    colsb: [64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
    rows: [16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
};

/// Tiles configured for the lifetime of the value (`ldtilecfg` … `tilerelease`), on this
/// thread; every tile instruction of this module runs while one is alive.
struct Configured;

impl Configured {
    /// # Safety
    /// [`available`] returned true for some op.
    unsafe fn new() -> Configured {
        // SAFETY: AMX-TILE is present and granted (the caller's contract); CONFIG is a valid
        // 64-byte palette-1 configuration.
        unsafe { asm!("ldtilecfg [{}]", in(reg) &CONFIG, options(nostack, readonly, preserves_flags)) };
        Configured
    }
}

impl Drop for Configured {
    fn drop(&mut self) {
        // SAFETY: a configuration is loaded (constructed by `new`); releasing it returns the
        // tiles to their init state, which the OS then need not save.
        unsafe { asm!("tilerelease", options(nostack, nomem, preserves_flags)) };
    }
}

/// Which C tiles a register tile uses: `PANELS` panels × `TILES` token tiles (each 1 or 2).
/// C(p, t) is tmm(2p + t).
macro_rules! tile_ops {
    ($mac:ident, $second:ident, $ins:literal) => {
        /// One K step of the register tile: load the step's weight tiles (`a`, the second
        /// panel `a_panel` bytes further) and activation tiles (`b`, the second token tile
        /// `b_tile` bytes further) and multiply-add them into the sums.
        ///
        /// # Safety
        /// Tiles configured ([`Configured`]); the tiles read are inside live buffers.
        #[inline(always)]
        unsafe fn $mac<const PANELS: usize, const TILES: usize>(
            a: *const Tile,
            a_panel: usize,
            b: *const Tile,
            b_tile: usize,
        ) {
            let s = ROW_BYTES;
            // SAFETY: the caller's contract; the tile registers are this module's alone.
            unsafe {
                match (PANELS, TILES) {
                    (2, 2) => asm!(
                        "tileloadd tmm4, [{a} + {s}]",
                        "tileloadd tmm6, [{b} + {s}]",
                        "tileloadd tmm5, [{a1} + {s}]",
                        "tileloadd tmm7, [{b1} + {s}]",
                        concat!($ins, " tmm0, tmm4, tmm6"),
                        concat!($ins, " tmm1, tmm4, tmm7"),
                        concat!($ins, " tmm2, tmm5, tmm6"),
                        concat!($ins, " tmm3, tmm5, tmm7"),
                        a = in(reg) a, b = in(reg) b, a1 = in(reg) a.byte_add(a_panel), b1 = in(reg) b.byte_add(b_tile),
                        s = in(reg) s, options(nostack, readonly, preserves_flags)
                    ),
                    (2, 1) => asm!(
                        "tileloadd tmm4, [{a} + {s}]",
                        "tileloadd tmm6, [{b} + {s}]",
                        "tileloadd tmm5, [{a1} + {s}]",
                        concat!($ins, " tmm0, tmm4, tmm6"),
                        concat!($ins, " tmm2, tmm5, tmm6"),
                        a = in(reg) a, b = in(reg) b, a1 = in(reg) a.byte_add(a_panel),
                        s = in(reg) s, options(nostack, readonly, preserves_flags)
                    ),
                    (1, 2) => asm!(
                        "tileloadd tmm4, [{a} + {s}]",
                        "tileloadd tmm6, [{b} + {s}]",
                        "tileloadd tmm7, [{b1} + {s}]",
                        concat!($ins, " tmm0, tmm4, tmm6"),
                        concat!($ins, " tmm1, tmm4, tmm7"),
                        a = in(reg) a, b = in(reg) b, b1 = in(reg) b.byte_add(b_tile),
                        s = in(reg) s, options(nostack, readonly, preserves_flags)
                    ),
                    _ => asm!(
                        "tileloadd tmm4, [{a} + {s}]",
                        "tileloadd tmm6, [{b} + {s}]",
                        concat!($ins, " tmm0, tmm4, tmm6"),
                        a = in(reg) a, b = in(reg) b,
                        s = in(reg) s, options(nostack, readonly, preserves_flags)
                    ),
                }
            }
        }

        /// One K step of the second panel of a two-panel register tile alone (its sums
        /// C(1, t)): the step where only that panel has a weight tile ([`KeptTiles`]).
        ///
        /// # Safety
        /// As the full step's, for the one weight tile `a`.
        #[inline(always)]
        unsafe fn $second<const TILES: usize>(a: *const Tile, b: *const Tile, b_tile: usize) {
            let s = ROW_BYTES;
            // SAFETY: the caller's contract; the tile registers are this module's alone.
            unsafe {
                if TILES == 2 {
                    asm!(
                        "tileloadd tmm5, [{a} + {s}]",
                        "tileloadd tmm6, [{b} + {s}]",
                        "tileloadd tmm7, [{b1} + {s}]",
                        concat!($ins, " tmm2, tmm5, tmm6"),
                        concat!($ins, " tmm3, tmm5, tmm7"),
                        a = in(reg) a, b = in(reg) b, b1 = in(reg) b.byte_add(b_tile),
                        s = in(reg) s, options(nostack, readonly, preserves_flags)
                    )
                } else {
                    asm!(
                        "tileloadd tmm5, [{a} + {s}]",
                        "tileloadd tmm6, [{b} + {s}]",
                        concat!($ins, " tmm2, tmm5, tmm6"),
                        a = in(reg) a, b = in(reg) b,
                        s = in(reg) s, options(nostack, readonly, preserves_flags)
                    )
                }
            }
        }
    };
}

tile_ops!(step_bf16, second_bf16, "tdpbf16ps");
tile_ops!(step_i8, second_i8, "tdpbssd");

/// Load (or zero, when `c` is null) the register tile's sums from `c`, rows `stride` bytes
/// apart, C(p, t) at `c + p·16·stride + t·64`.
///
/// # Safety
/// Tiles configured; a non-null `c` covers the register tile's sums.
#[inline(always)]
unsafe fn load_sums<const PANELS: usize, const TILES: usize>(c: *const u8, stride: usize) {
    let down = ROWS * stride;
    // SAFETY: the caller's contract.
    unsafe {
        if c.is_null() {
            asm!("tilezero tmm0", options(nostack, nomem, preserves_flags));
            if TILES == 2 {
                asm!("tilezero tmm1", options(nostack, nomem, preserves_flags));
            }
            if PANELS == 2 {
                asm!("tilezero tmm2", options(nostack, nomem, preserves_flags));
                if TILES == 2 {
                    asm!("tilezero tmm3", options(nostack, nomem, preserves_flags));
                }
            }
            return;
        }
        asm!("tileloadd tmm0, [{c} + {s}]", c = in(reg) c, s = in(reg) stride, options(nostack, readonly, preserves_flags));
        if TILES == 2 {
            asm!("tileloadd tmm1, [{c} + {s}]", c = in(reg) c.add(64), s = in(reg) stride, options(nostack, readonly, preserves_flags));
        }
        if PANELS == 2 {
            asm!("tileloadd tmm2, [{c} + {s}]", c = in(reg) c.add(down), s = in(reg) stride, options(nostack, readonly, preserves_flags));
            if TILES == 2 {
                asm!("tileloadd tmm3, [{c} + {s}]", c = in(reg) c.add(down + 64), s = in(reg) stride, options(nostack, readonly, preserves_flags));
            }
        }
    }
}

/// Store the register tile's sums to `c` (the layout of [`load_sums`]).
///
/// # Safety
/// Tiles configured; `c` covers the register tile's sums and nothing else aliases them.
#[inline(always)]
unsafe fn store_sums<const PANELS: usize, const TILES: usize>(c: *mut u8, stride: usize) {
    let down = ROWS * stride;
    // SAFETY: the caller's contract.
    unsafe {
        asm!("tilestored [{c} + {s}], tmm0", c = in(reg) c, s = in(reg) stride, options(nostack, preserves_flags));
        if TILES == 2 {
            asm!("tilestored [{c} + {s}], tmm1", c = in(reg) c.add(64), s = in(reg) stride, options(nostack, preserves_flags));
        }
        if PANELS == 2 {
            asm!("tilestored [{c} + {s}], tmm2", c = in(reg) c.add(down), s = in(reg) stride, options(nostack, preserves_flags));
            if TILES == 2 {
                asm!("tilestored [{c} + {s}], tmm3", c = in(reg) c.add(down + 64), s = in(reg) stride, options(nostack, preserves_flags));
            }
        }
    }
}

/// One register tile over `steps` K steps: sums from `c` (or zero when `first`), plus
/// `Σ A·B` over the steps, back to `c`.
///
/// # Safety
/// Tiles configured; `a` holds `steps` weight tiles of the first panel and (PANELS = 2) as
/// many `a_panel` bytes further; `b` likewise for the token tiles (`b_tile`); `c` covers the
/// sums with rows `stride` bytes apart.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn register_tile<const PANELS: usize, const TILES: usize>(
    op: Op,
    (a, a_panel): (*const Tile, usize),
    (b, b_tile): (*const Tile, usize),
    steps: usize,
    c: *mut u8,
    stride: usize,
    first: bool,
) {
    // SAFETY: the caller's contract, step by step.
    unsafe {
        load_sums::<PANELS, TILES>(if first { std::ptr::null() } else { c }, stride);
        match op {
            Op::Bf16 => {
                for s in 0..steps {
                    step_bf16::<PANELS, TILES>(a.add(s), a_panel, b.add(s), b_tile);
                }
            }
            Op::I8 => {
                for s in 0..steps {
                    step_i8::<PANELS, TILES>(a.add(s), a_panel, b.add(s), b_tile);
                }
            }
        }
        store_sums::<PANELS, TILES>(c, stride);
    }
}

/// Slots of two weight tiles that [`whole_k`] makes steps in, round robin: a step's tiles are
/// rewritten only `WHOLE_K_RING` steps after they were read.
const WHOLE_K_RING: usize = 4;

/// One register tile (panel `p`, and `p + 1` when `PANELS` = 2) over the whole K, its weight
/// tiles made a step at a time ([`TileSource::step`]): a 2:4 step's expansion overlaps the
/// multiply-adds of the steps before it and stays in L1, and the sums stay in the tiles from
/// the first step to the last. `b`, `c` and `stride` as [`register_tile`]'s.
///
/// # Safety
/// Tiles configured; the activation tiles of every step exist; `c` covers the sums; `ring`
/// holds `2 · WHOLE_K_RING` tiles.
#[inline(always)]
unsafe fn whole_k<W: TileSource, const PANELS: usize, const TILES: usize>(
    w: &W,
    p: usize,
    (b, b_tile): (*const Tile, usize),
    c: *mut u8,
    stride: usize,
    ring: &mut [Tile],
) {
    let (op, _, _, steps) = w.shape();
    // SAFETY: the caller's contract; `step` hands out the step's tiles of panels p (p + 1).
    unsafe {
        load_sums::<PANELS, TILES>(std::ptr::null(), stride);
        match op {
            Op::Bf16 => {
                for s in 0..steps {
                    let (a, a_panel) = w.step(p, PANELS == 2, s, &mut ring[s % WHOLE_K_RING * 2..]);
                    step_bf16::<PANELS, TILES>(a, a_panel, b.add(s), b_tile);
                }
            }
            Op::I8 => {
                for s in 0..steps {
                    let (a, a_panel) = w.step(p, PANELS == 2, s, &mut ring[s % WHOLE_K_RING * 2..]);
                    step_i8::<PANELS, TILES>(a, a_panel, b.add(s), b_tile);
                }
            }
        }
        store_sums::<PANELS, TILES>(c, stride);
    }
}

/// Register-tile steps per thread in one trial of [`peak_ops`]: four multiply-adds each,
/// about 16 cycles apiece, so roughly 1 ms at 3 GHz.
const PEAK_STEPS: usize = 50_000;

/// One thread's share of a tile peak trial (the roofline's roof for the tile kernels):
/// [`PEAK_STEPS`] × four independent multiply-adds on zeroed tiles, no memory traffic; the
/// operations done (2 per product).
///
/// # Safety
/// [`available`]`(op)` returned true.
pub(super) unsafe fn peak_ops(op: Op) -> f64 {
    // SAFETY: the caller's contract; the tiles are this module's and configured for the
    // lifetime of `_tiles`; the instructions touch no memory.
    unsafe {
        let _tiles = Configured::new();
        for t in 0..8 {
            match t {
                0 => asm!("tilezero tmm0", options(nostack, nomem, preserves_flags)),
                1 => asm!("tilezero tmm1", options(nostack, nomem, preserves_flags)),
                2 => asm!("tilezero tmm2", options(nostack, nomem, preserves_flags)),
                3 => asm!("tilezero tmm3", options(nostack, nomem, preserves_flags)),
                4 => asm!("tilezero tmm4", options(nostack, nomem, preserves_flags)),
                5 => asm!("tilezero tmm5", options(nostack, nomem, preserves_flags)),
                6 => asm!("tilezero tmm6", options(nostack, nomem, preserves_flags)),
                _ => asm!("tilezero tmm7", options(nostack, nomem, preserves_flags)),
            }
        }
        for _ in 0..PEAK_STEPS {
            match op {
                Op::Bf16 => asm!(
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    "tdpbf16ps tmm2, tmm5, tmm6",
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    options(nostack, nomem, preserves_flags)
                ),
                Op::I8 => asm!(
                    "tdpbssd tmm0, tmm4, tmm6",
                    "tdpbssd tmm1, tmm4, tmm7",
                    "tdpbssd tmm2, tmm5, tmm6",
                    "tdpbssd tmm3, tmm5, tmm7",
                    options(nostack, nomem, preserves_flags)
                ),
            }
        }
    }
    let products = ROWS * ROWS * op.k_step();
    (PEAK_STEPS * 4 * products * 2) as f64
}

/// Dense weights packed into tiles for one op (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct AmxWeights {
    op: Op,
    n: usize,
    k: usize,
    /// K steps (tiles per panel).
    steps: usize,
    /// `[panel][step]` weight tiles.
    tiles: Vec<Tile>,
}

impl AmxWeights {
    /// Pack the row-major `n × k` weights `w` (`w.len() == n · k`).
    pub(super) fn new<E: Operand>(w: &[E], n: usize, k: usize) -> AmxWeights {
        debug_assert_eq!(w.len(), n * k);
        let op = E::OP;
        let steps = k.div_ceil(op.k_step());
        let mut tiles = vec![ZERO_TILE; n.div_ceil(ROWS) * steps];
        for (i, tile) in tiles.iter_mut().enumerate() {
            fill(w, (n, k), (i / steps, i % steps), tile);
        }
        AmxWeights {
            op,
            n,
            k,
            steps,
            tiles,
        }
    }

    /// Bytes of the packed weights (with the padding).
    pub(super) fn packed_bytes(&self) -> usize {
        self.tiles.len() * std::mem::size_of::<Tile>()
    }

    /// `y[n × m] = W · x[k × m]` on `threads` workers of the current rayon pool (1 runs on
    /// the calling thread).
    ///
    /// # Safety
    /// [`available`] returned true for the weights' op; `x.len() == k·m`, `y.len() == n·m`;
    /// for int8, `k ≤ INT8_MAX_K` (so the true sums fit in i32).
    pub(super) unsafe fn gemm<E: Operand, S: Sum>(&self, threads: usize, x: &[E], y: &mut [S], m: usize) {
        // SAFETY: the caller's contract.
        unsafe { product(self, threads, x, y, m) }
    }
}

/// Write tile (`panel`, step `s`) of row-major `n × k` weights `w` into `tile`: row r of the
/// tile is the panel's row r at k = s·ks.., zeros past n and k (see the module doc).
fn fill<E: Operand>(w: &[E], (n, k): (usize, usize), (panel, s): (usize, usize), tile: &mut Tile) {
    let (ks, elem) = (E::OP.k_step(), E::OP.elem());
    let (k0, k1) = (s * ks, ((s + 1) * ks).min(k));
    for r in 0..ROWS.min(n.saturating_sub(panel * ROWS)) {
        let row = panel * ROWS + r;
        let line = &mut tile.0[r * ROW_BYTES..(r + 1) * ROW_BYTES];
        for (i, &v) in w[row * k + k0..row * k + k1].iter().enumerate() {
            v.put(&mut line[i * elem..]);
        }
    }
}

// SAFETY: `block` hands out tiles of `self.tiles`, which hold every panel × step.
unsafe impl TileSource for AmxWeights {
    fn shape(&self) -> (Op, usize, usize, usize) {
        (self.op, self.n, self.k, self.steps)
    }

    fn block(
        &self,
        p: usize,
        _two: bool,
        s0: usize,
        _ks: usize,
        _scratch: &mut Vec<Tile>,
    ) -> (*const Tile, usize) {
        (
            self.tiles[p * self.steps + s0..].as_ptr(),
            self.steps * size_of::<Tile>(),
        )
    }

    fn step(&self, p: usize, _two: bool, s: usize, _slot: &mut [Tile]) -> (*const Tile, usize) {
        (
            self.tiles[p * self.steps + s..].as_ptr(),
            self.steps * size_of::<Tile>(),
        )
    }
}

/// Weights the tile driver multiplies: dense tiles as stored, or sparse ones expanded.
///
/// # Safety
/// [`TileSource::block`] and [`TileSource::step`] return tiles that stay valid until the next
/// call on the same scratch or slot (or for the source's lifetime).
unsafe trait TileSource: Sync {
    /// (op, n, k, K steps).
    fn shape(&self) -> (Op, usize, usize, usize);

    /// The weight tiles of panel `p` (and `p + 1` when `two`) for steps `s0..s0 + ks`: the
    /// first panel's first tile and the byte distance to the second panel's, in `scratch`
    /// where the tiles must be made (the caller's tile-expansion buffer).
    fn block(
        &self,
        p: usize,
        two: bool,
        s0: usize,
        ks: usize,
        scratch: &mut Vec<Tile>,
    ) -> (*const Tile, usize);

    /// [`Self::block`] for the one step `s`, made in `slot` (two tiles) where the tiles must
    /// be made.
    fn step(&self, p: usize, two: bool, s: usize, slot: &mut [Tile]) -> (*const Tile, usize);
}

/// `y[n × m] = W · x[k × m]` for any weight tiles (see the module doc's blocking).
///
/// # Safety
/// As [`AmxWeights::gemm`], for `w`'s op.
unsafe fn product<W: TileSource, E: Operand, S: Sum>(w: &W, threads: usize, x: &[E], y: &mut [S], m: usize) {
    // SAFETY: the caller's contract; each task's rows and tokens are its own.
    unsafe {
        run_tasks(w.shape(), threads, (x, y, m), |xp, out, pairs, tiles| {
            task(w, xp, out, m, pairs, tiles)
        })
    }
}

/// The frame of every tile product: pack `x` into activation tiles, cut the panel pairs ×
/// token tiles into a [`TaskGrid`], and run `task(activations, y, pairs, token tiles)` for
/// each cell, in parallel when `threads > 1`.
///
/// # Safety
/// As [`product`] for weights of `(op, n, k, steps)`; `task` writes only its cell of `y`.
unsafe fn run_tasks<E: Operand, S: Sum>(
    (op, n, k, steps): (Op, usize, usize, usize),
    threads: usize,
    (x, y, m): (&[E], &mut [S], usize),
    task: impl Fn(&[Tile], SharedOutput<S>, std::ops::Range<usize>, std::ops::Range<usize>) + Sync,
) {
    debug_assert!(E::OP == op && x.len() == k * m && y.len() == n * m);
    if trivial_product(y, n, k, m) {
        return;
    }
    let token_tiles = m.div_ceil(ROWS);
    let mut xp = ACTIVATIONS.with(|s| std::mem::take(&mut *s.borrow_mut()));
    pack_activations(threads, x, k, m, steps, &mut xp);
    let grid = TaskGrid::new(n.div_ceil(ROWS).div_ceil(2), token_tiles, threads, MAX_PAIRS);
    let out = SharedOutput(y.as_mut_ptr());
    let cell = |t: usize| {
        let (pairs, tiles) = grid.task(t);
        task(&xp, out, pairs, tiles);
    };
    if threads > 1 && grid.tasks() > 1 {
        (0..grid.tasks()).into_par_iter().for_each(cell);
    } else {
        (0..grid.tasks()).for_each(cell);
    }
    ACTIVATIONS.with(|s| *s.borrow_mut() = xp);
}

/// One task of [`product`]: panel pairs `pairs` × token tiles `tiles`.
///
/// # Safety
/// As [`product`]; `xp` is the packed activations of `m` tokens; no other task writes these
/// rows × tokens of `out`.
unsafe fn task<W: TileSource, S: Sum>(
    w: &W,
    xp: &[Tile],
    out: SharedOutput<S>,
    m: usize,
    pairs: std::ops::Range<usize>,
    tiles: std::ops::Range<usize>,
) {
    if tiles.is_empty() {
        return;
    }
    let (op, n, _, steps) = w.shape();
    let panels = n.div_ceil(ROWS);
    let (p0, p1) = (pairs.start * 2, (pairs.end * 2).min(panels));
    let block_tiles = TOKEN_TILES.min(tiles.len());
    // Sums: rows of the task's panels × the token block, as tiles side by side.
    let stride = block_tiles * ROW_BYTES;
    let mut sums = SUMS.with(|s| std::mem::take(&mut *s.borrow_mut()));
    sums.resize((p1 - p0) * block_tiles, ZERO_TILE);
    let c_base = sums.as_mut_ptr().cast::<u8>();
    let mut expanded = EXPANDED.with(|s| std::mem::take(&mut *s.borrow_mut()));
    // SAFETY: `available` held (the caller's contract).
    let _tiles = unsafe { Configured::new() };
    let b_tile = steps * size_of::<Tile>();
    for t0 in tiles.clone().step_by(block_tiles) {
        let t1 = (t0 + block_tiles).min(tiles.end);
        let body = |p: usize, s0: usize, expanded: &mut Vec<Tile>| {
            let ks = KC.min(steps - s0);
            let first = s0 == 0;
            let two_panels = p + 1 < p1;
            let a = w.block(p, two_panels, s0, ks, expanded);
            for t in (t0..t1).step_by(2) {
                let two_tiles = t + 1 < t1;
                let b = (xp[t * steps + s0..].as_ptr(), b_tile);
                let c = c_base.wrapping_add((p - p0) * ROWS * stride + (t - t0) * ROW_BYTES);
                // SAFETY: tiles configured; `block` handed out weight tiles s0..s0+ks of
                // panels p, p+1 (when two); the activation tiles of token tiles t, t+1
                // (when two) exist; the sums cover panels p0..p1 × token tiles t0..t1.
                unsafe {
                    match (two_panels, two_tiles) {
                        (true, true) => register_tile::<2, 2>(op, a, b, ks, c, stride, first),
                        (true, false) => register_tile::<2, 1>(op, a, b, ks, c, stride, first),
                        (false, true) => register_tile::<1, 2>(op, a, b, ks, c, stride, first),
                        (false, false) => register_tile::<1, 1>(op, a, b, ks, c, stride, first),
                    }
                }
            }
        };
        if t1 - t0 <= 2 {
            // Decode and short prefill: one register tile covers the block, so each panel
            // pair runs the whole K in one go, its weights streamed in address order.
            expanded.resize(2 * WHOLE_K_RING, ZERO_TILE);
            let b = (xp[t0 * steps..].as_ptr(), b_tile);
            for p in (p0..p1).step_by(2) {
                let c = c_base.wrapping_add((p - p0) * ROWS * stride);
                let ring = &mut expanded[..];
                // SAFETY: tiles configured; the activation tiles of token tiles t0 (and t0 + 1)
                // exist for every step; the sums cover panels p0..p1 × the block's tiles.
                unsafe {
                    match (p + 1 < p1, t1 - t0 == 2) {
                        (true, true) => whole_k::<W, 2, 2>(w, p, b, c, stride, ring),
                        (true, false) => whole_k::<W, 2, 1>(w, p, b, c, stride, ring),
                        (false, true) => whole_k::<W, 1, 2>(w, p, b, c, stride, ring),
                        (false, false) => whole_k::<W, 1, 1>(w, p, b, c, stride, ring),
                    }
                }
            }
        } else if (t1 - t0) * steps * size_of::<Tile>() <= WHOLE_K_ACTIVATIONS {
            // Few token tiles: each panel pair walks its whole K a block at a time, so its
            // stored weights stream in address order while the activations wait in L2.
            for p in (p0..p1).step_by(2) {
                for s0 in (0..steps).step_by(KC) {
                    body(p, s0, &mut expanded);
                }
            }
        } else {
            // Many tokens: each K block of the activations stays in L2 while every panel
            // pair meets it.
            for s0 in (0..steps).step_by(KC) {
                for p in (p0..p1).step_by(2) {
                    body(p, s0, &mut expanded);
                }
            }
        }
        // SAFETY: the tiles above stored every sum of panels p0..p1 × token tiles t0..t1.
        unsafe { copy_sums(c_base, stride, out, (n, m), (p0, p1), (t0, t1)) };
    }
    SUMS.with(|s| *s.borrow_mut() = sums);
    EXPANDED.with(|s| *s.borrow_mut() = expanded);
}

/// Copy a token block's sums (tiles side by side, rows `stride` bytes apart, from `c_base`)
/// into `y` (`n × m`): rows of panels `p0..p1` inside n, tokens of token tiles `t0..t1`
/// inside m.
///
/// # Safety
/// The sums hold those rows × tokens, stored by the tiles; no other task writes them in `y`.
unsafe fn copy_sums<S: Sum>(
    c_base: *const u8,
    stride: usize,
    out: SharedOutput<S>,
    (n, m): (usize, usize),
    (p0, p1): (usize, usize),
    (t0, t1): (usize, usize),
) {
    let (tok0, tok1) = (t0 * ROWS, (t1 * ROWS).min(m));
    for row in p0 * ROWS..(p1 * ROWS).min(n) {
        let from = c_base.wrapping_add((row - p0 * ROWS) * stride).cast::<S>();
        // SAFETY: the sums' row holds at least `tok1 - tok0` values stored by the tiles,
        // each a valid `S` (every bit pattern is); row < n and tok0.. < m: inside y, this
        // task's alone (the caller's contract), and not the sums' buffer.
        unsafe { std::ptr::copy_nonoverlapping(from, out.at(row * m + tok0), tok1 - tok0) };
    }
}

/// The fewest tokens at which a 2:4 product runs on the tiles rather than the AVX-512 2:4
/// kernels: below it the vector kernels stream the same bytes with no expansion, and a
/// 16-token tile is mostly padding. Measured (Intel Xeon with AMX-BF16/INT8, 2 threads,
/// `sparsegate bench`, ratio to the AMX dense comparator, tiles / vector, 4096×4096 and
/// 11008×4096, with the register-form expansion): bf16 1.34–1.40 / 1.60–1.67 and
/// 1.48–1.64 / 1.61–1.67 at 2 tokens, level at 3 (1.35–1.40 / 1.33–1.44, 1.50–1.68 /
/// 1.51–1.52), 1.39–1.46 / 1.12–1.18 and 1.50–1.60 / 1.39–1.43 at 4; int8 1.24–1.28 /
/// 1.29–1.34 and 1.29–1.32 / 1.36–1.37 at 6, 1.12–1.28 / 1.10–1.11 and 1.26–1.29 /
/// 1.18–1.20 at 8.
pub(super) fn sparse_tiles_from_tokens(op: Op) -> usize {
    match op {
        Op::Bf16 => 3,
        Op::I8 => 8,
    }
}

/// 2:4 weights for the tiles (issue 20): AMX has no sparse datapath, so each panel pair's
/// K block is expanded into dense weight tiles (`vpexpandw` / `vpexpandb`, AVX-512 VBMI2)
/// once per token block, then multiplied like the dense ones.
///
/// Stored per panel and step, 16 rows of exactly half a tile row of kept values (16 bf16 or
/// 32 int8, two per group of four, padded with zeros where a group kept fewer) and a mask per
/// row of where they go (bit j set: k = step·ks + j kept): 2 bits of metadata per kept value,
/// as the compact 2:4 format.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct SparseTiles {
    op: Op,
    n: usize,
    k: usize,
    steps: usize,
    /// `[panel][step][row]` 32 bytes of kept values.
    values: Vec<[u8; 32]>,
    /// `[panel][step][row]` masks: one u32 (bf16) or two (int8, low half first).
    masks: Vec<u32>,
}

impl SparseTiles {
    /// Whether the CPU expands 2:4 weights for `op`'s tiles: [`available`] and AVX-512 VBMI2.
    pub(super) fn available(op: Op) -> bool {
        available(op) && crate::cpu::has!("avx512vbmi2")
    }

    /// Whether a 2:4 product of `tokens` tokens runs on the tiles: [`Self::available`] and
    /// at least [`sparse_tiles_from_tokens`] tokens.
    pub(super) fn pays_at(op: Op, tokens: usize) -> bool {
        tokens >= sparse_tiles_from_tokens(op) && SparseTiles::available(op)
    }

    /// The 2:4 form of row-major `n × k` weights `w`; `None` where a group of four (along K,
    /// the last one possibly shorter) holds more than two non-zeros.
    pub(super) fn new<E: Operand + PartialEq + Default>(w: &[E], n: usize, k: usize) -> Option<SparseTiles> {
        debug_assert_eq!(w.len(), n * k);
        let op = E::OP;
        let (ks, elem) = (op.k_step(), op.elem());
        let steps = k.div_ceil(ks);
        let panels = n.div_ceil(ROWS);
        let words = ks / 32;
        let mut values = vec![[0u8; 32]; panels * steps * ROWS];
        let mut masks = vec![0u32; panels * steps * ROWS * words];
        for panel_row in 0..panels * ROWS {
            let (panel, r) = (panel_row / ROWS, panel_row % ROWS);
            for s in 0..steps {
                let at = (panel * steps + s) * ROWS + r;
                let (out, mask) = (&mut values[at], &mut masks[at * words..(at + 1) * words]);
                let mut kept = 0;
                for g in 0..ks / 4 {
                    // Two positions per group: the non-zeros, then the first zeros.
                    let k0 = s * ks + 4 * g;
                    let value = |j: usize| {
                        if panel_row < n && k0 + j < k {
                            w[panel_row * k + k0 + j]
                        } else {
                            E::default()
                        }
                    };
                    let nonzero: Vec<usize> = (0..4).filter(|&j| value(j) != E::default()).collect();
                    if nonzero.len() > 2 {
                        return None;
                    }
                    let mut chosen = nonzero.clone();
                    chosen.extend((0..4).filter(|j| !nonzero.contains(j)).take(2 - nonzero.len()));
                    chosen.sort_unstable();
                    for j in chosen {
                        let bit = 4 * g + j;
                        mask[bit / 32] |= 1 << (bit % 32);
                        value(j).put(&mut out[kept * elem..]);
                        kept += 1;
                    }
                }
            }
        }
        Some(SparseTiles {
            op,
            n,
            k,
            steps,
            values,
            masks,
        })
    }

    /// Bytes of kept values (the padding zeros included).
    pub(super) fn value_bytes(&self) -> usize {
        self.values.len() * 32
    }

    /// Bytes of the expansion masks.
    pub(super) fn metadata_bytes(&self) -> usize {
        self.masks.len() * 4
    }

    /// As [`AmxWeights::gemm`].
    ///
    /// # Safety
    /// [`Self::available`] returned true for the weights' op; otherwise as
    /// [`AmxWeights::gemm`].
    pub(super) unsafe fn spmm<E: Operand, S: Sum>(&self, threads: usize, x: &[E], y: &mut [S], m: usize) {
        // SAFETY: the caller's contract.
        unsafe { product(self, threads, x, y, m) }
    }
}

// SAFETY: `block` expands into `scratch` (resized to hold the block), which the caller keeps
// until its next call.
unsafe impl TileSource for SparseTiles {
    fn shape(&self) -> (Op, usize, usize, usize) {
        (self.op, self.n, self.k, self.steps)
    }

    fn block(
        &self,
        p: usize,
        two: bool,
        s0: usize,
        ks: usize,
        scratch: &mut Vec<Tile>,
    ) -> (*const Tile, usize) {
        scratch.resize(2 * KC, ZERO_TILE);
        for (i, panel) in (p..p + 1 + two as usize).enumerate() {
            for s in 0..ks {
                self.expand(panel, s0 + s, &mut scratch[i * ks + s]);
            }
        }
        (scratch.as_ptr(), ks * size_of::<Tile>())
    }

    fn step(&self, p: usize, two: bool, s: usize, slot: &mut [Tile]) -> (*const Tile, usize) {
        self.expand(p, s, &mut slot[0]);
        if two {
            self.expand(p + 1, s, &mut slot[1]);
        }
        (slot.as_ptr(), size_of::<Tile>())
    }
}

impl SparseTiles {
    /// Expand panel `panel`'s step `s` into `tile`.
    fn expand(&self, panel: usize, s: usize, tile: &mut Tile) {
        let words = self.op.k_step() / 32;
        let at = (panel * self.steps + s) * ROWS;
        let values = &self.values[at..at + ROWS];
        let masks = &self.masks[at * words..(at + ROWS) * words];
        // SAFETY: VBMI2 and AVX-512BW were detected (`available`, which every product of
        // these weights holds); 16 rows of values and masks, one tile.
        unsafe {
            match self.op {
                Op::Bf16 => expand_pairs(values, masks, tile),
                Op::I8 => expand_quads(values, masks, tile),
            }
        }
    }
}

/// K steps ahead of the expansion that [`prefetch_ahead`] asks for a panel's values and masks.
const PREFETCH_STEPS: usize = 4;

/// Ask for the values and masks of the same panel [`PREFETCH_STEPS`] steps on (they are
/// stored `[panel][step][row]`): the expansion's loads depend on nothing the hardware
/// prefetchers can see coming early enough, and without this they wait on memory (bf16
/// 4096×4096, 16 tokens, 1 thread on an AMX Xeon: the product 2.5 → 1.4 ms against dense
/// tiles' 1.5).
#[inline(always)]
fn prefetch_ahead(values: &[[u8; 32]], masks: &[u32]) {
    let ahead = PREFETCH_STEPS * ROWS;
    let mask_bytes = std::mem::size_of_val(masks);
    // SAFETY: SSE is baseline on x86_64, and a prefetch of any address is harmless (past
    // the weights' end it is dropped).
    unsafe {
        for r in (0..ROWS).step_by(2) {
            _mm_prefetch::<_MM_HINT_T0>(values[r].as_ptr().wrapping_add(ahead * 32).cast());
        }
        for line in (0..mask_bytes).step_by(ROW_BYTES) {
            _mm_prefetch::<_MM_HINT_T0>(
                masks
                    .as_ptr()
                    .cast::<i8>()
                    .wrapping_add(ahead / ROWS * mask_bytes + line),
            );
        }
    }
}

/// Expand 16 rows of 16 kept bf16 into a weight tile (`vpexpandw`). The values are loaded
/// first and expanded from a register: the load-and-expand form was slower (an AMX Xeon, one
/// thread, L1-resident, expansion and two-panel `tdpbf16ps` step: 24.3 against 19.5 ns a
/// tile; bf16 2:4 at 16 tokens on 4096×4096, 2 threads: 1.16–1.22× dense → 1.26–1.36×).
///
/// # Safety
/// AVX-512F/BW/VBMI2; `values` and `masks` hold 16 rows.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi2")]
unsafe fn expand_pairs(values: &[[u8; 32]], masks: &[u32], tile: &mut Tile) {
    prefetch_ahead(values, masks);
    for r in 0..ROWS {
        // SAFETY: the row holds 32 bytes.
        let kept = unsafe { _mm256_loadu_si256(values[r].as_ptr().cast()) };
        let v = _mm512_maskz_expand_epi16(masks[r], _mm512_castsi256_si512(kept));
        // SAFETY: row r of the tile is 64 aligned bytes.
        unsafe { _mm512_store_si512(tile.0[r * ROW_BYTES..].as_mut_ptr().cast(), v) };
    }
}

/// Expand 16 rows of 32 kept int8 into a weight tile (`vpexpandb`).
///
/// # Safety
/// AVX-512F/BW/VBMI2; `values` hold 16 rows and `masks` 32 words.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi2")]
unsafe fn expand_quads(values: &[[u8; 32]], masks: &[u32], tile: &mut Tile) {
    prefetch_ahead(values, masks);
    for r in 0..ROWS {
        let mask = masks[2 * r] as u64 | (masks[2 * r + 1] as u64) << 32;
        // SAFETY: the row holds 32 bytes.
        let kept = unsafe { _mm256_loadu_si256(values[r].as_ptr().cast()) };
        let v = _mm512_maskz_expand_epi8(mask, _mm512_castsi256_si512(kept));
        // SAFETY: row r of the tile is 64 aligned bytes.
        unsafe { _mm512_store_si512(tile.0[r * ROW_BYTES..].as_mut_ptr().cast(), v) };
    }
}

/// Token tiles one packing task takes, step by step: 64 tokens, a whole cache line of an int8
/// row of `x` (two of a bf16 row), so each line is read once and used whole. One token tile
/// at a time, over all its steps, read 16 bytes of each line and walked `x` a row apart
/// (`m` bytes): int8 2048³ spent 1.09 ms of 7.97 packing.
const PACK_TILES: usize = 4;

/// Pack `x[k × m]` into `[token tile][step]` activation tiles (see the module doc), groups
/// of [`PACK_TILES`] token tiles as rayon tasks when `threads > 1`.
fn pack_activations<E: Operand>(
    threads: usize,
    x: &[E],
    k: usize,
    m: usize,
    steps: usize,
    xp: &mut Vec<Tile>,
) {
    let token_tiles = m.div_ceil(ROWS);
    // Every byte of every tile is written below: only growth needs filling.
    xp.resize(token_tiles * steps, ZERO_TILE);
    let pack = |(g, out): (usize, &mut [Tile])| {
        // SAFETY: AVX-512F/BW/VL come with `available` (every caller holds it); `out` is
        // token tiles g·PACK_TILES..'s `steps` tiles each and x is `k × m`.
        unsafe {
            match E::OP {
                Op::Bf16 => pack_pairs(x.as_ptr().cast::<u16>(), (k, m, steps), g * PACK_TILES, out),
                Op::I8 => pack_quads(x.as_ptr().cast::<u8>(), (k, m, steps), g * PACK_TILES, out),
            }
        }
    };
    let group = (steps * PACK_TILES).max(1);
    if threads > 1 && token_tiles > PACK_TILES {
        xp.par_chunks_mut(group).enumerate().for_each(pack);
    } else {
        xp.chunks_mut(group).enumerate().for_each(pack);
    }
}

/// Visit a packing group's tiles (`out`: token tiles from `t0`, `steps` tiles each) step by
/// step, each step's token tiles side by side: `f(token tile, step, tile)`.
#[inline(always)]
fn each_tile(out: &mut [Tile], steps: usize, t0: usize, mut f: impl FnMut(usize, usize, &mut Tile)) {
    for s in 0..steps {
        for (i, tiles) in out.chunks_exact_mut(steps).enumerate() {
            f(t0 + i, s, &mut tiles[s]);
        }
    }
}

/// The mask of token tile `t`'s tokens inside `m`.
fn token_mask(m: usize, t: usize) -> u16 {
    let live = (m - t * ROWS).min(ROWS);
    ((1u32 << live) - 1) as u16
}

/// bf16 activation tiles of the token tiles from `t0` (`out`: `steps` tiles each): row j of
/// step s holds, per token, the bf16 of k = 32s + 2j (low half) and k + 1 (high half).
///
/// # Safety
/// AVX-512F/BW/VL; `x` points at `k · m` bf16 values; `out` holds whole token tiles of
/// `steps` tiles, all inside m.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn pack_pairs(x: *const u16, (k, m, steps): (usize, usize, usize), t0: usize, out: &mut [Tile]) {
    each_tile(out, steps, t0, |t, s, tile| {
        let mask = token_mask(m, t);
        let load = |kk: usize| {
            if kk < k {
                // SAFETY: row kk < k of x, tokens 16t.. masked to those < m.
                unsafe {
                    _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, x.add(kk * m + t * ROWS).cast()))
                }
            } else {
                _mm512_setzero_si512()
            }
        };
        for j in 0..ROWS {
            let k0 = s * 32 + 2 * j;
            let v = _mm512_or_si512(load(k0), _mm512_slli_epi32::<16>(load(k0 + 1)));
            // SAFETY: row j of the tile is 64 bytes.
            unsafe { _mm512_storeu_si512(tile.0[j * ROW_BYTES..].as_mut_ptr().cast(), v) };
        }
    });
}

/// int8 activation tiles of the token tiles from `t0` (`out`: `steps` tiles each): row j of
/// step s holds, per token, the bytes of k = 64s + 4j … 4j + 3.
///
/// # Safety
/// AVX-512F/BW/VL; `x` points at `k · m` bytes; `out` holds whole token tiles of `steps`
/// tiles, all inside m.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn pack_quads(x: *const u8, (k, m, steps): (usize, usize, usize), t0: usize, out: &mut [Tile]) {
    each_tile(out, steps, t0, |t, s, tile| {
        let mask = token_mask(m, t);
        let load = |kk: usize| {
            if kk < k {
                // SAFETY: row kk < k of x, tokens 16t.. masked to those < m.
                unsafe { _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mask, x.add(kk * m + t * ROWS).cast())) }
            } else {
                _mm512_setzero_si512()
            }
        };
        for j in 0..ROWS {
            let k0 = s * 64 + 4 * j;
            let lo = _mm512_or_si512(load(k0), _mm512_slli_epi32::<8>(load(k0 + 1)));
            let hi = _mm512_or_si512(
                _mm512_slli_epi32::<16>(load(k0 + 2)),
                _mm512_slli_epi32::<24>(load(k0 + 3)),
            );
            // SAFETY: row j of the tile is 64 bytes.
            unsafe {
                _mm512_storeu_si512(
                    tile.0[j * ROW_BYTES..].as_mut_ptr().cast(),
                    _mm512_or_si512(lo, hi),
                )
            };
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(super) fn naive_i8(w: &[i8], x: &[i8], n: usize, k: usize, m: usize) -> Vec<i32> {
        let mut y = vec![0i32; n * m];
        for r in 0..n {
            for kk in 0..k {
                for t in 0..m {
                    y[r * m + t] += w[r * k + kk] as i32 * x[kk * m + t] as i32;
                }
            }
        }
        y
    }

    /// xorshift bytes from `seed`.
    pub(super) fn bytes(seed: u64, len: usize) -> Vec<u8> {
        let mut s = seed | 1;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 24) as u8
            })
            .collect()
    }

    /// Zero all but at most two of every group of four along K (which two, and whether a
    /// group keeps fewer, from the seed), the last group possibly short.
    fn prune_two_of_four<E: Copy + Default>(w: &mut [E], k: usize, seed: u64) {
        let choice = bytes(seed ^ 0x5eed, w.len());
        for (row, c) in w.chunks_mut(k).zip(choice.chunks(k)) {
            for (g, cg) in row.chunks_mut(4).zip(c.chunks(4)) {
                let keep = [cg[0] as usize % 4, cg.get(1).map_or(0, |&b| b as usize % 4)];
                let fewer = cg[0] % 7 == 0;
                for (j, v) in g.iter_mut().enumerate() {
                    if !(j == keep[0] || (j == keep[1] && !fewer)) {
                        *v = E::default();
                    }
                }
            }
        }
    }

    /// Zero every `br × bc` block of row-major `n × k` weights but about `density` of them
    /// (which, from the seed; edge blocks partial).
    pub(super) fn prune_blocks<E: Copy + Default>(
        w: &mut [E],
        (n, k): (usize, usize),
        (br, bc): (usize, usize),
        density: f64,
        seed: u64,
    ) {
        let (rows, cols) = (n.div_ceil(br), k.div_ceil(bc));
        let keep: Vec<bool> = bytes(seed ^ 0xb10c, rows * cols)
            .into_iter()
            .map(|b| f64::from(b) < density * 256.0)
            .collect();
        for (i, v) in w.iter_mut().enumerate() {
            let (r, c) = (i / k, i % k);
            if !keep[r / br * cols + c / bc] {
                *v = E::default();
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Issue 20: the int8 tiles are exact on random shapes with every kind of edge
        /// (partial panels, partial token tiles, K not a whole step, several K and token
        /// blocks), dense and 2:4 expanded, on one worker and two. Skipped by detection where
        /// the CPU or OS has no AMX-INT8.
        #[test]
        fn issue_20_int8_tiles_are_exact_at_every_edge(
            n in 1usize..70, k in 1usize..1300, m in 1usize..300, seed in any::<u64>(), threads in 1usize..3,
        ) {
            if !available(Op::I8) {
                return Ok(());
            }
            let mut w: Vec<i8> = bytes(seed, n * k).into_iter().map(|b| b as i8).collect();
            let x: Vec<i8> = bytes(!seed, k * m).into_iter().map(|b| b as i8).collect();
            let mut y = vec![7i32; n * m];
            // SAFETY: available; shapes as promised; k ≤ 1300 keeps the sums in i32.
            unsafe { AmxWeights::new(&w, n, k).gemm(threads, &x, &mut y, m) };
            prop_assert_eq!(&y, &naive_i8(&w, &x, n, k, m));
            if SparseTiles::available(Op::I8) {
                prune_two_of_four(&mut w, k, seed);
                let sparse = SparseTiles::new(&w, n, k).expect("2:4");
                let mut y = vec![7i32; n * m];
                // SAFETY: as above, and VBMI2 (checked).
                unsafe { sparse.spmm(threads, &x, &mut y, m) };
                prop_assert_eq!(y, naive_i8(&w, &x, n, k, m));
            }
        }

        /// Issue 20: 2:4 bf16 expanded into tiles multiplies exactly the tiles the dense
        /// packing makes of the same pruned weights, so its sums are the dense tiles' to the
        /// bit (the dense tiles meet the naive reference in `precision`'s tests).
        #[test]
        fn issue_20_two_of_four_bf16_tiles_equal_the_dense_tiles_bit_for_bit(
            n in 1usize..50, k in 1usize..700, m in 1usize..100, seed in any::<u64>(), threads in 1usize..3,
        ) {
            if !SparseTiles::available(Op::Bf16) {
                return Ok(());
            }
            // Finite bf16 of moderate exponent: the top byte from 0x38..0x47 with a random sign.
            let bf16 = |b: &[u8]| u16::from(b[0] & 0x80 | (0x38 + b[0] % 16)) << 8 | u16::from(b[1]);
            let mut w: Vec<u16> = bytes(seed, 2 * n * k).chunks(2).map(bf16).collect();
            let x: Vec<u16> = bytes(!seed, 2 * k * m).chunks(2).map(bf16).collect();
            prune_two_of_four(&mut w, k, seed);
            let (mut dense, mut sparse) = (vec![f32::NAN; n * m], vec![f32::NAN; n * m]);
            // SAFETY: available (checked); the shapes as promised.
            unsafe {
                AmxWeights::new(&w, n, k).gemm(threads, &x, &mut dense, m);
                SparseTiles::new(&w, n, k).expect("2:4").spmm(threads, &x, &mut sparse, m);
            }
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            prop_assert_eq!(bits(&sparse), bits(&dense));
        }

        /// Issue 20: block-sparse int8 weights with their empty tiles skipped are exact on
        /// random shapes, block shapes (tile-aligned or not) and densities, on one worker and
        /// two; bf16 likewise on small integers, whose sums f32 holds exactly in any order.
        #[test]
        fn issue_20_kept_tiles_are_exact_at_every_edge(
            n in 1usize..90, k in 1usize..700, m in 1usize..140, seed in any::<u64>(), threads in 1usize..3,
            shape in prop::sample::select(vec![(16usize, 16usize), (16, 64), (32, 32), (8, 8), (48, 16)]),
            density in 0.0f64..1.0,
        ) {
            if !available(Op::I8) {
                return Ok(());
            }
            let mut w: Vec<i8> = bytes(seed, n * k).into_iter().map(|b| b as i8).collect();
            prune_blocks(&mut w, (n, k), shape, density, seed);
            let x: Vec<i8> = bytes(!seed, k * m).into_iter().map(|b| b as i8).collect();
            let tiles = KeptTiles::new(&w, n, k);
            let mut y = vec![7i32; n * m];
            // SAFETY: available; shapes as promised; k < 700 keeps the sums in i32.
            unsafe { tiles.spmm(threads, &x, &mut y, m) };
            prop_assert_eq!(&y, &naive_i8(&w, &x, n, k, m));
            if available(Op::Bf16) {
                // bf16 of the integers -8..=7 (exact), products ≤ 64, sums < 2^24.
                let small = |b: &u8| half::bf16::from_f32(f32::from((*b % 16) as i8 - 8)).to_bits();
                let mut w16: Vec<u16> = bytes(seed ^ 1, n * k).iter().map(small).collect();
                prune_blocks(&mut w16, (n, k), shape, density, seed);
                let x16: Vec<u16> = bytes(seed ^ 2, k * m).iter().map(small).collect();
                let value = |b: u16| half::bf16::from_bits(b).to_f32() as i32;
                let wi: Vec<i8> = w16.iter().map(|&b| value(b) as i8).collect();
                let xi: Vec<i8> = x16.iter().map(|&b| value(b) as i8).collect();
                let mut y = vec![f32::NAN; n * m];
                // SAFETY: available (checked); the shapes as promised.
                unsafe { KeptTiles::new(&w16, n, k).spmm(threads, &x16, &mut y, m) };
                let want: Vec<f32> = naive_i8(&wi, &xi, n, k, m).into_iter().map(|v| v as f32).collect();
                prop_assert_eq!(y, want);
            }
        }
    }

    /// Issue 20: a token block whose activations outgrow [`WHOLE_K_ACTIVATIONS`] walks K
    /// blocks outermost (few of the proptests' shapes do), then a last one-tile block runs
    /// the whole-K register tile (the proptests cover the blocks under the limit); each
    /// order is exact, dense and 2:4.
    #[test]
    fn issue_20_int8_tiles_are_exact_in_every_loop_order() {
        if !available(Op::I8) {
            return;
        }
        let (n, k, m): (usize, usize, usize) = (20, 4200, 260);
        assert!(TOKEN_TILES * k.div_ceil(64) * size_of::<Tile>() > WHOLE_K_ACTIVATIONS);
        let mut w: Vec<i8> = bytes(3, n * k).into_iter().map(|b| b as i8).collect();
        let x: Vec<i8> = bytes(4, k * m).into_iter().map(|b| b as i8).collect();
        let mut y = vec![7i32; n * m];
        // SAFETY: available; shapes as promised; |sums| ≤ 4200 · 128² fits i32.
        unsafe { AmxWeights::new(&w, n, k).gemm(2, &x, &mut y, m) };
        assert_eq!(y, naive_i8(&w, &x, n, k, m));
        if SparseTiles::available(Op::I8) {
            prune_two_of_four(&mut w, k, 5);
            let mut y = vec![7i32; n * m];
            // SAFETY: as above, and VBMI2 (checked).
            unsafe { SparseTiles::new(&w, n, k).expect("2:4").spmm(2, &x, &mut y, m) };
            assert_eq!(y, naive_i8(&w, &x, n, k, m));
        }
    }

    /// Issue 20: a group of four with three non-zeros is no 2:4 and gets no tiles.
    #[test]
    fn issue_20_an_overfull_group_gets_no_sparse_tiles() {
        assert!(SparseTiles::new(&[1i8, 0, 2, 3, 0, 0, 0, 0], 1, 8).is_none());
        let tiles = SparseTiles::new(&[1i8, 0, 2, 0, 0, 0, 0, 5], 1, 8).expect("2:4");
        // One panel × one 64-k step: 16 rows of 32 kept bytes and two mask words a row.
        assert_eq!((tiles.value_bytes(), tiles.metadata_bytes()), (16 * 32, 16 * 8));
    }
}
