//! int8 2:4 at 2–12 tokens (more in groups of up to 12) with output rows in the lanes: per
//! 16-row panel and octet (eight K positions, two groups of four) one zmm holds each row's four
//! kept values as one `vpdpbusd` dword, and per token one `vpshufb` of the octet's eight
//! activation bytes (broadcast) hands every row its own four, the control decoded once per
//! panel and octet from the rows' index bytes and shared by the tokens.
//!
//! Why: the feature-lane kernel (`int8_two_of_four.rs`) selects with `vpermt2b` from 128
//! bytes of a token, per row, and ran at 0.56–0.65× int8 dense at 4–8 tokens on Zen 4. A
//! `vpshufb` + `vpdpbusd` pair issues at ~1.4 cycles there against ~1.0 for one `vpdpbusd`
//! (a lone loop, 8 tokens: 0.38 vs 0.55 ns per 16 rows × 8 K positions, where dense takes
//! two), so at the instruction level this form is ~1.45× dense, and it streams 80 bytes per
//! 16 rows × 8 K positions where dense streams 128.
//!
//! Layout ([`RowLanes`], an execution copy of the compact form built on the first few-token
//! product): `[panel][octet][16 rows][4]` values and `[panel][octet][16 rows]` index bytes,
//! padding rows zero; the `+128` corrections per row as the compact form's.

use super::precision::Epilogue;
use super::shared_output::for_each_chunk;
use super::sparse_rows::prefetch;
use std::arch::x86_64::*;

/// Rows per panel: the i32 lanes of a zmm.
pub(super) const PANEL: usize = 16;
/// Most tokens a group takes (its accumulators, one zmm a token). Past 12 the token-lane
/// kernel's 16-token tile wins: on Zen 4 (× int8 dense, alternated) rows in lanes ran
/// 1.11–1.12 against 0.70–0.73 at 10 tokens, 0.93–1.10 against 0.77–0.82 at 12, 0.87–0.89
/// against 0.91 at 14 and 0.79–0.80 against 1.12 at 16 (4096²).
pub(super) const MAX_TOKENS: usize = 12;
/// Octets the weight stream is prefetched ahead (2 KiB of values). Measured on Zen 4 at 8
/// tokens (2 threads, three alternated rounds, × int8 dense): none 0.70–0.94 on 4096² and
/// 0.81–0.84 on 11008 × 4096, 16 octets 0.92–1.06 and 1.06–1.07, 32 1.15–1.21 and
/// 1.07–1.16, 64 1.01–1.15 and 1.13–1.26; level at 2 and 4 tokens.
const PREFETCH: usize = 32;

/// The compact 2:4 form re-laid by panel and octet (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct RowLanes {
    rows: usize,
    k: usize,
    octets: usize,
    /// `[panel][octet][16][4]`.
    values: Vec<i8>,
    /// `[panel][octet][16]`.
    idx: Vec<u8>,
    /// `-128 · Σ w` per row, padded to whole panels with zeros.
    bias: Vec<i32>,
}

impl RowLanes {
    /// Bytes held: values, index bytes and corrections (padding included).
    pub(super) fn bytes(&self) -> usize {
        self.values.len() + self.idx.len() + self.bias.len() * std::mem::size_of::<i32>()
    }

    /// Lay out `rows × k` weights given, per row and octet, as their four kept values (one
    /// little-endian dword) and index byte, with the rows' corrections.
    pub(super) fn new(
        (rows, k): (usize, usize),
        octet: impl Fn(usize, usize) -> ([i8; 4], u8),
        bias: &[i32],
    ) -> RowLanes {
        let octets = k.div_ceil(8);
        let panels = rows.div_ceil(PANEL);
        let mut values = vec![0i8; panels * octets * PANEL * 4];
        let mut idx = vec![0u8; panels * octets * PANEL];
        for r in 0..rows {
            for o in 0..octets {
                let at = (r / PANEL * octets + o) * PANEL + r % PANEL;
                let (v, i) = octet(r, o);
                values[at * 4..at * 4 + 4].copy_from_slice(&v);
                idx[at] = i;
            }
        }
        let mut padded = bias.to_vec();
        padded.resize(panels * PANEL, 0);
        RowLanes {
            rows,
            k,
            octets,
            values,
            idx,
            bias: padded,
        }
    }

    /// `y[rows × m] = W · x[k × m]` in i32 for any `m ≥ 1` (in groups of up to
    /// [`MAX_TOKENS`]), `scratch` holding the packed activations, stored through `epilogue`.
    ///
    /// # Safety
    /// The compact kernels' features detected (AVX-512F/BW/VL, VNNI, VBMI); `x` holds
    /// `k × m`, `y` `rows × m`; `k ≤ INT8_MAX_K`.
    pub(super) unsafe fn spmm(
        &self,
        threads: usize,
        x: &[i8],
        y: &mut [i32],
        m: usize,
        scratch: &mut Vec<u8>,
        epilogue: Epilogue<'_>,
    ) {
        assert!(m >= 1, "rows-in-lanes int8 2:4: no tokens");
        // Token-major `x + 128`, a token's octets contiguous and zero-padded to whole octets.
        let stride = self.octets * 8;
        scratch.resize(m * stride, 0);
        super::int8_vnni::pack_token_major(x, self.k, m, stride, 0x80, &mut scratch[..m * stride]);
        let xp = &scratch[..m * stride];
        let panels = self.rows.div_ceil(PANEL);
        // Past MAX_TOKENS, equal groups of at most MAX_TOKENS, each panel meeting every group
        // while its weights are in L1/L2.
        let len = m.div_ceil(m.div_ceil(MAX_TOKENS));
        // Four tasks a thread, whole panels each, so uneven cores still balance.
        let per_task = panels.div_ceil(threads.max(1) * 4).max(1);
        let task = |(t, y_rows): (usize, &mut [i32])| {
            let p0 = t * per_task;
            let rows = y_rows.len() / m;
            for p in 0..rows.div_ceil(PANEL) {
                let panel = p0 + p;
                let out = &mut y_rows[p * PANEL * m..((p + 1) * PANEL).min(rows) * m];
                let epilogue = epilogue.rows_from(panel * PANEL);
                for t0 in (0..m).step_by(len) {
                    let x = (&xp[t0 * stride..], stride);
                    let out = (&mut *out, m, t0, epilogue);
                    // SAFETY: the features (contract); the panel's values, indices and biases
                    // and every token's `stride` bytes exist by construction; `out` holds the
                    // panel's valid rows × `m`, the group's columns from `t0`.
                    unsafe {
                        match (m - t0).min(len) {
                            1 => self.panel::<1, 8>(panel, x, out),
                            2 => self.panel::<2, 4>(panel, x, out),
                            3 => self.panel::<3, 2>(panel, x, out),
                            4 => self.panel::<4, 2>(panel, x, out),
                            5 => self.panel::<5, 1>(panel, x, out),
                            6 => self.panel::<6, 1>(panel, x, out),
                            7 => self.panel::<7, 1>(panel, x, out),
                            8 => self.panel::<8, 1>(panel, x, out),
                            9 => self.panel::<9, 1>(panel, x, out),
                            10 => self.panel::<10, 1>(panel, x, out),
                            11 => self.panel::<11, 1>(panel, x, out),
                            _ => self.panel::<12, 1>(panel, x, out),
                        }
                    }
                }
            }
        };
        for_each_chunk(y, per_task * PANEL * m, threads > 1, task);
    }

    /// One panel's rows for `M` tokens into `out` (its valid rows × `M`, row-major, stored
    /// through the epilogue from the panel's first row), the
    /// octets dealt round-robin to `U` sets of accumulators so that few tokens still keep
    /// `U · M` sums in flight (one chain a token waited on `vpdpbusd`'s latency).
    ///
    /// # Safety
    /// AVX-512F, BW, VNNI, VBMI; `panel` is a stored panel; `xp` holds `M` tokens `stride`
    /// bytes apart, `stride ≥ 8 · octets`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vbmi")]
    unsafe fn panel<const M: usize, const U: usize>(
        &self,
        panel: usize,
        (xp, stride): (&[u8], usize),
        (out, ldy, t0, epilogue): (&mut [i32], usize, usize, Epilogue<'_>),
    ) {
        // Output byte `j` of dword `d` of a qword takes the index byte's bits `2j ..` of that
        // dword (`vpmultishiftqb` reads 8 bits at offset `2j + 32d`); its low two bits are the
        // kept value's position in its group, and values 2 and 3 sit in the second group (+4).
        let shifts = _mm512_set1_epi64(0x2624_2220_0604_0200);
        let (low2, second) = (_mm512_set1_epi32(0x0303_0303), _mm512_set1_epi32(0x0404_0000));
        let mut acc = [[_mm512_setzero_si512(); M]; U];
        let base = panel * self.octets;
        let (vp, ip, x) = (self.values.as_ptr(), self.idx.as_ptr(), xp.as_ptr());
        let step = |o: usize, acc: &mut [__m512i; M]| {
            // SAFETY: octet `o` of the panel: 64 value bytes and 16 index bytes; each token's
            // 8 bytes at `8o < stride`; the features (contract).
            unsafe {
                let w = _mm512_loadu_si512(vp.add((base + o) * PANEL * 4).cast());
                let bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(ip.add((base + o) * PANEL).cast()));
                let control = _mm512_ternarylogic_epi32::<0xEA>(
                    _mm512_multishift_epi64_epi8(shifts, bytes),
                    low2,
                    second,
                );
                for (t, a) in acc.iter_mut().enumerate() {
                    let act = _mm512_set1_epi64(x.add(t * stride + 8 * o).cast::<i64>().read_unaligned());
                    *a = _mm512_dpbusd_epi32(*a, _mm512_shuffle_epi8(act, control), w);
                }
            }
        };
        let whole = self.octets / U * U;
        for o in (0..whole).step_by(U) {
            for (u, a) in acc.iter_mut().enumerate() {
                // A value line an octet, an index line every four, `PREFETCH` octets ahead
                // (past the panel's end they only touch the next panel, or nothing).
                let ahead = base + o + u + PREFETCH;
                prefetch(vp.wrapping_add(ahead * PANEL * 4).cast());
                if (o + u) % 4 == 0 {
                    prefetch(ip.wrapping_add(ahead * PANEL).cast());
                }
                step(o + u, a);
            }
        }
        for o in whole..self.octets {
            step(o, &mut acc[0]);
        }
        // SAFETY: the panel's 16 corrections.
        let bias = unsafe { _mm512_loadu_si512(self.bias.as_ptr().add(panel * PANEL).cast()) };
        let acc: [__m512i; M] =
            std::array::from_fn(|t| acc.iter().fold(bias, |s, a| _mm512_add_epi32(s, a[t])));
        let rows = out.len() / ldy;
        for (t, a) in acc.iter().enumerate() {
            let mut lanes = [0i32; PANEL];
            // SAFETY: 16 i32.
            unsafe { _mm512_storeu_si512(lanes.as_mut_ptr().cast(), *a) };
            for (r, &v) in lanes[..rows].iter().enumerate() {
                out[r * ldy + t0 + t] = Epilogue::value(v, epilogue.row_scale(r));
            }
        }
    }
}
