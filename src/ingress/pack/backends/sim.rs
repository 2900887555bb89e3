//! `backend: sim`: the simulated accelerator named by the slice's `preset`, a built-in name
//! or a preset file relative to the pack.

use super::{At, Block, Metric, Rules, SliceBackend, SliceSpec};

pub(super) const RULES: Rules = Rules {
    name: "sim",
    runs_workload: true,
    block: Some(Block::scalar("preset", |spec| spec.preset.is_some(), example)),
    measures: |metric| {
        matches!(
            metric,
            Metric::Latency
                // Percentiles and drops of request latencies, under `load` only (issue 24).
                | Metric::LatencyP50
                | Metric::LatencyP95
                | Metric::LatencyP99
                | Metric::DropRate
                | Metric::Cycles
                | Metric::EnergyJ
                | Metric::TcOccupancy
                | Metric::FallbackRate
                | Metric::MetadataOverhead
                | Metric::DramBytes
                | Metric::EffectiveSpeedup
                | Metric::ThroughputGflops
                // Only for checkpoint workloads (issue 21): the shipped tensors verified.
                | Metric::PatternViolations
                | Metric::SparseCoverage
        )
    },
    // The preset decides; the semantic checks hold the slice's precisions against it.
    supports_precision: |_| true,
    // The simulated dense datapath of the same preset.
    has_comparator: |_| true,
    resolve,
};

fn example() -> String {
    let names = crate::sim::preset::builtin_names().join(", ");
    format!("`preset: h100` (built-in: {names}) or the path of a preset YAML file")
}

fn resolve(spec: &SliceSpec, at: At<'_>) -> Option<SliceBackend> {
    let At { base, loc, diags } = at;
    let name = spec.preset.as_ref()?;
    match resolve_preset(name, &loc.file) {
        Ok(p) => Some(SliceBackend::Sim(Box::new(p))),
        Err(e) => {
            diags.push(
                loc.at_value(
                    &format!("{base}/preset"),
                    e.to_string(),
                    Some(
                        "use a built-in preset name or a preset file relative to the pack \
                     (format: schemas/accelerator-preset.schema.json)"
                            .into(),
                    ),
                ),
            );
            None
        }
    }
}

/// Resolve a preset: a built-in name, else a file inside the pack's directory tree (no
/// absolute paths, no `..`, no links out: issue 23).
fn resolve_preset(name: &str, pack_file: &str) -> Result<crate::sim::Preset, crate::sim::SimError> {
    let builtin = crate::sim::preset::BUILTIN.iter().any(|(n, _)| *n == name);
    if builtin {
        return crate::sim::Preset::resolve(name);
    }
    let dir = match std::path::Path::new(pack_file).parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let unreadable = |message: String| crate::sim::SimError::ReadPreset {
        path: name.into(),
        message,
    };
    let beside = match crate::files::confined(dir, name) {
        Ok(path) => path,
        Err(crate::files::ConfineError::Outside) => {
            return Err(unreadable(
                "outside the pack's directory tree (no absolute paths, `..` or links out)".into(),
            ));
        }
        Err(crate::files::ConfineError::File(crate::files::FileError::Read { source, .. }))
            if source.kind() == std::io::ErrorKind::NotFound
                && !name.contains('/')
                && !name.ends_with(".yaml")
                && !name.ends_with(".yml") =>
        {
            // Neither a built-in nor a file: the error lists the built-ins.
            return crate::sim::Preset::resolve(name);
        }
        Err(crate::files::ConfineError::File(e)) => return Err(unreadable(e.into_io().to_string())),
    };
    crate::sim::Preset::resolve(&beside.display().to_string())
}
