//! `backend: import`: results another tool already measured (Google Benchmark, criterion,
//! hyperfine, pytest-benchmark) or GPU profiles (PyTorch profiler traces, Nsight Systems
//! SQLite exports), read at execution.

use super::{At, Block, Metric, Rules, SliceBackend, SliceSpec, pack_dir};
use crate::ingress::{ImportSlice, TraceRules};

pub(super) const RULES: Rules = Rules {
    name: "import",
    runs_workload: false,
    block: Some(Block::map("import", |spec| spec.import.is_some(), example)),
    // Every supported format records times (the speedup needs a comparator entry), but no
    // FLOP count, so no throughput. The GPU trace formats also record `fallback_rate` (the
    // dense share of GEMM kernel time); a slice guardrail on it over a benchmark format is
    // refused in `check_import`.
    measures: |metric| {
        (metric.is_speed() && metric != Metric::ThroughputGflops) || metric == Metric::FallbackRate
    },
    // The other tool owned the precision; the field is not used.
    supports_precision: |_| true,
    has_comparator: |spec| spec.import.as_ref().is_some_and(|i| i.comparator.is_some()),
    resolve: |spec, at| check_import(spec, at).map(SliceBackend::Import),
};

fn example() -> String {
    "`import: {file: results.json, format: google_benchmark, benchmark: BM_Name}` \
     (formats: google_benchmark, criterion, hyperfine, pytest_benchmark; GPU traces: \
     `import: {file: trace.json, format: torch_profiler}` or `format: nsys_sqlite`)"
        .into()
}

/// Check an `import` slice's block and resolve its file against the pack's directory. The
/// file itself is read at execution (CI often produces it in an earlier step).
fn check_import(spec: &SliceSpec, at: At<'_>) -> Option<ImportSlice> {
    let At { base, loc, diags } = at;
    let i = spec.import.as_ref()?;
    let before = diags.len();
    let format = i.format.as_str();
    if i.format.is_trace() {
        for (key, set) in [
            ("benchmark", i.benchmark.is_some()),
            ("comparator", i.comparator.is_some()),
        ] {
            if set {
                diags.push(loc.at_key(
                    &format!("{base}/import/{key}"),
                    format!("`{key}` does not apply to `format: {format}`: the whole trace is the slice"),
                    Some("remove it; narrow the trace to some ranges with `ranges: \"layer.*\"`".into()),
                ));
            }
        }
        let patterns = i.kernels.clone().unwrap_or_default();
        for (kind, list) in [("sparse", &patterns.sparse), ("dense", &patterns.dense)] {
            for (n, re) in list.iter().enumerate() {
                check_regex(re, &format!("{base}/import/kernels/{kind}/{n}"), loc, diags);
            }
        }
        if let Some(re) = &i.ranges {
            check_regex(re, &format!("{base}/import/ranges"), loc, diags);
        }
    } else {
        if i.benchmark.is_none() {
            diags.push(loc.at_key(
                &format!("{base}/import"),
                format!("`format: {format}` needs `benchmark`: the entry of the file that is this slice"),
                Some(example()),
            ));
        }
        for (key, set) in [("kernels", i.kernels.is_some()), ("ranges", i.ranges.is_some())] {
            if set {
                diags.push(loc.at_key(
                    &format!("{base}/import/{key}"),
                    format!("`{key}` applies to the GPU trace formats (torch_profiler, nsys_sqlite), not `{format}`"),
                    Some(format!("remove `{key}`")),
                ));
            }
        }
        // The plan of an import slice has no ops, so a fallback_rate guardrail would pass on
        // the plan's 0 without anything measured: refused where the file cannot give it.
        for (n, g) in spec.guardrails.iter().enumerate() {
            if g.metric == Metric::FallbackRate.name() {
                diags.push(loc.at_value(
                    &format!("{base}/guardrails/{n}/metric"),
                    format!("`format: {format}` holds times only; it does not measure `fallback_rate`"),
                    Some("import a GPU trace (torch_profiler, nsys_sqlite) to gate fallback_rate".into()),
                ));
            }
        }
    }
    if i.comparator.is_some() && i.comparator == i.benchmark {
        diags.push(loc.at_value(
            &format!("{base}/import/comparator"),
            format!(
                "the comparator is the benchmark itself (`{}`)",
                i.comparator.as_deref().unwrap_or("")
            ),
            Some("name the baseline entry to compare against, or remove `comparator`".into()),
        ));
    }
    if diags.len() > before {
        return None;
    }
    let trace = i.format.is_trace().then(|| {
        let k = i.kernels.clone().unwrap_or_default();
        TraceRules {
            sparse: k.sparse,
            dense: k.dense,
            ranges: i.ranges.clone(),
        }
    });
    Some(ImportSlice {
        path: pack_dir(&loc.file).join(&i.file),
        format: i.format,
        benchmark: i.benchmark.clone().unwrap_or_default(),
        comparator: i.comparator.clone(),
        trace,
    })
}

/// Refuse a pattern that does not compile (or would compile too large), at its value.
fn check_regex(
    re: &str,
    pointer: &str,
    loc: &crate::ingress::span::Locator,
    diags: &mut Vec<crate::ingress::PackDiagnostic>,
) {
    if let Err(e) = crate::ingress::compile_pattern(re) {
        let why = match e {
            regex::Error::CompiledTooBig(_) => "it compiles too large".to_owned(),
            regex::Error::Syntax(s) => s.lines().last().unwrap_or("syntax error").trim().to_owned(),
            _ => "syntax error".to_owned(),
        };
        diags.push(loc.at_value(
            pointer,
            format!("not a valid regular expression: {why}"),
            Some("Rust `regex` syntax, e.g. \"sparse|_sp_\"; escape a literal `.` or `(` with `\\\\`".into()),
        ));
    }
}
