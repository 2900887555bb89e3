//! Which bf16 kernel a process runs, and why (issues 20 and 22).
//!
//! On a CPU with AVX-512 BF16 the bf16 kernels choose per process between `vdpbf16ps`
//! (`dot`, path `avx512-bf16`) and widening for f32 FMA (`widen`, path
//! `avx512-bf16-shift`) by a short timing probe. On a loaded runner the probe can pick
//! differently at `bless` and at `gate`, and a bf16 slice's golden baseline was then refused
//! although this CPU runs the baseline's kernel. So a gate pins the pick its golden
//! baselines recorded (before anything measures), unless the user's `SPARSEGATE_BF16_KERNEL`
//! chooses; the environment records the pick and how it was made, and the memo says so.

use serde::{Deserialize, Serialize};
use sparsegate_kernels::isa;

/// The environment variable that chooses the bf16 kernel (`dot` or `widen`).
pub const BF16_KERNEL_ENV: &str = isa::BF16_KERNEL_ENV;

/// One of the two bf16 kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Bf16Kernel {
    /// `vdpbf16ps` on bf16 pairs (AVX-512 BF16), path `avx512-bf16`.
    Dot,
    /// bf16 widened to f32 in registers for f32 FMA, path `avx512-bf16-shift`; from
    /// a few dozen tokens the weights widened to f32 once, path `widen-f32`.
    Widen,
}

impl Bf16Kernel {
    fn of(k: isa::Bf16Kernel) -> Bf16Kernel {
        match k {
            isa::Bf16Kernel::Dot => Bf16Kernel::Dot,
            isa::Bf16Kernel::Widen => Bf16Kernel::Widen,
        }
    }

    fn isa(self) -> isa::Bf16Kernel {
        match self {
            Bf16Kernel::Dot => isa::Bf16Kernel::Dot,
            Bf16Kernel::Widen => isa::Bf16Kernel::Widen,
        }
    }

    /// The kernel a recorded `kernel_paths` entry names (`avx512-bf16` → `dot`,
    /// `avx512-bf16-shift` → `widen`); `None` for any other path.
    pub fn from_path_name(path: &str) -> Option<Bf16Kernel> {
        isa::Bf16Kernel::from_path_name(path).map(Bf16Kernel::of)
    }

    /// `dot` or `widen`, as `SPARSEGATE_BF16_KERNEL` spells it.
    pub fn name(self) -> &'static str {
        self.isa().name()
    }

    /// The instruction-set path it records, e.g. `avx512-bf16`.
    pub fn path_name(self) -> &'static str {
        self.isa().path().name()
    }

    /// The path its products of many tokens take, as the environment's `kernel_paths`
    /// records it: `avx512-bf16` for `dot`, `widen-f32` for `widen` (weights widened once).
    pub fn many_tokens_path(self) -> &'static str {
        self.isa().path_at(isa::Form::Dense, usize::MAX).name()
    }
}

/// The bf16 kernel that a `kernel_paths` bf16 entry shows, given the pick recorded beside
/// it: `avx512-bf16` is `dot`, `avx512-bf16-shift` (recorded before widening once) and
/// `widen-f32` under a `widen` pick are `widen`. `None` for the path of another CPU family:
/// the AMX tiles (which run whichever kernel is picked), or `widen-f32` without a pick (no
/// AVX-512: the portable path).
pub fn kernel_of_path(path: &str, pick: Option<&Bf16Pick>) -> Option<Bf16Kernel> {
    Bf16Kernel::from_path_name(path).or_else(|| {
        pick.filter(|p| p.kernel.many_tokens_path() == path)
            .map(|p| p.kernel)
    })
}

impl std::fmt::Display for Bf16Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.path_name())
    }
}

/// How a process's bf16 kernel was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Bf16Source {
    /// The CPU runs only this one.
    Only,
    /// `SPARSEGATE_BF16_KERNEL` named it (the user, or the gate for its child runs).
    Requested,
    /// Pinned from the golden baselines the gate compares against (issue 22).
    Baseline,
    /// Measured by a timing probe in this process.
    Measured,
}

/// The bf16 kernel a process runs, how it was chosen, and what the CPU offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Bf16Pick {
    /// The kernel bf16 products run on (past the few-token sizes, which always take `dot`
    /// where the CPU has it).
    pub kernel: Bf16Kernel,
    /// How it was chosen.
    pub source: Bf16Source,
    /// The kernels this CPU runs.
    pub offered: Vec<Bf16Kernel>,
}

impl Bf16Pick {
    /// This process's pick (making it, by the probe, if nothing has yet); `None` where the
    /// CPU runs neither kernel.
    pub fn of_this_process() -> Option<Bf16Pick> {
        let (kernel, source) = isa::bf16_pick()?;
        Some(Bf16Pick {
            kernel: Bf16Kernel::of(kernel),
            source: match source {
                isa::Bf16Source::Only => Bf16Source::Only,
                isa::Bf16Source::Requested => Bf16Source::Requested,
                isa::Bf16Source::Pinned => Bf16Source::Baseline,
                isa::Bf16Source::Measured => Bf16Source::Measured,
            },
            offered: offered(),
        })
    }

    /// One line for the memo: the kernel and how it was chosen.
    pub fn describe(&self) -> String {
        let how = match self.source {
            Bf16Source::Only => "the only bf16 kernel this CPU runs".to_owned(),
            Bf16Source::Requested => format!("chosen by {BF16_KERNEL_ENV}"),
            Bf16Source::Baseline => {
                "pinned from the golden baseline, which was blessed on it (a timing probe could pick \
                 either on this CPU)"
                    .to_owned()
            }
            Bf16Source::Measured => "measured faster by this process's timing probe".to_owned(),
        };
        format!(
            "{}, {how}; this CPU offers {}",
            self.kernel,
            offered_text(&self.offered)
        )
    }
}

/// The bf16 kernels this CPU runs (detected, never measured).
pub fn offered() -> Vec<Bf16Kernel> {
    isa::bf16_kernels_offered()
        .into_iter()
        .map(Bf16Kernel::of)
        .collect()
}

/// What a CPU offers, in words: "`dot` (avx512-bf16) and `widen` (…)", "only …", "neither …".
pub fn offered_text(offered: &[Bf16Kernel]) -> String {
    let isa: Vec<isa::Bf16Kernel> = offered.iter().map(|k| k.isa()).collect();
    isa::offered_text(&isa)
}

/// The kernel `SPARSEGATE_BF16_KERNEL` names, if any: the user's choice, which wins.
pub fn requested() -> Option<Bf16Kernel> {
    isa::bf16_kernel_requested().map(Bf16Kernel::of)
}

/// What pinning the golden baselines' bf16 kernel did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PinOutcome {
    /// No golden baseline of a slice running bf16 records a kernel of its own.
    NothingRecorded,
    /// Pinned to the kernel every such baseline recorded.
    Pinned(Bf16Kernel),
    /// Not pinned, and why: the baselines' lock check then refuses a mismatch with it.
    NotPinned(NotPinned),
}

/// Why the golden baselines' bf16 kernel was not pinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotPinned {
    /// `SPARSEGATE_BF16_KERNEL` chooses (the user's choice wins).
    Requested(Bf16Kernel),
    /// The CPU cannot run the recorded kernel.
    NotOffered {
        /// What the baselines recorded.
        recorded: Bf16Kernel,
    },
    /// The baselines recorded different kernels; one process runs one.
    Disagree,
    /// The process chose its kernel before the pin (an internal ordering error).
    AlreadyChosen(Bf16Kernel),
}

/// Pin this process's bf16 kernel to the one `recorded` (the `kernel_paths` bf16 entries of
/// the golden baselines of the slices that run bf16) agree on, where this CPU runs it and
/// the user did not choose with `SPARSEGATE_BF16_KERNEL`. Must run before anything reads
/// the pick (environment capture does): the child runs then inherit it.
pub fn pin_from_baselines<'a>(recorded: impl IntoIterator<Item = &'a str>) -> PinOutcome {
    let mut kernels: Vec<Bf16Kernel> = recorded
        .into_iter()
        .filter_map(Bf16Kernel::from_path_name)
        .collect();
    kernels.dedup();
    let recorded = match kernels.as_slice() {
        [] => return PinOutcome::NothingRecorded,
        [one] => *one,
        [first, rest @ ..] if rest.iter().all(|k| k == first) => *first,
        _ => return PinOutcome::NotPinned(NotPinned::Disagree),
    };
    match isa::pin_bf16_kernel(recorded.isa()) {
        Ok(()) => PinOutcome::Pinned(recorded),
        Err(isa::Bf16PinError::Requested { requested }) => {
            PinOutcome::NotPinned(NotPinned::Requested(Bf16Kernel::of(requested)))
        }
        Err(isa::Bf16PinError::NotOffered { .. }) => {
            PinOutcome::NotPinned(NotPinned::NotOffered { recorded })
        }
        Err(isa::Bf16PinError::AlreadyChosen { chosen }) => {
            PinOutcome::NotPinned(NotPinned::AlreadyChosen(Bf16Kernel::of(chosen)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 22: the recorded path names read back to the kernels, and the memo line says
    /// how the pick was made and what the CPU offers.
    #[test]
    fn a_pick_pinned_from_the_baseline_says_so() {
        assert_eq!(Bf16Kernel::from_path_name("avx512-bf16"), Some(Bf16Kernel::Dot));
        assert_eq!(
            Bf16Kernel::from_path_name("avx512-bf16-shift"),
            Some(Bf16Kernel::Widen)
        );
        assert_eq!(Bf16Kernel::from_path_name("widen-f32"), None);
        let pick = Bf16Pick {
            kernel: Bf16Kernel::Dot,
            source: Bf16Source::Baseline,
            offered: vec![Bf16Kernel::Dot, Bf16Kernel::Widen],
        };
        let line = pick.describe();
        assert!(line.contains("dot (avx512-bf16)"), "{line}");
        assert!(line.contains("pinned from the golden baseline"), "{line}");
        assert!(line.contains("widen (avx512-bf16-shift)"), "{line}");
    }

    /// Issue 22: baselines that record nothing bf16-specific pin nothing, and baselines
    /// that disagree are not pinned (one process runs one kernel).
    #[test]
    fn only_agreeing_recorded_picks_are_pinned() {
        assert_eq!(
            pin_from_baselines(["widen-f32", "avx512-f32"]),
            PinOutcome::NothingRecorded
        );
        assert_eq!(pin_from_baselines([]), PinOutcome::NothingRecorded);
        assert_eq!(
            pin_from_baselines(["avx512-bf16", "avx512-bf16-shift"]),
            PinOutcome::NotPinned(NotPinned::Disagree)
        );
    }

    /// Issue 22: pinning the kernel this process already runs is a pin (or the user's
    /// request); a kernel the CPU lacks is never pinned.
    #[test]
    fn pinning_this_process_s_own_pick_succeeds() {
        let Some(now) = Bf16Pick::of_this_process() else {
            assert_eq!(
                pin_from_baselines(["avx512-bf16"]),
                PinOutcome::NotPinned(NotPinned::NotOffered {
                    recorded: Bf16Kernel::Dot
                })
            );
            return;
        };
        let expected = match requested() {
            Some(r) if r != now.kernel => PinOutcome::NotPinned(NotPinned::Requested(r)),
            _ => PinOutcome::Pinned(now.kernel),
        };
        assert_eq!(
            pin_from_baselines([now.kernel.path_name(), now.kernel.path_name()]),
            expected
        );
        for k in [Bf16Kernel::Dot, Bf16Kernel::Widen] {
            if !now.offered.contains(&k) {
                assert_eq!(
                    pin_from_baselines([k.path_name()]),
                    PinOutcome::NotPinned(NotPinned::NotOffered { recorded: k })
                );
            }
        }
    }
}
