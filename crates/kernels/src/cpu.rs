//! What this CPU offers the kernels: its instruction sets under the cap a user may set
//! ([`MAX_ISA_ENV`]), and facts beyond the feature flags (the vendor, and so where shuffles
//! issue).
//!
//! Every feature test in this crate goes through [`has!`], so one variable makes the whole
//! process take the paths an older CPU would: as oneDNN's `ONEDNN_MAX_CPU_ISA` and MKL's
//! `MKL_ENABLE_INSTRUCTIONS` do for theirs. It is how a runner reproduces what an AVX2-only
//! CI machine measures, and how the tests check the AVX2 and portable paths on a CPU with
//! AVX-512. The `gemm` crate, which takes dense f32 products below AVX-512 and one-off ones,
//! dispatches on its own (AVX-512 wherever the CPU has it), so under a cap below AVX-512
//! `dense::gemm_f32` calls its AVX2 or scalar kernel itself. The cap is x86's: other
//! architectures' kernels are portable here.

/// The variable that caps the instruction sets the kernels use: `portable`, `avx2`,
/// `avx512` (everything but the AMX tiles) or `amx` (everything, as when unset).
pub const MAX_ISA_ENV: &str = "SPARSEGATE_MAX_ISA";

/// Instruction-set levels, each including those below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IsaLevel {
    /// No SIMD paths of our own.
    Portable,
    /// AVX2, FMA and F16C.
    Avx2,
    /// The AVX-512 family (F, BW, VL, VNNI, BF16, FP16, VBMI, VBMI2).
    Avx512,
    /// The AMX tiles too: no cap.
    Amx,
}

impl IsaLevel {
    /// Every level, lowest first.
    pub const ALL: [IsaLevel; 4] = [
        IsaLevel::Portable,
        IsaLevel::Avx2,
        IsaLevel::Avx512,
        IsaLevel::Amx,
    ];

    /// The name [`MAX_ISA_ENV`] takes.
    pub fn name(self) -> &'static str {
        match self {
            IsaLevel::Portable => "portable",
            IsaLevel::Avx2 => "avx2",
            IsaLevel::Avx512 => "avx512",
            IsaLevel::Amx => "amx",
        }
    }

    /// The level a name means, if any.
    pub fn from_name(name: &str) -> Option<IsaLevel> {
        IsaLevel::ALL.into_iter().find(|l| l.name() == name)
    }

    /// The level a feature name (as `is_x86_feature_detected!` spells it, or `amx-…`)
    /// belongs to.
    pub fn of_feature(feature: &str) -> IsaLevel {
        match feature {
            f if f.starts_with("amx") => IsaLevel::Amx,
            f if f.starts_with("avx512") => IsaLevel::Avx512,
            "avx" | "avx2" | "fma" | "f16c" => IsaLevel::Avx2,
            _ => IsaLevel::Portable,
        }
    }
}

/// [`MAX_ISA_ENV`] names no level.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{MAX_ISA_ENV}={value:?} names no instruction-set level; expected one of portable, avx2, avx512, amx"
)]
pub struct UnknownIsaLevel {
    /// The variable's value.
    pub value: String,
}

/// The cap [`MAX_ISA_ENV`] sets now: `None` when unset (no cap), an error when it names no
/// level. The binary checks this before anything runs; the kernels read it once
/// ([`allows`]).
pub fn max_isa() -> Result<Option<IsaLevel>, UnknownIsaLevel> {
    match std::env::var(MAX_ISA_ENV) {
        Err(_) => Ok(None),
        Ok(value) => IsaLevel::from_name(value.trim())
            .map(Some)
            .ok_or(UnknownIsaLevel { value }),
    }
}

/// Whether the cap, read once per process, allows `level` (an unreadable cap allows all:
/// the binary refuses one before any kernel runs).
pub fn allows(level: IsaLevel) -> bool {
    static CAP: std::sync::OnceLock<IsaLevel> = std::sync::OnceLock::new();
    level <= *CAP.get_or_init(|| max_isa().ok().flatten().unwrap_or(IsaLevel::Amx))
}

/// `is_x86_feature_detected!` under the cap: whether the CPU has the feature and
/// [`MAX_ISA_ENV`] lets the kernels use it.
macro_rules! has {
    ($feature:tt) => {
        $crate::cpu::allows($crate::cpu::IsaLevel::of_feature($feature))
            && std::arch::is_x86_feature_detected!($feature)
    };
}
pub(crate) use has;

/// Whether this is an Intel CPU (CPUID vendor string `GenuineIntel`).
///
/// On Intel's AVX-512 cores 512-bit shuffles and byte permutes issue on port 5 only, one of
/// the two 512-bit FMA (and `vpdpbusd`) ports, so a loop that pairs each FMA with a shuffle
/// runs at half rate; on Zen 4/5 shuffles have pipes of their own.
pub(crate) fn intel() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static INTEL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *INTEL.get_or_init(|| {
            let id = std::arch::x86_64::__cpuid(0);
            [id.ebx, id.edx, id.ecx] == [0x756e_6547, 0x4965_6e69, 0x6c65_746e]
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether 512-bit shuffles run beside the FMAs rather than in their slots (see [`intel`]).
pub(crate) fn shuffles_beside_fmas() -> bool {
    !intel()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isa_levels_read_back_from_their_names_and_order_their_features() {
        for level in IsaLevel::ALL {
            assert_eq!(IsaLevel::from_name(level.name()), Some(level));
        }
        assert_eq!(IsaLevel::from_name("avx-512"), None);
        assert_eq!(IsaLevel::of_feature("avx512vnni"), IsaLevel::Avx512);
        assert_eq!(IsaLevel::of_feature("fma"), IsaLevel::Avx2);
        assert_eq!(IsaLevel::of_feature("sse4.2"), IsaLevel::Portable);
        assert_eq!(IsaLevel::of_feature("amx-int8"), IsaLevel::Amx);
        assert!(IsaLevel::Portable < IsaLevel::Avx2 && IsaLevel::Avx512 < IsaLevel::Amx);
    }

    /// Under the cap the suite runs with (see below), a capped feature reads as absent.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn a_capped_feature_reads_as_absent() {
        let cap = max_isa().unwrap().unwrap_or(IsaLevel::Amx);
        assert_eq!(
            has!("avx2"),
            cap >= IsaLevel::Avx2 && std::arch::is_x86_feature_detected!("avx2")
        );
        assert_eq!(
            has!("avx512f"),
            cap >= IsaLevel::Avx512 && std::arch::is_x86_feature_detected!("avx512f")
        );
    }

    /// Whether this CPU reaches `level` (and Linux grants the tiles, for AMX).
    fn reaches(level: IsaLevel) -> bool {
        #[cfg(target_arch = "x86_64")]
        return match level {
            IsaLevel::Amx => {
                crate::amx::available(crate::amx::Op::Bf16) || crate::amx::available(crate::amx::Op::I8)
            }
            IsaLevel::Avx512 => has!("avx512f"),
            IsaLevel::Avx2 => has!("avx2") && has!("fma"),
            IsaLevel::Portable => true,
        };
        #[cfg(not(target_arch = "x86_64"))]
        return level == IsaLevel::Portable;
    }

    /// Issue 20: the whole suite again in a process capped at each level below this CPU's,
    /// so the AVX2 and portable paths an older CPU takes (and AVX-512 without the tiles, on
    /// an AMX part) are checked on this one too. A capped run does not go further down.
    #[test]
    fn the_kernel_tests_pass_under_each_lower_isa_cap() {
        if max_isa().ok().flatten().is_some() {
            return;
        }
        let exe = std::env::current_exe().unwrap();
        for level in IsaLevel::ALL
            .into_iter()
            .filter(|&l| l < IsaLevel::Amx && reaches(l))
        {
            if !IsaLevel::ALL
                .into_iter()
                .any(|above| above > level && reaches(above))
            {
                continue;
            }
            let out = std::process::Command::new(&exe)
                .env(MAX_ISA_ENV, level.name())
                .args(["--test-threads", "2", "-q"])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let tail = &text[text.len().saturating_sub(4000)..];
            assert!(
                out.status.success(),
                "capped at {}:\n{tail}\n{}",
                level.name(),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                text.contains("test result: ok"),
                "capped at {}: {tail}",
                level.name()
            );
        }
    }

    #[test]
    fn shuffles_share_the_fma_port_exactly_on_intel() {
        assert_eq!(shuffles_beside_fmas(), !intel());
        // The vendor string is the one `/proc/cpuinfo` shows, where there is one.
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        if let Some(vendor) = info.lines().find(|l| l.starts_with("vendor_id")) {
            assert_eq!(intel(), vendor.contains("GenuineIntel"), "{vendor}");
        }
    }
}
