//! Stage 4, tensor execution: runs each slice interleaved with its dense comparator and
//! produces [`Evidence`]. It measures; it never judges.

pub mod bench;
mod break_even;
mod capture;
mod checkpoint;
mod child;
pub mod children;
mod command;
mod contain;
pub mod dispatch;
pub mod eligibility;
mod error;
mod evidence;
mod import;
mod linger;
mod load;
mod numbers;
mod paired;
pub mod quality;
pub mod roofs;
mod run;
pub mod shards;
mod sim;
pub mod structure;
pub mod summary;
pub(crate) mod trace;
mod weights;
mod workload;

pub use child::{
    BUILD_LOCK_FIELDS, CHILD_RUN_PROTOCOL, ChildProcessLauncher, ProtocolError, ProtocolHello, RunLauncher,
    RunReply, RunRequest, probe_protocol,
};
pub use command::{COMMAND_CONTRACT_VERSION, execute_command_slice, parse_records};
#[cfg(target_os = "linux")]
pub use contain::supervise;
pub use contain::{Supervisor, contain_commands_with};
pub use error::{
    ChildError, CommandError, CommandStderr, ExecError, ImportError, ModelError, PairSide, PrepareError,
    RecordError, StderrTail,
};
pub use evidence::{
    ArtifactRecord, EVIDENCE_SCHEMA_VERSION, EqualLatency, Evidence, IsaRecord, LayerBreakEven, Look,
    MetricSamples, ModelScore, OpCost, PackRecord, PruneStep, QualityEvidence, RunSummary, SliceEvidence,
    SliceFailure, TokenSpeedup,
};
pub use import::{Imported, check_import, execute_import_slice, read_entry};
pub use load::{LoadOutcome, execute_load_slice, serve};
pub use paired::{BaselineRuns, PairOrder, SideReading};
pub use quality::execute_model_slice;
pub use run::{
    BaselineLaunch, LaunchRun, OnProgress, Phase, RunProgress, RunRecord, StopDecision, StopRule,
    execute_slice, execute_slice_with, measure_run,
};
pub use sim::execute_sim_slice;
/// The CPU kernels, a crate of their own (`crates/kernels`); re-exported so that
/// `execute::kernels::…` paths name them as before.
pub use sparsegate_kernels as kernels;
pub use weights::prune_and_compress;

use crate::ingress::{Slice, SliceBackend};
use crate::lower::Plan;

/// Execute one slice lowered to `plan` on its backend: measured on this machine, evaluated
/// on the simulated part, run as the user's command, or read from another tool's results.
/// The one entry point of the stage; a new backend is one arm here.
///
/// `launch` delegates the runs of a CPU-kernel slice to child processes; `baseline`, when
/// a baseline binary was given, runs the baseline build's runs interleaved with them
/// (issue 22; a `command` slice names its baseline in the pack instead); `stop` is the
/// interim check sequential sampling asks after each run (see [`StopRule`]);
/// `on_progress` hears where a long slice stands while it runs (the runs of CPU-kernel,
/// model and command slices, a model's training and pruning, a load's requests; the
/// simulator, an import and a simulated load are quick and report nothing until they end).
pub fn execute_slice_on(
    slice: &Slice,
    plan: &Plan,
    launch: Option<&LaunchRun<'_>>,
    baseline: Option<&BaselineLaunch<'_>>,
    stop: Option<&StopRule<'_>>,
    on_progress: Option<&mut OnProgress<'_>>,
) -> SliceEvidence {
    let mut evidence = match (&slice.backend, slice.load) {
        (SliceBackend::Kernels { .. } | SliceBackend::Serving { .. }, Some(load)) => {
            execute_load_slice(slice, load, plan, on_progress)
        }
        (SliceBackend::Kernels { .. } | SliceBackend::Serving { .. }, None) => {
            run::execute_slice_paired(slice, plan, launch, baseline, stop, on_progress)
        }
        // The simulator and a command serve a load themselves (issue 24).
        (SliceBackend::Model(task), _) => execute_model_slice(slice, task, plan, on_progress),
        (SliceBackend::Sim(preset), _) => execute_sim_slice(slice, preset, plan),
        (SliceBackend::Command(command), _) => execute_command_slice(slice, command, plan, stop, on_progress),
        (SliceBackend::Import(import), _) => execute_import_slice(slice, import, plan),
    };
    if matches!(
        slice.backend,
        SliceBackend::Kernels { .. } | SliceBackend::Serving { .. }
    ) {
        evidence.isa = Some(isa_record(slice, plan));
    }
    // The shipped artifact is verified whatever the timing found (issue 21).
    if let Some(w) = &slice.checkpoint {
        checkpoint::record(w, slice, plan, &mut evidence);
        if evidence.failure.is_none() {
            quality::evaluate_artifact(w, slice.sparsity, plan, &mut evidence);
        }
    }
    evidence.break_even = break_even::per_layer(&slice.ops, &evidence.op_costs);
    evidence
}

/// Which instruction-set paths a CPU slice's comparator and candidate take here.
pub(crate) fn isa_record(slice: &Slice, plan: &Plan) -> IsaRecord {
    use crate::domain::{Precision, Sparsity};
    use kernels::isa::{Form, Operands, isa_path_at};
    let operands = match slice.precision {
        Precision::Fp32 => Operands::F32,
        Precision::Fp16 => Operands::F16,
        Precision::Bf16 => Operands::Bf16,
        Precision::Int8 => Operands::I8,
    };
    let sparse = plan
        .ops
        .iter()
        .any(|p| p.path == crate::lower::KernelPath::Sparse);
    let form = |k: usize| match slice.sparsity {
        _ if !sparse => Form::Dense,
        Sparsity::NOfM { n: 2, m: 4 } => Form::TwoOfFour,
        // int8 runs 1:2 as 2:4 (every group of four keeps at most two).
        Sparsity::NOfM { n: 1, m: 2 } if slice.precision == Precision::Int8 => Form::TwoOfFour,
        Sparsity::Block { rows, cols, .. } => Form::Block {
            rows: rows as usize,
            cols: cols as usize,
        },
        Sparsity::Unstructured { .. } => Form::Unstructured { k },
        _ => Form::OtherSparse,
    };
    // The path can depend on the op's tokens (bf16 takes `vdpbf16ps` below a few) and K
    // (16-bit CSR up to 65536): every distinct one, in op order, joined by `+`.
    let paths = |form: &dyn Fn(usize) -> Form| -> String {
        let mut names: Vec<&str> = Vec::new();
        for op in &plan.ops {
            let name = isa_path_at(operands, form(op.op.k), op.op.m).name();
            if !names.contains(&name) {
                names.push(name);
            }
        }
        if names.is_empty() {
            names.push(isa_path_at(operands, form(0), usize::MAX).name());
        }
        names.join("+")
    };
    IsaRecord {
        comparator: paths(&|_| Form::Dense),
        candidate: paths(&form),
    }
}
