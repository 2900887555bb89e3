//! The `sim` backend: a slice's ops evaluated on the simulated accelerator instead of timed
//! on this machine. The model is deterministic, so every metric is one exact number: it is
//! recorded as a counter (a point value the guardrails judge exactly, and baselines compare
//! point to point), never as repeated "samples" that would fake a distribution. The dense
//! comparator is the same ops dense on the same part.

use super::error::ExecError;
use super::evidence::{OpCost, SliceEvidence};
use crate::domain::Sparsity;
use crate::domain::{Counter, Metric};
use crate::ingress::Slice;
use crate::lower::{KernelPath, Plan};
use crate::sim::{Layer, Preset, evaluate};
use std::time::Instant;

/// Totals of one slice's ops on the simulated part.
#[derive(Debug, Clone, Copy)]
struct Totals {
    latency_s: f64,
    cycles: f64,
    energy_j: f64,
    dram_bytes: f64,
    metadata_bytes: f64,
    value_bytes: f64,
    /// Σ occupancy × compute cycles, for the cycle-weighted mean.
    occupancy_cycles: f64,
    compute_cycles: f64,
    /// Seconds per bottleneck class, in vocabulary order.
    by_class: [(crate::domain::verdict::Bottleneck, f64); 7],
    /// Compulsory bytes: weights as stored (values and metadata), activations and outputs
    /// at the slice's precision, each moved once (the roofline's denominator).
    bytes_moved: f64,
}

impl Default for Totals {
    fn default() -> Self {
        use crate::domain::verdict::Bottleneck as B;
        Totals {
            latency_s: 0.0,
            cycles: 0.0,
            energy_j: 0.0,
            dram_bytes: 0.0,
            metadata_bytes: 0.0,
            value_bytes: 0.0,
            occupancy_cycles: 0.0,
            compute_cycles: 0.0,
            by_class: [
                (B::Compute, 0.0),
                (B::MemoryBandwidth, 0.0),
                (B::Occupancy, 0.0),
                (B::Metadata, 0.0),
                (B::Fallback, 0.0),
                (B::Synchronization, 0.0),
                (B::Thermal, 0.0),
            ],
            bytes_moved: 0.0,
        }
    }
}

/// The slice's totals and each op's `(latency_s, energy_j)`, in plan order.
/// `sparsities` holds each op's modelled sparsity; `None` models every op dense.
fn totals(
    slice: &Slice,
    preset: &Preset,
    plan: &Plan,
    sparsities: Option<&[Sparsity]>,
) -> Result<(Totals, Vec<(f64, f64)>), ExecError> {
    let mut t = Totals::default();
    let mut per_op = Vec::with_capacity(plan.ops.len());
    for (i, op) in plan.ops.iter().enumerate() {
        let sparsity = sparsities.map_or(Sparsity::Dense, |s| s[i]);
        let layer = Layer::new(
            op.op.m as u64,
            op.op.n as u64,
            op.op.k as u64,
            sparsity,
            slice.precision,
        );
        let r = evaluate(preset, &layer).map_err(|source| ExecError::Sim {
            op: op.op.name.clone(),
            source,
        })?;
        per_op.push((r.latency_s, r.energy_j));
        let io = (op.op.m * op.op.k + op.op.m * op.op.n) as f64 * slice.precision.bytes() as f64;
        t.bytes_moved += r.value_bytes + r.metadata_bytes + io;
        t.latency_s += r.latency_s;
        t.cycles += r.cycles as f64;
        t.energy_j += r.energy_j;
        t.dram_bytes += r.dram_bytes;
        t.metadata_bytes += r.metadata_bytes;
        t.value_bytes += r.value_bytes;
        t.occupancy_cycles += r.tc_occupancy * r.compute_cycles as f64;
        t.compute_cycles += r.compute_cycles as f64;
        if let Some(slot) = t.by_class.iter_mut().find(|(c, _)| *c == r.bottleneck) {
            slot.1 += r.latency_s;
        }
    }
    Ok((t, per_op))
}

/// The sparsity the simulator models for op `name`: the slice's, or, for a checkpoint slice
/// (issue 21), what its tensor really holds. A structured pattern the tensor keeps is
/// modelled as such, one it breaks as dense (no structured-sparse unit can run it); an
/// unstructured or block claim is modelled at the tensor's measured density.
fn shipped_sparsity(slice: &Slice, name: &str) -> Result<Shipped, ExecError> {
    let Some(w) = &slice.checkpoint else {
        return Ok(Shipped {
            sparsity: slice.sparsity,
            violations: 0,
        });
    };
    let tensor_name = crate::ingress::checkpoint::tensor_of(name);
    let fail = |problem: String| ExecError::Prepare {
        op: name.to_owned(),
        problem: super::error::PrepareError::Checkpoint {
            tensor: tensor_name.to_owned(),
            problem,
        },
    };
    let tensor = w
        .checkpoint
        .tensor(tensor_name)
        .ok_or_else(|| fail("not in the checkpoint".into()))?;
    let data = w
        .checkpoint
        .read_tensor(tensor)
        .map_err(|e| fail(e.to_string()))?;
    let measured = super::structure::verify(tensor, &data, slice.sparsity)
        .ok_or_else(|| fail(format!("dtype {} cannot be verified", tensor.dtype.name())))?;
    // A density of 0 would be an all-zero layer; the model needs a kept fraction in (0, 1].
    let density = measured.density.max(f64::MIN_POSITIVE);
    let sparsity = match slice.sparsity {
        Sparsity::Dense => Sparsity::Dense,
        Sparsity::NOfM { .. } | Sparsity::Block { .. } if measured.violations > 0 => Sparsity::Dense,
        s @ (Sparsity::NOfM { .. } | Sparsity::Block { .. }) => s,
        Sparsity::Unstructured { .. } => Sparsity::Unstructured { density },
    };
    Ok(Shipped {
        sparsity,
        violations: measured.violations,
    })
}

/// What the simulator models for one op of a checkpoint slice.
struct Shipped {
    sparsity: Sparsity,
    /// Groups of the tensor that break the slice's structured claim.
    violations: u64,
}

/// The plan the slice really runs: an op the lowering sent to the sparse units whose tensor
/// breaks the structured claim is modelled dense, so it is a counted fallback with that
/// reason (issue 21: the matrix had said "sparse" for a layer no sparse unit could run).
fn shipped_plan(slice: &Slice, plan: &Plan, shipped: &[Shipped]) -> Plan {
    let mut plan = plan.clone();
    for (op, s) in plan.ops.iter_mut().zip(shipped) {
        if op.path == KernelPath::Sparse && s.violations > 0 && s.sparsity == Sparsity::Dense {
            op.path = KernelPath::DenseFallback;
            op.reason = format!(
                "the tensor breaks {} in {} group{}: no structured-sparse unit runs it, modelled dense",
                slice.sparsity,
                s.violations,
                if s.violations == 1 { "" } else { "s" }
            );
        }
    }
    plan
}

/// The preset's roofs at the slice's precision: dense peak GFLOP/s (2 FLOPs per MAC at the
/// nominal clock) and DRAM GB/s. Structured-sparse math units skip zeros rather than raise
/// this peak, so useful FLOPs stay under it.
fn preset_roofs(slice: &Slice, preset: &Preset) -> Option<(f64, f64)> {
    let macs = preset.peak_macs_per_cycle(slice.precision)?;
    Some((macs * 2.0 * preset.clock_ghz, preset.memory.dram_gbps))
}

/// Evaluate `slice` (lowered to `plan`) on its preset and record the evidence.
pub fn execute_sim_slice(slice: &Slice, preset: &Preset, plan: &Plan) -> SliceEvidence {
    let start = Instant::now();
    let shipped: Result<Vec<Shipped>, ExecError> = plan
        .ops
        .iter()
        .map(|op| shipped_sparsity(slice, &op.op.name))
        .collect();
    let shipped_plan = shipped.as_ref().ok().map(|s| shipped_plan(slice, plan, s));
    let plan = shipped_plan.as_ref().unwrap_or(plan);
    let mut evidence = SliceEvidence::empty(slice, plan);
    let dense_flops = plan.dense_flops();
    let outcome = shipped.and_then(|shipped| {
        let sparsities: Vec<Sparsity> = shipped.iter().map(|s| s.sparsity).collect();
        let candidate = totals(slice, preset, plan, Some(&sparsities))?;
        Ok((candidate, totals(slice, preset, plan, None)?))
    });
    let outcome = match outcome {
        Ok(((s, s_ops), (d, d_ops))) if !plan.ops.is_empty() => {
            let metadata_overhead = if s.value_bytes > 0.0 {
                s.metadata_bytes / s.value_bytes
            } else {
                0.0
            };
            let occupancy = if s.compute_cycles > 0.0 {
                s.occupancy_cycles / s.compute_cycles
            } else {
                0.0
            };
            // Units follow the metric vocabulary (`Metric::unit`).
            let values = [
                (Metric::Latency, s.latency_s),
                (Metric::Cycles, s.cycles),
                (Metric::EnergyJ, s.energy_j),
                (Metric::TcOccupancy, occupancy),
                (Metric::FallbackRate, plan.fallback_rate()),
                (Metric::MetadataOverhead, metadata_overhead),
                (Metric::DramBytes, s.dram_bytes),
                (Metric::EffectiveSpeedup, d.latency_s / s.latency_s),
                (Metric::ThroughputGflops, dense_flops / s.latency_s / 1e9),
            ];
            for (metric, v) in values {
                // Under load, `latency` is each request's, queueing included (below).
                if !(metric == Metric::Latency && slice.load.is_some()) {
                    evidence.counters.insert(metric, v);
                }
            }
            evidence.counters.insert(Counter::ComparatorLatency, d.latency_s);
            // Simulated time per bottleneck class: the validator names the class that holds
            // most of it.
            for (class, seconds) in s.by_class {
                if seconds > 0.0 {
                    evidence.counters.insert(Counter::SimTime(class), seconds);
                }
            }
            evidence.counters.insert(Counter::ValueBytes, s.value_bytes);
            evidence.counters.insert(Counter::MetadataBytes, s.metadata_bytes);
            evidence.counters.insert(Counter::DenseFlops, dense_flops);
            evidence.counters.insert(
                Counter::UsefulFlops,
                super::run::useful_flops(plan, slice.sparsity.density()),
            );
            evidence.counters.insert(Counter::BytesMoved, s.bytes_moved);
            if let Some((peak, bandwidth)) = preset_roofs(slice, preset) {
                evidence.counters.insert(Counter::RoofPeakGflops, peak);
                evidence.counters.insert(Counter::RoofBandwidthGbps, bandwidth);
            }
            evidence.op_costs = plan
                .ops
                .iter()
                .zip(s_ops.iter().zip(&d_ops))
                .map(|(p, (&(cs, ce), &(ds, de)))| OpCost {
                    op: p.op.name.clone(),
                    candidate_s: cs,
                    comparator_s: ds,
                    passes: 0,
                    candidate_energy_j: Some(ce),
                    comparator_energy_j: Some(de),
                    fidelity: None,
                    speedup_range: None,
                })
                .collect();
            // Served under load (issue 24): the simulated accelerator is the server, each
            // request taking the slice's simulated latency, in simulated time.
            match slice.load {
                Some(load) => {
                    let outcome = super::load::serve_simulated(load, slice.seed, s.latency_s);
                    super::load::record(load, &outcome, &mut evidence)
                }
                None => Ok(()),
            }
        }
        Ok(_) => Err(ExecError::NoOps),
        Err(error) => Err(error),
    };
    evidence.finish(outcome, start)
}
