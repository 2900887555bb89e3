//! Facts about this CPU that choose between kernels beyond its feature flags: which vendor's
//! cores run the loops, and so where shuffles issue.

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
    fn shuffles_share_the_fma_port_exactly_on_intel() {
        assert_eq!(shuffles_beside_fmas(), !intel());
        // The vendor string is the one `/proc/cpuinfo` shows, where there is one.
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        if let Some(vendor) = info.lines().find(|l| l.starts_with("vendor_id")) {
            assert_eq!(intel(), vendor.contains("GenuineIntel"), "{vendor}");
        }
    }
}
