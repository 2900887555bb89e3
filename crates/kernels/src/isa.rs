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
    /// Any other sparse format (other N:M patterns, CSR, BSR).
    OtherSparse,
}

/// The instruction-set path of a product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IsaPath {
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

/// The path a product of `operands` on `form` weights takes on this CPU for many tokens
/// (features detected at run time, as the kernels detect them); see [`isa_path_at`].
pub fn isa_path(operands: Operands, form: Form) -> IsaPath {
    isa_path_at(operands, form, usize::MAX)
}

/// The path a product of `tokens` tokens takes: bf16 runs on `vdpbf16ps` below
/// [`BF16_DOT_BELOW_TOKENS`](crate::precision::BF16_DOT_BELOW_TOKENS) tokens wherever the CPU
/// has it, and past that on the kernel the process measured faster.
pub fn isa_path_at(operands: Operands, form: Form, tokens: usize) -> IsaPath {
    match (operands, form) {
        #[cfg(target_arch = "x86_64")]
        (Operands::Bf16, Form::Dense | Form::TwoOfFour)
            if tokens < crate::precision::BF16_DOT_BELOW_TOKENS && super::half_dot::available() =>
        {
            IsaPath::Avx512Bf16
        }
        #[cfg(target_arch = "x86_64")]
        (Operands::Bf16, Form::Dense | Form::TwoOfFour) if super::half_dot::bf16_widens() => {
            IsaPath::Avx512Bf16Widen
        }
        #[cfg(target_arch = "x86_64")]
        (Operands::Bf16, Form::Dense | Form::TwoOfFour) if super::half_dot::available() => {
            IsaPath::Avx512Bf16
        }
        #[cfg(target_arch = "x86_64")]
        (Operands::F16, Form::Dense | Form::TwoOfFour) if super::half_dot::f16_available() => {
            IsaPath::Avx512F16Widen
        }
        (Operands::F16 | Operands::Bf16, _) => IsaPath::WidenF32,
        #[cfg(target_arch = "x86_64")]
        (Operands::I8, _) if super::int8_vnni::available() => IsaPath::Avx512Vnni,
        (Operands::I8, _) => IsaPath::WidenI32,
        (Operands::F32, _) => f32_path(),
    }
}

/// The f32 kernels' vector width: the dense comparator's panels and the sparse kernels need
/// AVX-512F; the `gemm` crate and the sparse kernels' AVX2 loops take AVX2 + FMA.
fn f32_path() -> IsaPath {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            return IsaPath::Avx512F32;
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
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
        let all = [Form::Dense, Form::TwoOfFour, Form::OtherSparse];
        for form in all {
            assert_eq!(isa_path(Operands::F32, form), f32_path());
        }
        assert_eq!(isa_path(Operands::F16, Form::OtherSparse), IsaPath::WidenF32);
        #[cfg(target_arch = "x86_64")]
        {
            let bf16 = if crate::half_dot::bf16_widens() {
                IsaPath::Avx512Bf16Widen
            } else if crate::half_dot::available() {
                IsaPath::Avx512Bf16
            } else {
                IsaPath::WidenF32
            };
            assert_eq!(isa_path(Operands::Bf16, Form::Dense), bf16);
            assert_eq!(isa_path(Operands::Bf16, Form::TwoOfFour), bf16);
            let i8 = if crate::int8_vnni::available() {
                IsaPath::Avx512Vnni
            } else {
                IsaPath::WidenI32
            };
            assert_eq!(isa_path(Operands::I8, Form::TwoOfFour), i8);
            let f16 = if crate::half_dot::f16_available() {
                IsaPath::Avx512F16Widen
            } else {
                IsaPath::WidenF32
            };
            assert_eq!(isa_path(Operands::F16, Form::Dense), f16);
            assert_eq!(isa_path(Operands::F16, Form::TwoOfFour), f16);
        }
        assert_eq!(isa_path(Operands::Bf16, Form::OtherSparse), IsaPath::WidenF32);
        assert_eq!(IsaPath::Avx512Bf16.to_string(), "avx512-bf16");
    }

    /// Issue 20: the pin a gate hands its child runs names the kernel this process runs.
    #[test]
    fn issue_20_the_bf16_pin_names_the_chosen_kernel() {
        let (env, value) = bf16_kernel_pin();
        assert_eq!(env, BF16_KERNEL_ENV);
        let widened = isa_path(Operands::Bf16, Form::Dense) == IsaPath::Avx512Bf16Widen;
        assert_eq!(value, if widened { "widen" } else { "dot" });
    }
}
