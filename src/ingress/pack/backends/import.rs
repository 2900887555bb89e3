//! `backend: import`: results another tool already measured (Google Benchmark, criterion,
//! hyperfine, pytest-benchmark), read at execution.

use super::{At, Block, Metric, Rules, SliceBackend, SliceSpec, pack_dir};
use crate::ingress::ImportSlice;

pub(super) const RULES: Rules = Rules {
    name: "import",
    runs_workload: false,
    block: Some(Block::map("import", |spec| spec.import.is_some(), example)),
    // Every supported format records times (the speedup needs a comparator entry), but no
    // FLOP count, so no throughput.
    measures: |metric| metric.is_speed() && metric != Metric::ThroughputGflops,
    // The other tool owned the precision; the field is not used.
    supports_precision: |_| true,
    has_comparator: |spec| spec.import.as_ref().is_some_and(|i| i.comparator.is_some()),
    resolve: |spec, at| check_import(spec, at).map(SliceBackend::Import),
};

fn example() -> String {
    "`import: {file: results.json, format: google_benchmark, benchmark: BM_Name}` \
     (formats: google_benchmark, criterion, hyperfine, pytest_benchmark)"
        .into()
}

/// Check an `import` slice's block and resolve its file against the pack's directory. The
/// file itself is read at execution (CI often produces it in an earlier step).
fn check_import(spec: &SliceSpec, at: At<'_>) -> Option<ImportSlice> {
    let At { base, loc, diags } = at;
    let i = spec.import.as_ref()?;
    if i.comparator.as_deref() == Some(i.benchmark.as_str()) {
        diags.push(loc.at_value(
            &format!("{base}/import/comparator"),
            format!("the comparator is the benchmark itself (`{}`)", i.benchmark),
            Some("name the baseline entry to compare against, or remove `comparator`".into()),
        ));
        return None;
    }
    Some(ImportSlice {
        path: pack_dir(&loc.file).join(&i.file),
        format: i.format,
        benchmark: i.benchmark.clone(),
        comparator: i.comparator.clone(),
    })
}
