//! The `import` backend: results another tool already measured, read from its own output
//! format, so a team gates what it already measures. Each reader keeps the structure the
//! format has: hyperfine times one fresh process per sample, so every sample is its own run
//! (the unit of replication, DESIGN.md §6); Google Benchmark repetitions, criterion samples
//! and pytest-benchmark rounds are repeated measures inside one process (run 0).
//!
//! None of these tools interleaves two benchmarks, so an imported `effective_speedup`
//! pairs the comparator's and the slice's samples *by position*; it does not cancel drift
//! the way the interleaved pairs of the `cpu` and `command` backends do.

use super::error::{ExecError, ImportError};
use super::evidence::{MetricSamples, RunSummary, SliceEvidence};
use super::numbers::{median, paired_speedups, zero_if_nan};
use crate::domain::{Counter, Metric};
use crate::ingress::pack::ImportFormat;
use crate::ingress::{ImportSlice, Slice};
use crate::lower::Plan;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

/// Largest result file read (a criterion `sample.json` or a whole JSON export).
const MAX_FILE_BYTES: u64 = 64 << 20;

/// One benchmark entry's timings: seconds per iteration, with the run each came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    /// Seconds per iteration, in file order.
    pub samples: Vec<f64>,
    /// The run (process) of each sample.
    pub runs: Vec<u32>,
}

/// Read `slice`'s results (and its comparator's) and record them as evidence.
pub fn execute_import_slice(slice: &Slice, import: &ImportSlice, plan: &Plan) -> SliceEvidence {
    let start = Instant::now();
    let mut evidence = SliceEvidence::empty(slice, plan);
    let outcome = record(import, &mut evidence);
    evidence.finish(outcome, start)
}

/// Read `slice`'s results once before anything runs (`gate`, `run`, `bless`), so that a
/// file that cannot be read (malformed, truncated, over a limit, or without the entry or
/// range the pack names) is bad input: the command exits 2 with nothing written, as for a
/// malformed checkpoint, instead of failing the slice at execution (exit 1). A benchmark
/// that ran and failed (`error_message`, a non-zero exit) is a measured finding, left to
/// execution. Result files are bounded, so the second read costs milliseconds.
pub fn check_import(slice: &Slice) -> Result<(), ExecError> {
    let crate::ingress::SliceBackend::Import(import) = &slice.backend else {
        return Ok(());
    };
    let mut scratch = SliceEvidence::empty(slice, &crate::lower::lower(slice));
    match record(import, &mut scratch) {
        Err(ExecError::Import {
            problem: ImportError::BenchmarkFailed { .. } | ImportError::NonZeroExit { .. },
            ..
        }) => Ok(()),
        other => other,
    }
}

fn record(import: &ImportSlice, evidence: &mut SliceEvidence) -> Result<(), ExecError> {
    let context = |problem: ImportError| ExecError::Import {
        format: import.format,
        path: import.path.clone(),
        problem,
    };
    if let Some(rules) = &import.trace {
        let measured = super::trace::measure(import.format, &import.path, rules).map_err(context)?;
        record_trace(measured, evidence);
        return Ok(());
    }
    let candidate = read_entry(import.format, &import.path, &import.benchmark).map_err(context)?;
    let comparator = import
        .comparator
        .as_ref()
        .map(|c| read_entry(import.format, &import.path, c).map_err(context))
        .transpose()?;
    let tagged = |unit: &str, samples: Vec<f64>, runs: Vec<u32>| MetricSamples {
        unit: unit.to_owned(),
        samples,
        runs,
    };
    let mut speedups = Vec::new();
    if let Some(c) = &comparator {
        speedups = paired_speedups(&c.samples, &candidate.samples);
        let runs = candidate.runs[..speedups.len()].to_vec();
        evidence
            .metrics
            .insert(Metric::EffectiveSpeedup, tagged("x", speedups.clone(), runs));
        evidence.comparator = Some(tagged("s", c.samples.clone(), c.runs.clone()));
    }
    let mut by_run: BTreeMap<u32, RunColumns> = BTreeMap::new();
    for (i, (&x, &r)) in candidate.samples.iter().zip(&candidate.runs).enumerate() {
        let slot = by_run.entry(r).or_default();
        slot.latency.push(x);
        if let Some(c) = comparator.as_ref().and_then(|c| c.samples.get(i)) {
            slot.comparator.push(*c);
        }
        if let Some(s) = speedups.get(i) {
            slot.speedup.push(*s);
        }
    }
    evidence.runs = by_run
        .into_iter()
        .map(|(run, c)| RunSummary {
            run,
            pid: None,
            warmup_iterations: 0,
            samples: c.latency.len(),
            latency_s: zero_if_nan(median(&c.latency)),
            comparator_s: zero_if_nan(median(&c.comparator)),
            calibration_s: 0.0,
            speedup: zero_if_nan(median(&c.speedup)),
            cpu_share: None,
        })
        .collect();
    evidence
        .counters
        .insert(Counter::Samples, candidate.samples.len() as f64);
    evidence
        .counters
        .insert(Counter::Runs, evidence.runs.len() as f64);
    evidence
        .metrics
        .insert(Metric::Latency, tagged("s", candidate.samples, candidate.runs));
    Ok(())
}

/// A GPU trace's evidence: the kernel table, its counters and one latency sample per
/// selected range occurrence (all from one process: run 0).
fn record_trace(measured: super::trace::Measured, evidence: &mut SliceEvidence) {
    let t = &measured.kernels.total;
    let c = &mut evidence.counters;
    if let Some(rate) = t.fallback_rate() {
        c.insert(Metric::FallbackRate, rate);
        c.insert(
            Counter::DenseGemmCountShare,
            t.dense as f64 / (t.sparse + t.dense) as f64,
        );
    }
    let all = t.total_s();
    c.insert(
        Counter::SparseGpuShare,
        if all > 0.0 { t.sparse_s / all } else { 0.0 },
    );
    c.insert(Counter::SparseKernels, t.sparse as f64);
    c.insert(Counter::DenseKernels, t.dense as f64);
    c.insert(Counter::OtherKernels, t.other as f64);
    c.insert(Counter::SparseGpuS, t.sparse_s);
    c.insert(Counter::DenseGpuS, t.dense_s);
    c.insert(Counter::KernelGpuS, all);
    c.insert(Counter::Samples, measured.samples.len() as f64);
    c.insert(Counter::Runs, 1.0);
    evidence.runs = vec![RunSummary {
        run: 0,
        pid: None,
        warmup_iterations: 0,
        samples: measured.samples.len(),
        latency_s: zero_if_nan(median(&measured.samples)),
        comparator_s: 0.0,
        calibration_s: 0.0,
        speedup: 0.0,
        cpu_share: None,
    }];
    evidence.metrics.insert(
        Metric::Latency,
        MetricSamples {
            unit: "s".into(),
            runs: vec![0; measured.samples.len()],
            samples: measured.samples,
        },
    );
    evidence.gpu_kernels = Some(measured.kernels);
}

/// One run's samples, for its [`RunSummary`].
#[derive(Default)]
struct RunColumns {
    latency: Vec<f64>,
    comparator: Vec<f64>,
    speedup: Vec<f64>,
}

/// Read the timings of entry `name` from a file (or criterion directory) in `format`.
pub fn read_entry(format: ImportFormat, path: &Path, name: &str) -> Result<Imported, ImportError> {
    let imported = match format {
        ImportFormat::Criterion => criterion(path, name)?,
        ImportFormat::GoogleBenchmark => google_benchmark(&read_json(path)?, name)?,
        ImportFormat::Hyperfine => hyperfine(&read_json(path)?, name)?,
        ImportFormat::PytestBenchmark => pytest_benchmark(&read_json(path)?, name)?,
        ImportFormat::TorchProfiler | ImportFormat::NsysSqlite => {
            // Traces are measured whole (`trace::measure`), not read by entry.
            return Err(ImportError::NoSamples(name.to_owned()));
        }
    };
    if imported.samples.is_empty() {
        return Err(ImportError::NoSamples(name.to_owned()));
    }
    if let Some(&time) = imported.samples.iter().find(|x| !(x.is_finite() && **x > 0.0)) {
        return Err(ImportError::BadTime {
            name: name.to_owned(),
            time,
        });
    }
    Ok(imported)
}

fn read_json(path: &Path) -> Result<Value, ImportError> {
    use std::io::Read;
    let not_a_file = || std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file");
    // A FIFO or device would block the open or never end: refused before opening.
    if !std::fs::metadata(path).map_err(ImportError::Open)?.is_file() {
        return Err(ImportError::Open(not_a_file()));
    }
    // Non-blocking open: a FIFO swapped in after the check cannot hang it (issue 23).
    let file = crate::files::open_regular(path).map_err(|e| ImportError::Open(e.into_io()))?;
    let meta = file.metadata().map_err(ImportError::Open)?;
    if !meta.is_file() {
        return Err(ImportError::Open(not_a_file()));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(ImportError::TooLarge {
            bytes: meta.len(),
            limit: MAX_FILE_BYTES,
        });
    }
    // Bounded even if the file grows after the size check.
    let reader = std::io::BufReader::new(file.take(MAX_FILE_BYTES + 1));
    serde_json::from_reader(reader).map_err(ImportError::Json)
}

/// Seconds per unit of a Google Benchmark `time_unit`.
fn gbench_unit(unit: &str) -> Option<f64> {
    match unit {
        "ns" => Some(1e-9),
        "us" => Some(1e-6),
        "ms" => Some(1e-3),
        "s" => Some(1.0),
        _ => None,
    }
}

/// The array under `key` of an export written with the tool's `written_with` option.
fn export_list<'a>(
    json: &'a Value,
    key: &'static str,
    written_with: &'static str,
) -> Result<&'a Vec<Value>, ImportError> {
    json.get(key)
        .and_then(Value::as_array)
        .ok_or(ImportError::NotAnExport { key, written_with })
}

fn unknown_entry(name: &str, known: impl Iterator<Item = String>) -> ImportError {
    let mut known: Vec<String> = known.collect();
    known.dedup();
    ImportError::UnknownEntry {
        name: name.to_owned(),
        known,
    }
}

/// Google Benchmark JSON: the `iteration` runs of `run_name` (one per repetition), their
/// `real_time` per iteration; aggregates (`_mean`, `_median`, …) are skipped because the
/// raw repetitions are there.
fn google_benchmark(json: &Value, name: &str) -> Result<Imported, ImportError> {
    let list = export_list(json, "benchmarks", "--benchmark_format=json")?;
    let mut samples = Vec::new();
    for b in list {
        let run_name = b
            .get("run_name")
            .or_else(|| b.get("name"))
            .and_then(Value::as_str);
        let is_iteration = b
            .get("run_type")
            .and_then(Value::as_str)
            .is_none_or(|t| t == "iteration");
        if run_name != Some(name) || !is_iteration {
            continue;
        }
        if let Some(err) = b.get("error_message").and_then(Value::as_str) {
            return Err(ImportError::BenchmarkFailed {
                name: name.to_owned(),
                message: err.to_owned(),
            });
        }
        let unit = b.get("time_unit").and_then(Value::as_str).unwrap_or("ns");
        let scale = gbench_unit(unit).ok_or_else(|| ImportError::UnknownUnit(unit.to_owned()))?;
        let t = b
            .get("real_time")
            .and_then(Value::as_f64)
            .ok_or_else(|| ImportError::NoRealTime {
                name: name.to_owned(),
            })?;
        samples.push(t * scale);
    }
    if samples.is_empty() {
        let known = list
            .iter()
            .filter_map(|b| {
                b.get("run_name")
                    .or_else(|| b.get("name"))
                    .and_then(Value::as_str)
            })
            .map(str::to_owned);
        return Err(unknown_entry(name, known));
    }
    let runs = vec![0; samples.len()];
    Ok(Imported { samples, runs })
}

/// hyperfine `--export-json`: the `times` (seconds) of the result whose `command` is
/// `name` (hyperfine stores `--command-name` there). Each time is one process: one run.
fn hyperfine(json: &Value, name: &str) -> Result<Imported, ImportError> {
    let list = export_list(json, "results", "--export-json")?;
    let entry = list
        .iter()
        .find(|r| r.get("command").and_then(Value::as_str) == Some(name))
        .ok_or_else(|| {
            unknown_entry(
                name,
                list.iter()
                    .filter_map(|r| r.get("command").and_then(Value::as_str))
                    .map(str::to_owned),
            )
        })?;
    if let Some(codes) = entry.get("exit_codes").and_then(Value::as_array)
        && let Some(code) = codes.iter().find(|c| c.as_i64() != Some(0))
    {
        return Err(ImportError::NonZeroExit {
            name: name.to_owned(),
            code: code.clone(),
        });
    }
    let samples = numbers(entry.get("times"), "times")?;
    let runs = (0..samples.len() as u32).collect();
    Ok(Imported { samples, runs })
}

/// pytest-benchmark `--benchmark-json`: `stats.data` (seconds per iteration, one per
/// round) of the benchmark whose `name` or `fullname` is `name`.
fn pytest_benchmark(json: &Value, name: &str) -> Result<Imported, ImportError> {
    let list = export_list(json, "benchmarks", "--benchmark-json")?;
    let field = |b: &Value, key: &str| b.get(key).and_then(Value::as_str).map(str::to_owned);
    let entry = list
        .iter()
        .find(|b| field(b, "name").as_deref() == Some(name) || field(b, "fullname").as_deref() == Some(name))
        .ok_or_else(|| unknown_entry(name, list.iter().filter_map(|b| field(b, "name"))))?;
    let data = entry.get("stats").and_then(|s| s.get("data"));
    if data.is_none() {
        return Err(ImportError::SummaryOnly {
            name: name.to_owned(),
        });
    }
    let samples = numbers(data, "stats.data")?;
    Ok(Imported {
        runs: vec![0; samples.len()],
        samples,
    })
}

/// criterion: `<dir>/<id>/new/sample.json`, whose `times[i] / iters[i]` (ns) is one
/// sample's time per iteration.
fn criterion(dir: &Path, id: &str) -> Result<Imported, ImportError> {
    let outside = || ImportError::CriterionOutside { id: id.to_owned() };
    if std::path::Path::new(id)
        .components()
        .any(|c| !matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir))
    {
        return Err(outside());
    }
    let file = dir.join(id).join("new").join("sample.json");
    if let (Ok(real_dir), Ok(real)) = (dir.canonicalize(), file.canonicalize())
        && !real.starts_with(real_dir)
    {
        return Err(outside());
    }
    if !file.is_file() {
        let mut known = Vec::new();
        collect_criterion_ids(dir, dir, 0, &mut known);
        known.sort();
        return Err(ImportError::NoCriterionSample { file, known });
    }
    let json = read_json(&file)?;
    let iters = numbers(json.get("iters"), "iters")?;
    let times = numbers(json.get("times"), "times")?;
    if iters.len() != times.len() {
        return Err(ImportError::RaggedCriterionSample {
            file,
            iters: iters.len(),
            times: times.len(),
        });
    }
    let samples: Vec<f64> = times.iter().zip(&iters).map(|(t, n)| t / n * 1e-9).collect();
    Ok(Imported {
        runs: vec![0; samples.len()],
        samples,
    })
}

/// Benchmark ids below a criterion directory: the paths holding `new/sample.json`.
fn collect_criterion_ids(root: &Path, dir: &Path, depth: usize, out: &mut Vec<String>) {
    if depth > 6 {
        return;
    }
    if dir.join("new").join("sample.json").is_file()
        && let Ok(rel) = dir.strip_prefix(root)
    {
        out.push(rel.display().to_string());
    }
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() && entry.file_name() != "new" && entry.file_name() != "base" {
            collect_criterion_ids(root, &path, depth + 1, out);
        }
    }
}

fn numbers(value: Option<&Value>, what: &'static str) -> Result<Vec<f64>, ImportError> {
    value
        .and_then(Value::as_array)
        .ok_or(ImportError::NoNumbers(what))?
        .iter()
        .map(|v| v.as_f64().ok_or(ImportError::NotANumber(what)))
        .collect()
}

#[cfg(test)]
mod tests {

    /// A FIFO named as a result file is refused at once, never opened (which would block).
    #[cfg(unix)]
    #[test]
    fn a_fifo_result_file_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("results.json");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let err = read_json(&fifo).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
    }

    use super::*;
    use std::path::PathBuf;

    fn fixture(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/import")
            .join(name)
    }

    #[test]
    fn issue_8_google_benchmark_keeps_repetitions() {
        let f = fixture("google_benchmark.json");
        let dense = read_entry(ImportFormat::GoogleBenchmark, &f, "BM_Dense/65536").unwrap();
        // Twelve `--benchmark_repetitions`, aggregates skipped; ns → s.
        assert_eq!(dense.samples.len(), 12);
        assert!((dense.samples[0] - 242072.76081987753e-9).abs() < 1e-15);
        assert_eq!(dense.runs, vec![0; 12]);
        let e = read_entry(ImportFormat::GoogleBenchmark, &f, "BM_Nope")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("BM_Dense/65536") && e.contains("BM_Sparse/65536"),
            "{e}"
        );
    }

    #[test]
    fn issue_8_hyperfine_samples_are_runs() {
        let f = fixture("hyperfine.json");
        let h = read_entry(ImportFormat::Hyperfine, &f, "busy-2000").unwrap();
        assert_eq!(h.samples.len(), 20);
        assert_eq!(h.runs, (0..20).collect::<Vec<u32>>());
    }

    #[test]
    fn issue_8_pytest_benchmark_reads_saved_rounds() {
        let f = fixture("pytest_benchmark.json");
        let by_name = read_entry(ImportFormat::PytestBenchmark, &f, "test_sparse").unwrap();
        let by_full = read_entry(
            ImportFormat::PytestBenchmark,
            &f,
            "test_pytest_fixture.py::test_sparse",
        )
        .unwrap();
        assert_eq!(by_name, by_full);
        assert_eq!(by_name.samples.len(), 12);
    }

    #[test]
    fn criterion_ids_cannot_leave_the_criterion_directory() {
        let dir = fixture("criterion");
        for id in ["../criterion/x", "/etc", "a/../../b"] {
            assert!(
                matches!(criterion(&dir, id), Err(ImportError::CriterionOutside { .. })),
                "{id}"
            );
        }
    }

    #[test]
    fn issue_8_criterion_reads_per_iteration_times() {
        let dir = fixture("criterion");
        let s = read_entry(ImportFormat::Criterion, &dir, "sum/sparse").unwrap();
        assert_eq!(s.samples.len(), 10);
        let e = read_entry(ImportFormat::Criterion, &dir, "sum/nope")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sum/dense") && e.contains("sum/sparse"), "{e}");
    }

    #[test]
    fn issue_8_summary_only_pytest_file_is_refused_with_a_hint() {
        let json: Value = serde_json::json!({"benchmarks": [{"name": "t", "stats": {"median": 1.0}}]});
        let e = pytest_benchmark(&json, "t").unwrap_err().to_string();
        assert!(e.contains("--benchmark-save-data"), "{e}");
    }
}
