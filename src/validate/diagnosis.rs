//! Per slice, the numbers behind the bottleneck class (issue 6): where the slice sits on its
//! machine's roofline, which rule named the class and with which values, and what the dense
//! fallbacks cost end to end. Derived from evidence only; the memo renders it as is.
//!
//! The roofline uses *useful* FLOPs (multiply-adds on kept weights: `2·M·N·K·density` on the
//! sparse path, `2·M·N·K` on dense and fallback ops) over the compulsory bytes (weights as
//! stored, values plus metadata; activations at their storage precision; outputs), so a point
//! can never lie above a roof it is truly bound by. The dense-equivalent rate (`2·M·N·K`
//! over the same time, what people compare with dense) is reported beside it.

use super::bottleneck::{MACHINE_BALANCE_FLOP_PER_BYTE, METADATA_OVERHEAD_LIMIT, simulated_shares};
use crate::domain::Counter;
use crate::domain::Metric;
use crate::domain::OfSlice;
use crate::domain::verdict::Bottleneck;
use crate::execute::SliceEvidence;
use crate::ingress::{Backend, MachineRoofs, Slice};
use crate::lower::KernelPath;
use crate::stats::median;
use serde::{Deserialize, Serialize};

/// Everything validation says about where one slice spends its time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SliceDiagnosis {
    /// Pack name.
    pub pack: String,
    /// Slice id.
    pub slice: String,
    /// The class, when there is evidence to derive one from.
    pub class: Option<Bottleneck>,
    /// The rule that named the class, with the values it compared.
    pub rule: String,
    /// The slice on its machine's roofline, when both roofs and a latency are known.
    pub roofline: Option<RooflinePoint>,
    /// Ops that fell back to dense and what that cost.
    pub fallback: FallbackImpact,
    /// Metadata bytes per value byte of the sparse weights.
    pub metadata_overhead: f64,
    /// Mean coefficient of variation of the latency inside a run, %.
    pub within_run_cv: Option<f64>,
    /// Coefficient of variation of the per-run median latencies, % (two or more runs).
    pub between_run_cv: Option<f64>,
}

/// One slice on a roofline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RooflinePoint {
    /// The machine the roofs belong to: `cpu` (this machine) or the preset's name.
    pub machine: String,
    /// Where the roofs come from: `measured at gate time` or `preset <name>`.
    pub roofs_source: String,
    /// The compute roof, GFLOP/s.
    pub peak_gflops: f64,
    /// The memory roof, GB/s.
    pub bandwidth_gbps: f64,
    /// `peak_gflops / bandwidth_gbps`, FLOP/byte.
    pub ridge_flop_per_byte: f64,
    /// Useful FLOPs per compulsory byte.
    pub intensity_flop_per_byte: f64,
    /// Useful GFLOP/s achieved at the median latency (the plotted value).
    pub achieved_gflops_useful: f64,
    /// Dense-equivalent GFLOP/s at the median latency (`2·M·N·K / t`).
    pub achieved_gflops_dense_equivalent: f64,
    /// What the roofs allow at this intensity: `min(peak, bandwidth · intensity)`.
    pub attainable_gflops: f64,
    /// `achieved_gflops_useful / attainable_gflops`.
    pub share_of_attainable: f64,
}

/// What the dense fallbacks of a slice cost, and what running them sparse would gain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FallbackImpact {
    /// Ops in the slice.
    pub ops: usize,
    /// The ops that fell back to dense, by name.
    pub fallback_ops: Vec<String>,
    /// Share of the slice's per-op latency spent in the fallen-back ops (0–1).
    pub latency_share: Option<f64>,
    /// Dense time over sparse time of the ops that did run sparse in this slice.
    pub sparse_ops_speedup: Option<f64>,
    /// Fraction of the slice's latency saved if the fallen-back ops ran at that speedup.
    pub latency_gain: Option<f64>,
    /// Share of the slice's energy spent in the fallen-back ops (simulator only).
    pub energy_share: Option<f64>,
    /// Fraction of the slice's energy saved if they ran at the sparse ops' energy ratio.
    pub energy_gain: Option<f64>,
    /// How the numbers were obtained, or why one is missing.
    pub note: String,
}

/// Diagnose every slice that has evidence, in slice order. `roofs` are the CPU roofs the
/// execute stage measured (from the evidence's environment).
pub fn diagnose_all(
    slices: &[Slice],
    evidence: &[SliceEvidence],
    roofs: Option<&MachineRoofs>,
) -> Vec<SliceDiagnosis> {
    slices
        .iter()
        .filter_map(|s| {
            let ev = evidence.iter().find(|e| e.same_slice(s))?;
            Some(diagnose(s, ev, roofs))
        })
        .collect()
}

/// Diagnose one slice (see the module docs for the roofline's terms and
/// `classify_with_numbers` for the class rule).
pub fn diagnose(slice: &Slice, ev: &SliceEvidence, cpu_roofs: Option<&MachineRoofs>) -> SliceDiagnosis {
    let counter = |key: Counter| ev.counters.value(key);
    let (within_run_cv, between_run_cv) = noise_decomposition(ev);
    // The CPU's roofs are measured at gate time; any other backend places itself by the
    // roof counters it records (the simulator's preset), and one that records none (a
    // user's program) has no roofs sparsegate could place it against.
    let roofs = match slice.backend.kind() {
        Backend::Cpu => cpu_roofs.map(|r| {
            let (peak, what) = r.peak_for(slice.precision);
            (
                "cpu".to_owned(),
                format!("measured at gate time ({what}, {} thread(s))", r.threads),
                peak,
                r.bandwidth_gbps,
            )
        }),
        other => {
            let (name, source) = match slice.backend.preset() {
                Some(p) => (p.name.clone(), format!("preset {}", p.name)),
                None => (
                    other.as_str().to_owned(),
                    format!("recorded by the {} backend", other.as_str()),
                ),
            };
            counter(Counter::RoofPeakGflops)
                .zip(counter(Counter::RoofBandwidthGbps))
                .map(|(p, b)| (name, source, p, b))
        }
    };
    let latency = latency_s(ev);
    let roofline = roofs.and_then(|(machine, roofs_source, peak, bandwidth)| {
        let (t, useful, dense, bytes) = (
            latency?,
            counter(Counter::UsefulFlops)?,
            counter(Counter::DenseFlops)?,
            counter(Counter::BytesMoved)?,
        );
        if !(t > 0.0 && bytes > 0.0 && peak > 0.0 && bandwidth > 0.0) {
            return None;
        }
        let intensity = useful / bytes;
        let attainable = peak.min(bandwidth * intensity);
        let achieved = useful / t / 1e9;
        Some(RooflinePoint {
            machine,
            roofs_source,
            peak_gflops: peak,
            bandwidth_gbps: bandwidth,
            ridge_flop_per_byte: peak / bandwidth,
            intensity_flop_per_byte: intensity,
            achieved_gflops_useful: achieved,
            achieved_gflops_dense_equivalent: dense / t / 1e9,
            attainable_gflops: attainable,
            share_of_attainable: achieved / attainable,
        })
    });
    let fallback = fallback_impact(ev);
    let metadata_overhead = counter(Metric::MetadataOverhead.into()).unwrap_or(0.0);
    let (class, rule) = if ev.plan.ops.is_empty() {
        (None, "no ops: nothing to classify".to_owned())
    } else {
        classify_with_numbers(ev, roofline.as_ref(), &fallback, metadata_overhead)
    };
    SliceDiagnosis {
        pack: ev.pack.clone(),
        slice: ev.slice.clone(),
        class,
        rule,
        roofline,
        fallback,
        metadata_overhead,
        within_run_cv,
        between_run_cv,
    }
}

/// The class rule, first match wins, each with the numbers it compared:
/// 1. `fallback` when any op took the dense fallback (its latency share is quoted);
/// 2. a `sim` slice: the class holding most of the simulated time (the model classifies
///    each op by its own roofline, occupancy and throttling), its share quoted;
/// 3. `metadata` when metadata bytes / value bytes exceed [`METADATA_OVERHEAD_LIMIT`];
/// 4. `memory_bandwidth` when the useful arithmetic intensity is below the ridge point
///    (measured roofs; without them the fixed [`MACHINE_BALANCE_FLOP_PER_BYTE`]), else
///    `compute`; the achieved rate and its share of what the roofs allow are quoted, so a
///    reader sees when a "compute-bound" kernel is far from the compute roof.
fn classify_with_numbers(
    ev: &SliceEvidence,
    roofline: Option<&RooflinePoint>,
    fallback: &FallbackImpact,
    metadata_overhead: f64,
) -> (Option<Bottleneck>, String) {
    let pct = |x: f64| format!("{:.1}%", 100.0 * x);
    let counted = ev.counters.value(Metric::FallbackRate).unwrap_or(0.0);
    if !fallback.fallback_ops.is_empty() || counted > 0.0 {
        let share = fallback
            .latency_share
            .map_or(String::new(), |s| format!(", {} of the per-op latency", pct(s)));
        return (
            Some(Bottleneck::Fallback),
            format!(
                "{} of {} ops fell back to dense ({}; fallback rate {counted:.3}){share}",
                fallback.fallback_ops.len(),
                fallback.ops,
                fallback.fallback_ops.join(", ")
            ),
        );
    }
    let shares = simulated_shares(ev);
    if let Some(&(class, _)) = shares.first() {
        let listed: Vec<String> = shares
            .iter()
            .map(|(c, s)| format!("{} {}", class_name(*c), pct(*s)))
            .collect();
        return (
            Some(class),
            format!("simulated time by class: {}", listed.join(", ")),
        );
    }
    if metadata_overhead > METADATA_OVERHEAD_LIMIT {
        return (
            Some(Bottleneck::Metadata),
            format!(
                "metadata/value bytes {:.3} > {METADATA_OVERHEAD_LIMIT}",
                metadata_overhead
            ),
        );
    }
    match roofline {
        Some(r) => {
            let class = if r.intensity_flop_per_byte < r.ridge_flop_per_byte {
                Bottleneck::MemoryBandwidth
            } else {
                Bottleneck::Compute
            };
            let cmp = if class == Bottleneck::Compute { "≥" } else { "<" };
            (
                Some(class),
                format!(
                    "intensity {:.2} FLOP/B {cmp} ridge {:.2} FLOP/B ({:.1} GFLOP/s / {:.1} GB/s); \
                     achieved {:.1} useful GFLOP/s = {} of the {:.1} the roofs allow",
                    r.intensity_flop_per_byte,
                    r.ridge_flop_per_byte,
                    r.peak_gflops,
                    r.bandwidth_gbps,
                    r.achieved_gflops_useful,
                    pct(r.share_of_attainable),
                    r.attainable_gflops
                ),
            )
        }
        None => {
            let (flops, bytes) = ev.plan.ops.iter().fold((0.0, 0.0), |(f, b), p| {
                let (m, n, k) = (p.op.m as f64, p.op.n as f64, p.op.k as f64);
                (f + p.op.dense_flops(), b + 4.0 * (m * k + n * k + m * n))
            });
            if bytes <= 0.0 {
                return (None, "no bytes moved: nothing to classify".into());
            }
            let intensity = flops / bytes;
            let class = if intensity >= MACHINE_BALANCE_FLOP_PER_BYTE {
                Bottleneck::Compute
            } else {
                Bottleneck::MemoryBandwidth
            };
            (
                Some(class),
                format!(
                    "dense f32 intensity {intensity:.2} FLOP/B against an assumed machine balance of \
                     {MACHINE_BALANCE_FLOP_PER_BYTE} FLOP/B (no roofs measured)"
                ),
            )
        }
    }
}

/// The class by the rule of [`classify_with_numbers`] without roofs (see
/// [`classify`]).
pub(crate) fn class_without_roofs(ev: &SliceEvidence) -> Option<Bottleneck> {
    if ev.plan.ops.is_empty() {
        return None;
    }
    let fallback = fallback_impact(ev);
    let overhead = ev.counters.value(Metric::MetadataOverhead).unwrap_or(0.0);
    classify_with_numbers(ev, None, &fallback, overhead).0
}

/// The fallback impact, from the per-op costs in the evidence (see [`FallbackImpact`]).
///
/// Estimate: a fallen-back op, run sparse, is assumed to gain what the ops that did run
/// sparse in the *same* slice gained (dense time over sparse time, measured or modelled the
/// same way). Without such an op there is nothing measured to extrapolate from, and the
/// gain is left out rather than guessed.
fn fallback_impact(ev: &SliceEvidence) -> FallbackImpact {
    let ops = ev.plan.ops.len();
    let fallback_ops: Vec<String> = ev
        .plan
        .ops
        .iter()
        .filter(|p| p.path == KernelPath::DenseFallback)
        .map(|p| p.op.name.clone())
        .collect();
    let mut impact = FallbackImpact {
        ops,
        fallback_ops,
        latency_share: None,
        sparse_ops_speedup: None,
        latency_gain: None,
        energy_share: None,
        energy_gain: None,
        note: String::new(),
    };
    if ev.op_costs.len() != ops || ops == 0 {
        impact.note = "no per-op costs in this evidence".into();
        return impact;
    }
    let paths: Vec<KernelPath> = ev.plan.ops.iter().map(|p| p.path).collect();
    let sum = |path: Option<KernelPath>, f: &dyn Fn(&crate::execute::OpCost) -> Option<f64>| -> Option<f64> {
        ev.op_costs
            .iter()
            .zip(&paths)
            .filter(|(_, p)| path.is_none_or(|want| **p == want))
            .map(|(c, _)| f(c))
            .sum()
    };
    let estimate = |cand: &dyn Fn(&crate::execute::OpCost) -> Option<f64>,
                    dense: &dyn Fn(&crate::execute::OpCost) -> Option<f64>|
     -> (Option<f64>, Option<f64>, Option<f64>) {
        let total = sum(None, cand).filter(|t| *t > 0.0);
        let fell = sum(Some(KernelPath::DenseFallback), cand);
        // `+ 0.0` turns the -0.0 an empty float sum starts from into 0.
        let share = total.zip(fell).map(|(t, f)| f / t + 0.0);
        let (sp_c, sp_d) = (
            sum(Some(KernelPath::Sparse), cand),
            sum(Some(KernelPath::Sparse), dense),
        );
        let ratio = sp_c
            .zip(sp_d)
            .filter(|(c, _)| *c > 0.0)
            .map(|(c, d)| d / c)
            .filter(|_| paths.contains(&KernelPath::Sparse));
        let gain = match (total, fell, ratio) {
            (Some(t), Some(f), Some(r)) if r > 0.0 => Some((f - f / r) / t),
            _ => None,
        };
        (share, ratio, gain)
    };
    let (share, ratio, gain) = estimate(&|c| Some(c.candidate_s), &|c| Some(c.comparator_s));
    impact.latency_share = share;
    impact.sparse_ops_speedup = ratio;
    impact.latency_gain = gain.filter(|_| !impact.fallback_ops.is_empty());
    let (e_share, _, e_gain) = estimate(&|c| c.candidate_energy_j, &|c| c.comparator_energy_j);
    impact.energy_share = e_share;
    impact.energy_gain = e_gain.filter(|_| !impact.fallback_ops.is_empty());
    let timing = match ev.op_costs.first().map(|c| c.passes) {
        Some(0) => "per-op latency and energy from the accelerator model".to_owned(),
        Some(n) => format!(
            "per-op latency: medians of {n} interleaved per-op passes after sampling; energy not measured on CPU"
        ),
        None => String::new(),
    };
    let estimate_note = if impact.fallback_ops.is_empty() {
        "no op fell back".to_owned()
    } else if ratio.is_some() {
        "gain if the fallen-back ops ran at the speedup this slice's sparse ops achieved".to_owned()
    } else {
        "no op of this slice ran sparse, so there is no sparse rate to estimate the gain from".to_owned()
    };
    impact.note = format!("{timing}; {estimate_note}");
    impact
}

/// The class as packs and reports spell it (`memory_bandwidth`).
fn class_name(class: Bottleneck) -> String {
    serde_json::to_value(class)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{class:?}"))
}

/// Median latency of a slice: the sampled median on the CPU, the modelled value on `sim`.
fn latency_s(ev: &SliceEvidence) -> Option<f64> {
    match ev.metrics.get(Metric::Latency) {
        Some(m) => median(&m.samples).ok(),
        None => ev.counters.value(Metric::Latency),
    }
}

/// Coefficient of variation (sample standard deviation over mean), in %.
fn cv_percent(xs: &[f64]) -> Option<f64> {
    if xs.len() < 2 {
        return None;
    }
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (xs.len() - 1) as f64;
    (mean > 0.0).then(|| var.sqrt() / mean * 100.0)
}

/// Within-run and between-run CV of a slice's latency (DESIGN.md §6).
fn noise_decomposition(s: &SliceEvidence) -> (Option<f64>, Option<f64>) {
    let Some(groups) = s.metrics.get(Metric::Latency).and_then(|m| m.by_run()) else {
        return (None, None);
    };
    let within: Vec<f64> = groups.iter().filter_map(|g| cv_percent(g)).collect();
    let within = (!within.is_empty()).then(|| within.iter().sum::<f64>() / within.len() as f64);
    let medians: Vec<f64> = groups.iter().filter_map(|g| median(g).ok()).collect();
    (within, cv_percent(&medians))
}
/// Classify where a slice spends its time without measured roofs: the rule of [`diagnose`]
/// (fallback, the simulator's own class, metadata, then the dense f32 arithmetic intensity
/// `Σ 2·M·N·K / Σ 4·(M·K + N·K + M·N)` against [`MACHINE_BALANCE_FLOP_PER_BYTE`]). The gate
/// itself uses the diagnosis, which places CPU slices against the roofs measured at gate
/// time.
///
/// `None` for a slice with no ops.
pub fn classify(ev: &SliceEvidence) -> Option<Bottleneck> {
    class_without_roofs(ev)
}

crate::of_slice!(SliceDiagnosis: pack, slice);
