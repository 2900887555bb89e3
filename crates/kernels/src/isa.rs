//! Which instruction-set path a product takes on this CPU, by name, so that evidence can say
//! what a comparator and a candidate actually ran on (a bf16 speedup against an f32 kernel on
//! 16-bit storage is not one against `vdpbf16ps`).

/// The environment variable that pins the bf16 kernels to `dot` (`vdpbf16ps`) or `widen`
/// (widening in registers for f32 FMA) instead of measuring which is faster on this CPU, so
/// that a benchmark can time both on one machine (issue 20).
pub const BF16_KERNEL_ENV: &str = "SPARSEGATE_BF16_KERNEL";

/// [`BF16_KERNEL_ENV`] and the value that pins this process's bf16 kernel choice (`dot` or
/// `widen`), for the processes it starts: one gate's runs must share it, and a measurement
/// per process could flip on a loaded machine.
pub fn bf16_kernel_pin() -> (&'static str, &'static str) {
    #[cfg(target_arch = "x86_64")]
    let widens = super::half_dot::bf16_widens();
    #[cfg(not(target_arch = "x86_64"))]
    let widens = false;
    (BF16_KERNEL_ENV, if widens { "widen" } else { "dot" })
}

/// The two bf16 kernels of a CPU with AVX-512 (issue 20): `vdpbf16ps` on bf16 pairs, or
/// widening bf16 to f32 in registers (a 16-bit shift) for f32 FMA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Bf16Kernel {
    /// `vdpbf16ps` (AVX-512 BF16): path [`IsaPath::Avx512Bf16`].
    Dot,
    /// Widen for f32 FMA: path [`IsaPath::Avx512Bf16Widen`].
    Widen,
}

impl Bf16Kernel {
    /// The name [`BF16_KERNEL_ENV`] takes: `dot` or `widen`.
    pub fn name(self) -> &'static str {
        match self {
            Bf16Kernel::Dot => "dot",
            Bf16Kernel::Widen => "widen",
        }
    }

    /// The kernel [`BF16_KERNEL_ENV`] names (`dot` or `widen`), if any.
    pub fn from_name(name: &str) -> Option<Bf16Kernel> {
        match name {
            "dot" => Some(Bf16Kernel::Dot),
            "widen" => Some(Bf16Kernel::Widen),
            _ => None,
        }
    }

    /// The instruction-set path the kernel runs on (what evidence records).
    pub fn path(self) -> IsaPath {
        match self {
            Bf16Kernel::Dot => IsaPath::Avx512Bf16,
            Bf16Kernel::Widen => IsaPath::Avx512Bf16Widen,
        }
    }

    /// The path the kernel's products of `tokens` tokens on `form` weights take: `widen`
    /// widens dense and 2:4 weights to f32 once from a token count
    /// ([`widens_once`](crate::precision::widens_once)): path `widen-f32`, as
    /// the environment lock records it at many tokens.
    pub fn path_at(self, form: Form, tokens: usize) -> IsaPath {
        match self {
            Bf16Kernel::Widen
                if crate::precision::widens_once(crate::precision::Half::Bf16, form, tokens) =>
            {
                IsaPath::WidenF32
            }
            _ => self.path(),
        }
    }

    /// The kernel behind a recorded path name (`avx512-bf16`, `avx512-bf16-shift`); `None`
    /// for a path that is neither (no AVX-512: bf16 widens to a portable f32 path).
    pub fn from_path_name(name: &str) -> Option<Bf16Kernel> {
        [Bf16Kernel::Dot, Bf16Kernel::Widen]
            .into_iter()
            .find(|k| k.path().name() == name)
    }
}

impl std::fmt::Display for Bf16Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How this process's bf16 kernel was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bf16Source {
    /// The CPU runs only one of the two kernels.
    Only,
    /// [`BF16_KERNEL_ENV`] named it.
    Requested,
    /// [`pin_bf16_kernel`] set it before anything measured.
    Pinned,
    /// A short timing probe of both (once per process): the choice can flip between
    /// processes on a loaded machine.
    Measured,
}

/// This process's bf16 kernel and how it was chosen: `None` where neither kernel runs (no
/// AVX-512: bf16 products widen to f32 on a portable path). Reading it makes the choice
/// (measuring, unless pinned or requested) if nothing has yet.
pub fn bf16_pick() -> Option<(Bf16Kernel, Bf16Source)> {
    if bf16_kernels_offered().is_empty() {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let (widen, source) = super::half_dot::bf16_choice();
        Some((if widen { Bf16Kernel::Widen } else { Bf16Kernel::Dot }, source))
    }
    #[cfg(not(target_arch = "x86_64"))]
    None
}

/// The bf16 kernels this CPU can run, `dot` first: both where it has AVX-512 BF16 and the
/// widening kernels' features, one or none otherwise. Detected, never measured.
pub fn bf16_kernels_offered() -> Vec<Bf16Kernel> {
    #[allow(unused_mut)]
    let mut offered = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if super::half_dot::available() {
            offered.push(Bf16Kernel::Dot);
        }
        if super::half_dot::f16_available() {
            offered.push(Bf16Kernel::Widen);
        }
    }
    offered
}

/// The kernel [`BF16_KERNEL_ENV`] asks for, if it names one (`dot` or `widen`): a user's
/// explicit choice, which nothing overrides.
pub fn bf16_kernel_requested() -> Option<Bf16Kernel> {
    std::env::var(BF16_KERNEL_ENV)
        .ok()
        .as_deref()
        .and_then(Bf16Kernel::from_name)
}

/// Why [`pin_bf16_kernel`] could not pin a kernel.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Bf16PinError {
    /// The CPU does not run the kernel.
    #[error("this CPU cannot run the bf16 {wanted} kernel ({}); it offers {}", wanted.path(), offered_text(offered))]
    NotOffered {
        /// The kernel asked for.
        wanted: Bf16Kernel,
        /// What the CPU runs.
        offered: Vec<Bf16Kernel>,
    },
    /// [`BF16_KERNEL_ENV`] names a kernel: the user's choice stands.
    #[error("{BF16_KERNEL_ENV}={requested} chooses the bf16 kernel")]
    Requested {
        /// The kernel the environment names.
        requested: Bf16Kernel,
    },
    /// The process chose another kernel before the pin.
    #[error("this process already chose the bf16 `{chosen}` kernel")]
    AlreadyChosen {
        /// The kernel in force.
        chosen: Bf16Kernel,
    },
}

/// `dot and widen`, `widen only`, `neither` — what a CPU offers, in words.
pub fn offered_text(offered: &[Bf16Kernel]) -> String {
    match offered {
        [] => "neither bf16 kernel (no AVX-512: bf16 widens on a portable f32 path)".to_owned(),
        [only] => format!("only {only} ({})", only.path()),
        _ => offered
            .iter()
            .map(|k| format!("{k} ({})", k.path()))
            .collect::<Vec<_>>()
            .join(" and "),
    }
}

/// Pin this process's bf16 kernel to `kernel` instead of measuring which is faster (issue
/// 22): a gate runs its golden baseline's pick, so that a probe flipping on a loaded runner
/// does not make bless and gate incomparable. Refused where the CPU cannot run `kernel`,
/// where [`BF16_KERNEL_ENV`] names a kernel (the user's choice wins), and where the process
/// already chose the other one; pinning the kernel already in force is fine. The processes
/// this one starts inherit it through [`bf16_kernel_pin`].
pub fn pin_bf16_kernel(kernel: Bf16Kernel) -> Result<(), Bf16PinError> {
    let offered = bf16_kernels_offered();
    if !offered.contains(&kernel) {
        return Err(Bf16PinError::NotOffered {
            wanted: kernel,
            offered,
        });
    }
    if let Some(requested) = bf16_kernel_requested() {
        // The environment's choice is made (and recorded as requested) when first read.
        return if requested == kernel {
            Ok(())
        } else {
            Err(Bf16PinError::Requested { requested })
        };
    }
    if offered.len() < 2 {
        return Ok(());
    }
    #[cfg(target_arch = "x86_64")]
    super::half_dot::pin_bf16(kernel == Bf16Kernel::Widen).map_err(|(widen, _)| {
        Bf16PinError::AlreadyChosen {
            chosen: if widen { Bf16Kernel::Widen } else { Bf16Kernel::Dot },
        }
    })?;
    Ok(())
}

/// How a product's operands are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operands {
    /// f32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
    /// int8 (i32 sums).
    I8,
}

/// The form of a product's weights, as far as the choice of kernel goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Form {
    /// Dense.
    Dense,
    /// 2:4 structured.
    TwoOfFour,
    /// Blocks of `rows × cols` (BSR): bf16 runs them on `vdpbf16ps` where they are whole
    /// panels of rows and pairs of K.
    Block {
        /// Block height.
        rows: usize,
        /// Block width.
        cols: usize,
    },
    /// Unstructured (CSR) with reduction length `k`: bf16 and f16 run it on 16-bit values
    /// and u16 columns where `k ≤ 65536`.
    Unstructured {
        /// K of the product.
        k: usize,
    },
    /// Any other sparse format (other N:M patterns).
    OtherSparse,
}

/// The instruction-set path of a product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IsaPath {
    /// bf16 tiles into f32 with `tdpbf16ps` (AMX-BF16), 16 × 16 sums a tile.
    AmxBf16,
    /// int8 tiles into i32 with `tdpbssd` (AMX-INT8), 16 × 16 sums a tile.
    AmxInt8,
    /// f16 as three bf16 tile products into f32 (`tdpbf16ps`, AMX-BF16): each f16 split into
    /// a bf16 `hi` and `lo`, `wh·xh + wh·xl + wl·xh` (where the CPU has no AMX-FP16).
    AmxBf16x3,
    /// bf16 pairs into f32 with `vdpbf16ps` (AVX-512 BF16).
    Avx512Bf16,
    /// f16 weights streamed as f16, widened in registers (`vcvtph2ps`) for f32 FMA on zmm.
    Avx512F16Widen,
    /// bf16 weights streamed as bf16, widened in registers (a 16-bit shift) for f32 FMA on
    /// zmm: where `vdpbf16ps` is no faster than the FMA (issue 20).
    Avx512Bf16Widen,
    /// int8 quads into i32 with `vpdpbusd` (AVX-512 VNNI).
    Avx512Vnni,
    /// f32 FMA on zmm (AVX-512F).
    Avx512F32,
    /// f32 FMA on ymm (AVX2 + FMA).
    Avx2F32,
    /// f32 in portable code (what the compiler makes of it for the build's target).
    PortableF32,
    /// 16-bit operands widened to f32, then an f32 path.
    WidenF32,
    /// int8 widened to i32 per product (the axpy loop).
    WidenI32,
}

impl IsaPath {
    /// The path's stable name, as evidence records it.
    pub fn name(self) -> &'static str {
        match self {
            IsaPath::AmxBf16 => "amx-bf16",
            IsaPath::AmxInt8 => "amx-int8",
            IsaPath::AmxBf16x3 => "amx-bf16x3",
            IsaPath::Avx512Bf16 => "avx512-bf16",
            IsaPath::Avx512F16Widen => "avx512-f16-cvtph",
            IsaPath::Avx512Bf16Widen => "avx512-bf16-shift",
            IsaPath::Avx512Vnni => "avx512-vnni",
            IsaPath::Avx512F32 => "avx512-f32",
            IsaPath::Avx2F32 => "avx2-f32",
            IsaPath::PortableF32 => "portable-f32",
            IsaPath::WidenF32 => "widen-f32",
            IsaPath::WidenI32 => "widen-i32",
        }
    }
}

impl std::fmt::Display for IsaPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether blocks of `rows × cols` are a shape the block kernels of `operands` take as the
/// dense kernel's operands (bf16: whole 16-row panels and K-pairs; int8: whole panels and
/// K-quads), the CPU's features aside: the one statement of the rule, which lowering names
/// in its reasons and the kernels check before building their forms. Other operands: never.
pub fn blocks_fit(operands: Operands, rows: usize, cols: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    match operands {
        Operands::Bf16 => return super::half_dot::blocks_fit(rows, cols),
        Operands::I8 => return super::int8_blocks::fits(rows, cols),
        Operands::F32 | Operands::F16 => {}
    }
    let _ = (operands, rows, cols);
    false
}

/// Whether the dense comparator of `operands` runs on AMX tiles in this process: the CPU has
/// the tile instructions for them (AMX-BF16, AMX-INT8; f16 as three bf16 products, from
/// [`F16_TILES_FROM_TOKENS`](crate::precision::F16_TILES_FROM_TOKENS) tokens) and Linux
/// granted tile data. Asking makes the request (once per process); it reads no timing probe.
pub fn tiles_granted(operands: Operands) -> bool {
    #[cfg(target_arch = "x86_64")]
    match operands {
        Operands::Bf16 => return super::amx::available(super::amx::Op::Bf16),
        Operands::I8 => return super::amx::available(super::amx::Op::I8),
        Operands::F16 => return super::amx::f16_available(),
        Operands::F32 => {}
    }
    let _ = operands;
    false
}

/// The path a product of `operands` on `form` weights takes on this CPU for many tokens
/// (features detected at run time, as the kernels detect them); see [`isa_path_at`].
pub fn isa_path(operands: Operands, form: Form) -> IsaPath {
    isa_path_at(operands, form, usize::MAX)
}

/// The path a product of `tokens` tokens takes: dense bf16 and int8 on AMX tiles where
/// Linux grants them, 2:4 on them from the token count where they pay; bf16 otherwise on
/// `vdpbf16ps` below [`BF16_DOT_BELOW_TOKENS`](crate::precision::BF16_DOT_BELOW_TOKENS)
/// tokens wherever the CPU has it, and past that on the kernel the process measured faster
/// (where that widens, to f32 once from a token count); f16 without the tiles widened in
/// registers, and from a token count widened to f32 once (both counts:
/// [`widens_once`](crate::precision::widens_once)).
pub fn isa_path_at(operands: Operands, form: Form, tokens: usize) -> IsaPath {
    match (operands, form) {
        (Operands::Bf16, Form::Dense) if tiles_granted(operands) => IsaPath::AmxBf16,
        (Operands::I8, Form::Dense)
            if tiles_granted(operands)
                && (tokens >= crate::precision::INT8_TILES_FROM_TOKENS || !int8_vector()) =>
        {
            IsaPath::AmxInt8
        }
        #[cfg(target_arch = "x86_64")]
        (Operands::Bf16, Form::TwoOfFour)
            if super::amx::SparseTiles::pays_at(super::amx::Op::Bf16, tokens) =>
        {
            IsaPath::AmxBf16
        }
        #[cfg(target_arch = "x86_64")]
        (Operands::I8, Form::TwoOfFour) if super::amx::SparseTiles::pays_at(super::amx::Op::I8, tokens) => {
            IsaPath::AmxInt8
        }
        // Blocks of whole panels × 16s of K on the tiles, empty tiles skipped (`KeptTiles`).
        #[cfg(target_arch = "x86_64")]
        (Operands::Bf16, Form::Block { rows, cols })
            if super::amx::KeptTiles::pays_at(super::amx::Op::Bf16, (rows, cols), tokens) =>
        {
            IsaPath::AmxBf16
        }
        #[cfg(target_arch = "x86_64")]
        (Operands::I8, Form::Block { rows, cols })
            if super::amx::KeptTiles::pays_at(super::amx::Op::I8, (rows, cols), tokens) =>
        {
            IsaPath::AmxInt8
        }
        #[cfg(target_arch = "x86_64")]
        (Operands::Bf16, Form::Dense | Form::TwoOfFour)
            if super::half_dot::available() || super::half_dot::f16_available() =>
        {
            bf16_vector_path(form, tokens)
        }
        // Block bf16 takes `vdpbf16ps` wherever the vector kernels do (`BlockBf16`).
        #[cfg(target_arch = "x86_64")]
        (Operands::Bf16, Form::Block { rows, cols })
            if super::half_dot::blocks_fit(rows, cols)
                && bf16_vector_path(form, tokens) == IsaPath::Avx512Bf16 =>
        {
            IsaPath::Avx512Bf16
        }
        #[cfg(target_arch = "x86_64")]
        (Operands::F16, Form::Dense) if super::amx::F16Tiles::pays_at(tokens) => IsaPath::AmxBf16x3,
        #[cfg(target_arch = "x86_64")]
        (Operands::F16, Form::TwoOfFour) if super::amx::F16Tiles::two_of_four_pays_at(tokens) => {
            IsaPath::AmxBf16x3
        }
        #[cfg(target_arch = "x86_64")]
        (Operands::F16, Form::Dense | Form::TwoOfFour)
            if super::half_dot::f16_available()
                && !crate::precision::widens_once(crate::precision::Half::F16, form, tokens) =>
        {
            IsaPath::Avx512F16Widen
        }
        // `CsrHalf`: 16-bit values widened in registers wherever it is built.
        (Operands::Bf16, Form::Unstructured { k }) if super::csr_half::runs(k) => IsaPath::Avx512Bf16Widen,
        (Operands::F16, Form::Unstructured { k }) if super::csr_half::runs(k) => IsaPath::Avx512F16Widen,
        (Operands::F16 | Operands::Bf16, _) => IsaPath::WidenF32,
        #[cfg(target_arch = "x86_64")]
        (Operands::I8, _) if super::int8_vnni::available() => IsaPath::Avx512Vnni,
        (Operands::I8, _) => IsaPath::WidenI32,
        (Operands::F32, _) => f32_path(),
    }
}

/// Whether the CPU runs the int8 VNNI kernels (the dense comparator's below
/// [`INT8_TILES_FROM_TOKENS`](crate::precision::INT8_TILES_FROM_TOKENS) tokens).
fn int8_vector() -> bool {
    #[cfg(target_arch = "x86_64")]
    return super::int8_vnni::available();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The AVX-512 bf16 kernels' path (with AVX-512 BF16 or the widening kernels' features):
/// `vdpbf16ps` below [`BF16_DOT_BELOW_TOKENS`](crate::precision::BF16_DOT_BELOW_TOKENS)
/// tokens, past that the kernel the process measured faster (widening dense and 2:4 weights
/// to f32 once from the token counts of
/// [`widens_once`](crate::precision::widens_once)).
#[cfg(target_arch = "x86_64")]
fn bf16_vector_path(form: Form, tokens: usize) -> IsaPath {
    let dot = super::half_dot::available();
    if dot && tokens < crate::precision::BF16_DOT_BELOW_TOKENS {
        IsaPath::Avx512Bf16
    } else if super::half_dot::bf16_widens() {
        Bf16Kernel::Widen.path_at(form, tokens)
    } else if dot {
        IsaPath::Avx512Bf16
    } else {
        IsaPath::WidenF32
    }
}

/// The f32 kernels' vector width: the dense comparator's panels and the sparse kernels need
/// AVX-512F; the `gemm` crate and the sparse kernels' AVX2 loops take AVX2 + FMA.
fn f32_path() -> IsaPath {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::cpu::has!("avx512f") {
            return IsaPath::Avx512F32;
        }
        if crate::cpu::has!("avx2") && crate::cpu::has!("fma") {
            return IsaPath::Avx2F32;
        }
    }
    IsaPath::PortableF32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_20_paths_follow_the_detected_features() {
        let all = [
            Form::Dense,
            Form::TwoOfFour,
            Form::Block { rows: 16, cols: 16 },
            Form::OtherSparse,
        ];
        for form in all {
            assert_eq!(isa_path(Operands::F32, form), f32_path());
        }
        assert_eq!(isa_path(Operands::F16, Form::OtherSparse), IsaPath::WidenF32);
        #[cfg(target_arch = "x86_64")]
        {
            // At many tokens a process that picked widening widens the weights once.
            let bf16 = if !crate::half_dot::bf16_widens() && crate::half_dot::available() {
                IsaPath::Avx512Bf16
            } else {
                IsaPath::WidenF32
            };
            // The dense comparator takes the tiles wherever they are granted; the sparse
            // kernels stay on AVX-512.
            let dense_bf16 = if tiles_granted(Operands::Bf16) {
                IsaPath::AmxBf16
            } else {
                bf16
            };
            assert_eq!(isa_path(Operands::Bf16, Form::Dense), dense_bf16);
            let sparse_tiles = |op| crate::amx::SparseTiles::available(op);
            let two_of_four_bf16 = if sparse_tiles(crate::amx::Op::Bf16) {
                IsaPath::AmxBf16
            } else {
                bf16
            };
            assert_eq!(isa_path(Operands::Bf16, Form::TwoOfFour), two_of_four_bf16);
            // Without the tiles, widening runs in registers below the count widens_once sets
            // and on the weights widened to f32 once from it, dense and 2:4 alike.
            if crate::half_dot::bf16_widens() && !tiles_granted(Operands::Bf16) {
                for form in [Form::Dense, Form::TwoOfFour] {
                    let widens =
                        crate::precision::widens_once_from(crate::precision::Half::Bf16, form).unwrap();
                    let at = |tokens| isa_path_at(Operands::Bf16, form, tokens);
                    assert_eq!(at(widens - 1), IsaPath::Avx512Bf16Widen, "{form:?}");
                    assert_eq!(at(widens), IsaPath::WidenF32, "{form:?}");
                }
            }
            // Blocks of whole panels and 16s of K run on the tiles where they are granted;
            // else blocks of whole panels and pairs run on the dot product with the
            // comparator; other block shapes widen.
            let kept_tiles = |op| crate::amx::KeptTiles::pays_at(op, (32, 16), usize::MAX);
            let block = if kept_tiles(crate::amx::Op::Bf16) {
                IsaPath::AmxBf16
            } else if bf16 == IsaPath::Avx512Bf16 {
                bf16
            } else {
                IsaPath::WidenF32
            };
            assert_eq!(
                isa_path(Operands::Bf16, Form::Block { rows: 32, cols: 16 }),
                block
            );
            assert_eq!(
                isa_path(Operands::Bf16, Form::Block { rows: 8, cols: 16 }),
                IsaPath::WidenF32
            );
            assert_eq!(
                isa_path(Operands::Bf16, Form::Block { rows: 16, cols: 3 }),
                IsaPath::WidenF32
            );
            let i8 = if crate::int8_vnni::available() {
                IsaPath::Avx512Vnni
            } else {
                IsaPath::WidenI32
            };
            let two_of_four_i8 = if sparse_tiles(crate::amx::Op::I8) {
                IsaPath::AmxInt8
            } else {
                i8
            };
            assert_eq!(isa_path(Operands::I8, Form::TwoOfFour), two_of_four_i8);
            assert_eq!(isa_path(Operands::I8, Form::OtherSparse), i8);
            let block_i8 = if kept_tiles(crate::amx::Op::I8) {
                IsaPath::AmxInt8
            } else {
                i8
            };
            assert_eq!(
                isa_path(Operands::I8, Form::Block { rows: 32, cols: 16 }),
                block_i8
            );
            assert_eq!(isa_path(Operands::I8, Form::Block { rows: 32, cols: 8 }), i8);
            // The tiles take blocks from a token count set by how many share a tile's K.
            let at =
                |operands, (rows, cols), tokens| isa_path_at(operands, Form::Block { rows, cols }, tokens);
            if kept_tiles(crate::amx::Op::Bf16) {
                assert_ne!(at(Operands::Bf16, (16, 16), 3), IsaPath::AmxBf16);
                assert_eq!(at(Operands::Bf16, (16, 16), 4), IsaPath::AmxBf16);
                assert_eq!(at(Operands::Bf16, (32, 32), 1), IsaPath::AmxBf16);
            }
            if kept_tiles(crate::amx::Op::I8) {
                assert_eq!(at(Operands::I8, (16, 16), 31), i8);
                assert_eq!(at(Operands::I8, (16, 16), 32), IsaPath::AmxInt8);
                assert_eq!(at(Operands::I8, (32, 64), 3), i8);
                assert_eq!(at(Operands::I8, (32, 64), 4), IsaPath::AmxInt8);
            }
            let dense_i8 = if tiles_granted(Operands::I8) {
                IsaPath::AmxInt8
            } else {
                i8
            };
            assert_eq!(isa_path(Operands::I8, Form::Dense), dense_i8);
            // One or two tokens stream the weights on VNNI where the CPU has it.
            let from = crate::precision::INT8_TILES_FROM_TOKENS;
            assert_eq!(isa_path_at(Operands::I8, Form::Dense, from), dense_i8);
            let few = if int8_vector() { i8 } else { dense_i8 };
            assert_eq!(isa_path_at(Operands::I8, Form::Dense, from - 1), few);
            // f16 takes the bf16 tiles (three products) from the token count where they pay
            // (2:4 earlier, where the CPU expands it); without them it widens in registers,
            // and to f32 once from the count `widens_once` sets per form.
            let widens_from =
                |form| crate::precision::widens_once_from(crate::precision::Half::F16, form).unwrap();
            let f16 = |form, tokens: usize| {
                if crate::half_dot::f16_available() && tokens < widens_from(form) {
                    IsaPath::Avx512F16Widen
                } else {
                    IsaPath::WidenF32
                }
            };
            let tiles = tiles_granted(Operands::F16);
            let sparse_tiles = crate::amx::SparseTiles::available(crate::amx::Op::Bf16) && tiles;
            for (form, tiles, from) in [
                (Form::Dense, tiles, crate::precision::F16_TILES_FROM_TOKENS),
                (
                    Form::TwoOfFour,
                    sparse_tiles,
                    crate::precision::F16_TWO_OF_FOUR_TILES_FROM_TOKENS,
                ),
            ] {
                let expected = |tokens| {
                    if tiles && tokens >= from {
                        IsaPath::AmxBf16x3
                    } else {
                        f16(form, tokens)
                    }
                };
                let widens = widens_from(form);
                for tokens in [1, from - 1, from, widens - 1, widens, usize::MAX] {
                    let path = isa_path_at(Operands::F16, form, tokens);
                    assert_eq!(path, expected(tokens), "{form:?} at {tokens}");
                }
                assert_eq!(f16(form, widens), IsaPath::WidenF32);
            }
        }
        assert_eq!(isa_path(Operands::Bf16, Form::OtherSparse), IsaPath::WidenF32);
        assert_eq!(IsaPath::Avx512Bf16.to_string(), "avx512-bf16");
    }

    /// Issue 22: a gate pins its golden baseline's bf16 kernel; in a process that already
    /// chose, pinning the same kernel is fine and the other is refused with the one in
    /// force, and a kernel the CPU lacks is refused naming what it offers.
    #[test]
    fn pinning_the_bf16_kernel_keeps_a_choice_made_and_refuses_the_other() {
        let offered = bf16_kernels_offered();
        let Some((chosen, _)) = bf16_pick() else {
            assert!(offered.is_empty());
            for k in [Bf16Kernel::Dot, Bf16Kernel::Widen] {
                assert_eq!(
                    pin_bf16_kernel(k),
                    Err(Bf16PinError::NotOffered {
                        wanted: k,
                        offered: vec![]
                    })
                );
            }
            return;
        };
        assert!(offered.contains(&chosen), "{chosen} not in {offered:?}");
        if bf16_kernel_requested().is_none() {
            assert_eq!(pin_bf16_kernel(chosen), Ok(()));
        }
        for other in [Bf16Kernel::Dot, Bf16Kernel::Widen]
            .into_iter()
            .filter(|k| *k != chosen)
        {
            let err = pin_bf16_kernel(other).unwrap_err();
            match &err {
                Bf16PinError::NotOffered { wanted, offered: o } => {
                    assert_eq!((*wanted, o), (other, &offered));
                    assert!(err.to_string().contains(&offered_text(&offered)), "{err}");
                }
                Bf16PinError::AlreadyChosen { chosen: c } => assert_eq!(*c, chosen),
                Bf16PinError::Requested { requested } => assert_eq!(*requested, chosen),
            }
        }
        assert_eq!(bf16_pick().map(|p| p.0), Some(chosen));
    }

    /// Issue 22: a baseline's recorded path names the kernel to pin, and back.
    #[test]
    fn a_recorded_bf16_path_names_its_kernel() {
        for k in [Bf16Kernel::Dot, Bf16Kernel::Widen] {
            assert_eq!(Bf16Kernel::from_path_name(k.path().name()), Some(k));
            assert_eq!(Bf16Kernel::from_name(k.name()), Some(k));
        }
        assert_eq!(Bf16Kernel::from_path_name("avx512-bf16"), Some(Bf16Kernel::Dot));
        assert_eq!(
            Bf16Kernel::from_path_name("avx512-bf16-shift"),
            Some(Bf16Kernel::Widen)
        );
        assert_eq!(Bf16Kernel::from_path_name("widen-f32"), None);
        // Widening widens the weights once from a token count; the dot product never.
        for form in [Form::Dense, Form::TwoOfFour] {
            let widens = crate::precision::widens_once_from(crate::precision::Half::Bf16, form).unwrap();
            assert_eq!(
                Bf16Kernel::Widen.path_at(form, widens - 1),
                IsaPath::Avx512Bf16Widen
            );
            assert_eq!(Bf16Kernel::Widen.path_at(form, widens), IsaPath::WidenF32);
            assert_eq!(Bf16Kernel::Dot.path_at(form, usize::MAX), IsaPath::Avx512Bf16);
        }
        let block = Form::Block { rows: 32, cols: 16 };
        assert_eq!(
            Bf16Kernel::Widen.path_at(block, usize::MAX),
            IsaPath::Avx512Bf16Widen
        );
        assert_eq!(Bf16Kernel::from_name("fast"), None);
        assert!(offered_text(&[]).contains("neither"));
        assert_eq!(
            offered_text(&[Bf16Kernel::Widen]),
            "only widen (avx512-bf16-shift)"
        );
    }

    /// Issue 20: the pin a gate hands its child runs names the kernel this process runs.
    #[test]
    fn issue_20_the_bf16_pin_names_the_chosen_kernel() {
        let (env, value) = bf16_kernel_pin();
        assert_eq!(env, BF16_KERNEL_ENV);
        let widened = bf16_pick().is_some_and(|(k, _)| k == Bf16Kernel::Widen);
        assert_eq!(value, if widened { "widen" } else { "dot" });
    }
}
