//! The backends a pack can name, each in its own file: its pack name, the metrics and
//! precisions it supports, and how its own block of a slice (`preset`, `command`, `import`)
//! is checked and resolved into the settings [`SliceBackend`] carries to execution.
//!
//! The semantic checks and the matrix expansion ask a backend through its [`Rules`]
//! instead of matching on its name, so adding one is a file here, a line in
//! `backends!` below, an arm in [`SliceBackend`] and its executor in `execute/`
//! (docs/architecture.md, "Where a change goes").

mod command;
mod cpu;
mod import;
mod sim;

use super::SliceSpec;
use crate::domain::Precision;
use crate::domain::metric::Metric;
use crate::ingress::span::Locator;
use crate::ingress::{PackDiagnostic, SliceBackend, pack_dir};

/// What ingress needs to know about one backend: each backend's file holds one `RULES`.
pub(crate) struct Rules {
    /// The name packs use (`backend: <name>`).
    pub name: &'static str,
    /// Whether its slices run the pack's GEMM `workload` at a `sparsity` (the built-in
    /// backends) rather than someone else's benchmark.
    pub runs_workload: bool,
    /// The slice key only this backend reads, refused on every other backend.
    pub block: Option<Block>,
    /// Whether it produces values for a metric; a guardrail over a metric the slice's
    /// backend does not measure is refused at ingress.
    pub measures: fn(Metric) -> bool,
    /// Whether it runs a precision in this version.
    pub supports_precision: fn(Precision) -> bool,
    /// Whether a slice has a comparator to put `effective_speedup` against.
    pub has_comparator: fn(&SliceSpec) -> bool,
    /// Check the backend's own block of a slice (at the JSON pointer given; a missing one
    /// is refused before), pushing every problem, and resolve it into the slice's settings:
    /// `None` where the block has errors, or where the settings depend on the expanded cell
    /// (the CPU's, built by the expansion from the workload).
    pub resolve: Resolve,
}

/// See [`Rules::resolve`].
pub(crate) type Resolve = fn(&SliceSpec, At<'_>) -> Option<SliceBackend>;

/// Where a slice's backend block is checked: the slice's JSON pointer, the pack's locator
/// and the problems found so far.
pub(crate) struct At<'a> {
    /// The slice's JSON pointer, e.g. `/slices/3`.
    pub base: &'a str,
    /// Maps pointers into the pack to `file:line:col`.
    pub loc: &'a Locator,
    /// Every problem found.
    pub diags: &'a mut Vec<PackDiagnostic>,
}

/// A slice key that belongs to one backend.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Block {
    /// The key, e.g. `command`.
    pub key: &'static str,
    /// Whether a slice sets it.
    pub present: fn(&SliceSpec) -> bool,
    /// Whether its value is a scalar (a refusal then points at the value, not the key).
    pub scalar: bool,
    /// An example of the block, for the hint when a slice of the backend lacks it.
    pub example: fn() -> String,
}

impl Block {
    /// A block whose value is a map (`command: {...}`).
    pub const fn map(key: &'static str, present: fn(&SliceSpec) -> bool, example: fn() -> String) -> Block {
        Block {
            key,
            present,
            scalar: false,
            example,
        }
    }

    /// A block whose value is a scalar (`preset: h100`).
    pub const fn scalar(
        key: &'static str,
        present: fn(&SliceSpec) -> bool,
        example: fn() -> String,
    ) -> Block {
        Block {
            key,
            present,
            scalar: true,
            example,
        }
    }
}

/// The pack's `backend` enum and its one dispatch to each backend's [`Rules`]: one
/// line per backend, with the doc comment the pack schema shows.
macro_rules! backends {
    ($($(#[doc = $doc:literal])+ $variant:ident => $rules:expr,)+) => {
        /// Where a slice runs.
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash,
            serde::Serialize, serde::Deserialize, schemars::JsonSchema,
        )]
        #[serde(rename_all = "lowercase")]
        pub enum Backend {
            $($(#[doc = $doc])+ $variant,)+
        }

        impl Backend {
            /// Every backend, in declaration order.
            pub const ALL: &[Backend] = &[$(Backend::$variant),+];

            /// The rules of this backend.
            pub(crate) fn rules(self) -> &'static Rules {
                match self {
                    $(Backend::$variant => &$rules,)+
                }
            }
        }
    };
}

backends! {
    /// The built-in CPU kernels, timed on this machine.
    Cpu => cpu::RULES,
    /// The simulated accelerator (`src/sim/`) named by the slice's `preset`: deterministic,
    /// so every sample of a metric is the same number.
    Sim => sim::RULES,
    /// The user's own benchmark command (the slice's `command`), which prints its metrics as
    /// JSON lines (`docs/command-backend.md`); sparsegate owns warm-up, repetitions, runs,
    /// interleaving with the comparator command and timeouts.
    Command => command::RULES,
    /// Results another tool already measured (the slice's `import`): Google Benchmark,
    /// criterion, hyperfine or pytest-benchmark files, so a team gates what it has.
    Import => import::RULES,
}

impl Backend {
    /// The lowercase name used in packs.
    pub fn as_str(self) -> &'static str {
        self.rules().name
    }

    /// Whether slices on this backend run the pack's GEMM `workload` at a `sparsity` (the
    /// built-in backends) rather than someone else's benchmark.
    pub fn runs_workload(self) -> bool {
        self.rules().runs_workload
    }

    /// Whether this backend produces values for `metric`.
    pub fn measures(self, metric: Metric) -> bool {
        (self.rules().measures)(metric)
    }

    /// The metrics this backend measures, in vocabulary order.
    pub fn measured_metrics(self) -> Vec<Metric> {
        Metric::ALL
            .iter()
            .copied()
            .filter(|&m| self.measures(m))
            .collect()
    }

    /// The precisions this backend runs in this version.
    pub fn supports_precision(self, precision: Precision) -> bool {
        (self.rules().supports_precision)(precision)
    }
}

/// Check `spec`'s backend: its own block resolved, and every other backend's block refused
/// rather than silently ignored. Returns the resolved settings (see
/// [`Rules::resolve`]).
pub(crate) fn check_backend(
    spec: &SliceSpec,
    base: &str,
    loc: &Locator,
    diags: &mut Vec<PackDiagnostic>,
) -> Option<SliceBackend> {
    for other in Backend::ALL.iter().filter(|&&b| b != spec.backend) {
        let Some(block) = other.rules().block.filter(|b| (b.present)(spec)) else {
            continue;
        };
        let pointer = format!("{base}/{}", block.key);
        let message = format!(
            "`{}` applies to `backend: {}`, but slice `{}` runs on {}",
            block.key,
            other.as_str(),
            spec.id,
            spec.backend.as_str()
        );
        let hint = Some(format!(
            "set `backend: {}` or remove `{}`",
            other.as_str(),
            block.key
        ));
        diags.push(match block.scalar {
            true => loc.at_value(&pointer, message, hint),
            false => loc.at_key(&pointer, message, hint),
        });
    }
    let rules = spec.backend.rules();
    if let Some(block) = rules.block.filter(|b| !(b.present)(spec)) {
        diags.push(loc.at_key(
            base,
            format!(
                "slice `{}` has `backend: {}` but no `{}`",
                spec.id, rules.name, block.key
            ),
            Some(format!("add {}", (block.example)())),
        ));
        return None;
    }
    (rules.resolve)(spec, At { base, loc, diags })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backend's rules name it as the pack does: the serde name and `as_str` are written
    /// in two places (the enum and the backend's file) and must agree.
    #[test]
    fn every_backend_is_named_as_packs_spell_it() {
        for &b in Backend::ALL {
            let serde_name = serde_json::to_value(b).unwrap();
            assert_eq!(serde_name, serde_json::Value::from(b.as_str()), "{b:?}");
            let parsed: Backend = serde_json::from_value(serde_name).unwrap();
            assert_eq!(parsed, b);
        }
    }

    /// Only one backend claims a block, so refusing "another backend's block" is unambiguous.
    #[test]
    fn no_two_backends_claim_the_same_block() {
        let keys: Vec<&str> = Backend::ALL
            .iter()
            .filter_map(|b| b.rules().block)
            .map(|b| b.key)
            .collect();
        let mut unique = keys.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), keys.len(), "{keys:?}");
    }
}
