//! GPU profiles as `import` evidence (issue 21, "proof the sparse kernel ran"): the PyTorch
//! profiler's Chrome trace and Nsight Systems' SQLite export, read into one list of kernels
//! and ranges, the kernels classified by name as sparse GEMM, dense GEMM or other
//! (docs/gpu-traces.md).
//!
//! What is recorded: `fallback_rate` = dense GEMM kernel time / (sparse + dense GEMM kernel
//! time), time-weighted (the count-weighted share is the `dense_gemm_count_share` counter);
//! `sparse_gpu_share` = sparse kernel time / all kernel time; kernel counts and times; a
//! table per range name; and as `latency` samples the GPU kernel time of each occurrence
//! of a selected range (one sample of the whole trace's kernel time when it has none).
//! These are GPU busy times summed over kernels, not wall time: overlapping streams count
//! twice.

use super::error::ImportError;
use crate::ingress::TraceRules;
use crate::ingress::pack::ImportFormat;
use regex::Regex;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Largest JSON trace read.
pub const MAX_TRACE_BYTES: u64 = 256 << 20;
/// Most events (JSON `traceEvents`, or kernel + NVTX rows) a trace may hold.
pub const MAX_TRACE_EVENTS: u64 = 2_000_000;

/// Built-in sparse GEMM kernel patterns, tried first. cuSPARSELt and CUTLASS name their
/// structured-sparse kernels with `sparse` (e.g. `sm80_xmma_sparse_gemm_f16f16_...`,
/// `cutlass_80_tensorop_f16_s16816gemm_sparse_...`), `_sp_` or `spmma` (the `mma.sp`
/// instruction); the library name itself shows in some builds.
pub const SPARSE_PATTERNS: &[&str] = &["(?i)sparse", "_sp_", "(?i)spmma", "(?i)cusparselt"];
/// Built-in dense GEMM kernel patterns: cuBLAS / cuBLASLt (`sm90_xmma_gemm_...`,
/// `ampere_sgemm_128x64_tn`, `cublasLt...`, and `Kernel2`, the name some cuBLAS versions
/// give their sgemm), CUTLASS (`cutlass_80_tensorop_s1688gemm_...`) and GEMV kernels.
/// cuBLAS 13 on Hopper names its GEMMs `nvjet_...` (`nvjet_sm90_hsh_64x16_64x16_2x1_v_bz_
/// splitK_TNT`, seen in the H200 trace of issue 25), with no `gemm` in the name: without
/// that pattern a dense fallback there would count as "other" and hide.
pub const DENSE_PATTERNS: &[&str] = &["(?i)gemm", "(?i)gemv", "(?i)cublaslt", "^Kernel2$", "^nvjet_"];

pub use crate::ingress::compile_pattern as compile;

/// What a kernel is, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelClass {
    /// A sparse GEMM: the sparse path ran.
    Sparse,
    /// A dense GEMM: the dense path ran.
    Dense,
    /// Anything else (elementwise, reductions, copies).
    Other,
}

/// The kernel classes of a trace in total, and per range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuKernels {
    /// Every kernel of the trace; with `ranges` set, every kernel inside a selected range.
    pub total: KernelTimes,
    /// Per range name (selected by `ranges`), in name order: the kernels launched inside
    /// its occurrences (innermost selected range).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranges: Vec<RangeKernels>,
    /// How kernels were put in ranges: `correlation` (the CPU launch inside the range)
    /// or `gpu_time` (the kernel's start inside the range, where no launch was found).
    pub attribution: String,
}

/// One range name's kernels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RangeKernels {
    /// The range's name, escaped and at most 120 characters.
    pub range: String,
    /// Occurrences of the range in the trace.
    pub occurrences: u64,
    /// Their kernels.
    pub kernels: KernelTimes,
}

/// Counts and GPU seconds of kernels by class.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KernelTimes {
    /// Sparse GEMM kernels.
    pub sparse: u64,
    /// Dense GEMM kernels.
    pub dense: u64,
    /// Other kernels.
    pub other: u64,
    /// Seconds of sparse GEMM kernels.
    pub sparse_s: f64,
    /// Seconds of dense GEMM kernels.
    pub dense_s: f64,
    /// Seconds of other kernels.
    pub other_s: f64,
}

impl KernelTimes {
    fn add(&mut self, class: KernelClass, s: f64) {
        match class {
            KernelClass::Sparse => (self.sparse += 1, self.sparse_s += s),
            KernelClass::Dense => (self.dense += 1, self.dense_s += s),
            KernelClass::Other => (self.other += 1, self.other_s += s),
        };
    }

    /// Dense GEMM time / GEMM time; `None` without GEMM kernels.
    pub fn fallback_rate(&self) -> Option<f64> {
        let gemm = self.sparse_s + self.dense_s;
        (self.sparse + self.dense > 0).then(|| if gemm > 0.0 { self.dense_s / gemm } else { 0.0 })
    }

    /// Seconds of all kernels.
    pub fn total_s(&self) -> f64 {
        self.sparse_s + self.dense_s + self.other_s
    }
}

/// A GPU kernel, times in nanoseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Kernel {
    /// Its name (demangled where the trace has it).
    pub name: String,
    /// Start on the GPU.
    pub start: i64,
    /// End on the GPU.
    pub end: i64,
    /// The id linking it to its CPU launch.
    pub correlation: Option<i64>,
}

/// A named CPU-side range (a layer), times in nanoseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Range {
    /// Its name.
    pub name: String,
    /// Start.
    pub start: i64,
    /// End.
    pub end: i64,
}

/// A trace reduced to what is classified.
#[derive(Debug, Default)]
pub struct Trace {
    /// The GPU kernels.
    pub kernels: Vec<Kernel>,
    /// The named ranges.
    pub ranges: Vec<Range>,
    /// CPU launch time (ns) per correlation id.
    pub launches: HashMap<i64, i64>,
}

/// What a trace import measured.
#[derive(Debug)]
pub struct Measured {
    /// The classified kernels.
    pub kernels: GpuKernels,
    /// GPU kernel seconds per selected range occurrence (in start order), or the whole
    /// trace's when it has no selected range holding kernels.
    pub samples: Vec<f64>,
}

/// Read and classify the trace at `path`.
pub fn measure(format: ImportFormat, path: &Path, rules: &TraceRules) -> Result<Measured, ImportError> {
    let trace = match format {
        ImportFormat::NsysSqlite => read_nsys(path)?,
        _ => read_torch(path)?,
    };
    classify(&trace, rules)
}

/// Classify `trace`'s kernels and put them in its ranges.
pub fn classify(trace: &Trace, rules: &TraceRules) -> Result<Measured, ImportError> {
    if trace.kernels.is_empty() {
        return Err(ImportError::NoKernels);
    }
    if let Some(p) = &rules.ranges
        && !trace
            .ranges
            .iter()
            .any(|r| compile(p).is_ok_and(|s| s.is_match(&r.name)))
    {
        return Err(ImportError::NoRange {
            pattern: p.clone(),
            known: distinct_names(&trace.ranges),
        });
    }
    let list = |builtin: &[&str], extra: &[String]| -> Vec<Regex> {
        extra
            .iter()
            .map(String::as_str)
            .chain(builtin.iter().copied())
            // Checked at ingress; a pattern that fails here is skipped, not a panic.
            .filter_map(|p| compile(p).ok())
            .collect()
    };
    let sparse = list(SPARSE_PATTERNS, &rules.sparse);
    let dense = list(DENSE_PATTERNS, &rules.dense);
    let select = rules.ranges.as_deref().and_then(|p| compile(p).ok());
    let class_of = |name: &str| {
        if sparse.iter().any(|r| r.is_match(name)) {
            KernelClass::Sparse
        } else if dense.iter().any(|r| r.is_match(name)) {
            KernelClass::Dense
        } else {
            KernelClass::Other
        }
    };
    let mut ranges: Vec<&Range> = trace
        .ranges
        .iter()
        .filter(|r| select.as_ref().is_none_or(|s| s.is_match(&r.name)))
        .collect();
    ranges.sort_by_key(|r| (r.start, std::cmp::Reverse(r.end)));
    let correlated = trace
        .kernels
        .iter()
        .any(|k| k.correlation.is_some_and(|c| trace.launches.contains_key(&c)));
    // Each kernel's point in time: its CPU launch where the trace links it, else its start.
    let mut points: Vec<(i64, usize)> = trace
        .kernels
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let t = k.correlation.and_then(|c| trace.launches.get(&c).copied());
            (t.unwrap_or(k.start), i)
        })
        .collect();
    points.sort_unstable();
    let mut total = KernelTimes::default();
    let mut per_occurrence: Vec<KernelTimes> = vec![KernelTimes::default(); ranges.len()];
    let mut held = vec![false; ranges.len()];
    // A sweep in time order with the stack of open ranges: a kernel goes to the innermost
    // open range that contains its point.
    let mut open: Vec<usize> = Vec::new();
    let mut next = 0;
    for (t, i) in points {
        let k = &trace.kernels[i];
        let class = class_of(&k.name);
        let s = (k.end - k.start) as f64 * 1e-9;
        if select.is_none() {
            total.add(class, s);
        }
        while next < ranges.len() && ranges[next].start <= t {
            open.push(next);
            next += 1;
        }
        while open.last().is_some_and(|&r| ranges[r].end < t) {
            open.pop();
        }
        if let Some(&r) = open.iter().rev().find(|&&r| ranges[r].end >= t) {
            per_occurrence[r].add(class, s);
            held[r] = true;
            if select.is_some() {
                total.add(class, s);
            }
        }
    }
    let mut by_name: BTreeMap<String, RangeKernels> = BTreeMap::new();
    for (r, range) in ranges.iter().enumerate() {
        let entry = by_name
            .entry(crate::ingress::checkpoint::shown(&range.name))
            .or_insert_with(|| RangeKernels {
                range: crate::ingress::checkpoint::shown(&range.name),
                occurrences: 0,
                kernels: KernelTimes::default(),
            });
        entry.occurrences += 1;
        let o = &per_occurrence[r];
        let e = &mut entry.kernels;
        (e.sparse, e.dense, e.other) = (e.sparse + o.sparse, e.dense + o.dense, e.other + o.other);
        (e.sparse_s, e.dense_s, e.other_s) = (
            e.sparse_s + o.sparse_s,
            e.dense_s + o.dense_s,
            e.other_s + o.other_s,
        );
    }
    let mut samples: Vec<f64> = (0..ranges.len())
        .filter(|&r| held[r])
        .map(|r| per_occurrence[r].total_s())
        .collect();
    if samples.is_empty() {
        samples.push(total.total_s());
    }
    Ok(Measured {
        kernels: GpuKernels {
            total,
            ranges: by_name
                .into_values()
                .filter(|r| {
                    r.kernels.total_s() > 0.0 || r.kernels.sparse + r.kernels.dense + r.kernels.other > 0
                })
                .collect(),
            attribution: if correlated { "correlation" } else { "gpu_time" }.into(),
        },
        samples,
    })
}

/// Up to 20 distinct range names, escaped, for a hint.
fn distinct_names(ranges: &[Range]) -> Vec<String> {
    let names: std::collections::BTreeSet<String> = ranges
        .iter()
        .map(|r| crate::ingress::checkpoint::shown(&r.name))
        .collect();
    names.into_iter().take(20).collect()
}

// ---- PyTorch profiler (Chrome trace JSON) ----

/// The fields of one Chrome-trace event this reader uses; the rest is skipped unread.
#[derive(Deserialize)]
struct RawEvent {
    #[serde(default)]
    ph: Option<String>,
    #[serde(default)]
    cat: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    ts: Option<f64>,
    #[serde(default)]
    dur: Option<f64>,
    #[serde(default)]
    args: Option<RawArgs>,
}

#[derive(Deserialize)]
struct RawArgs {
    #[serde(default)]
    correlation: Option<i64>,
}

/// Streams `{"traceEvents": [...]}`, keeping only kernels, ranges and launches, and stops
/// at [`MAX_TRACE_EVENTS`]: memory stays bounded by what is kept.
struct TorchSeed<'a> {
    trace: &'a mut Trace,
    problem: &'a mut Option<ImportError>,
    found: &'a mut bool,
}

impl<'de> DeserializeSeed<'de> for TorchSeed<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for TorchSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a Chrome trace object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            if key == "traceEvents" && !*self.found {
                *self.found = true;
                map.next_value_seed(EventsSeed {
                    trace: &mut *self.trace,
                    problem: &mut *self.problem,
                })?;
                if self.problem.is_some() {
                    return Err(serde::de::Error::custom("stopped"));
                }
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

struct EventsSeed<'a> {
    trace: &'a mut Trace,
    problem: &'a mut Option<ImportError>,
}

impl<'de> DeserializeSeed<'de> for EventsSeed<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EventsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of trace events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index: u64 = 0;
        while let Some(e) = seq.next_element::<RawEvent>()? {
            if index >= MAX_TRACE_EVENTS {
                *self.problem = Some(ImportError::TooManyEvents {
                    limit: MAX_TRACE_EVENTS,
                });
                return Err(serde::de::Error::custom("stopped"));
            }
            if let Err(p) = keep_event(self.trace, e, index) {
                *self.problem = Some(p);
                return Err(serde::de::Error::custom("stopped"));
            }
            index += 1;
        }
        Ok(())
    }
}

fn keep_event(trace: &mut Trace, e: RawEvent, index: u64) -> Result<(), ImportError> {
    if e.ph.as_deref() != Some("X") {
        return Ok(());
    }
    let cat = e.cat.as_deref().unwrap_or("");
    let kind = match cat {
        "kernel" | "Kernel" => 'k',
        "user_annotation" => 'r',
        "cuda_runtime" | "Runtime" => 'l',
        _ => return Ok(()),
    };
    let bad = |what: &'static str| ImportError::BadEvent { index, what };
    let ts = e.ts.filter(|t| t.is_finite()).ok_or(bad("no finite `ts`"))?;
    let dur = e.dur.filter(|t| t.is_finite()).ok_or(bad("no finite `dur`"))?;
    if dur < 0.0 {
        return Err(bad("a negative `dur`"));
    }
    // Microseconds to nanoseconds.
    let start = (ts * 1e3).round() as i64;
    let end = ((ts + dur) * 1e3).round() as i64;
    let correlation = e.args.and_then(|a| a.correlation);
    match kind {
        'k' => trace.kernels.push(Kernel {
            name: e.name.ok_or(bad("no `name`"))?,
            start,
            end,
            correlation,
        }),
        'r' => trace.ranges.push(Range {
            name: e.name.ok_or(bad("no `name`"))?,
            start,
            end,
        }),
        _ => {
            if let Some(c) = correlation {
                trace.launches.insert(c, start);
            }
        }
    }
    Ok(())
}

/// Read a PyTorch profiler Chrome trace.
pub fn read_torch(path: &Path) -> Result<Trace, ImportError> {
    use std::io::Read;
    let file = crate::files::open_regular(path).map_err(|e| ImportError::Open(e.into_io()))?;
    let len = file.metadata().map_err(ImportError::Open)?.len();
    if len > MAX_TRACE_BYTES {
        return Err(ImportError::TooLarge {
            bytes: len,
            limit: MAX_TRACE_BYTES,
        });
    }
    let reader = std::io::BufReader::new(file.take(MAX_TRACE_BYTES + 1));
    let mut trace = Trace::default();
    let mut problem = None;
    let mut found = false;
    let mut de = serde_json::Deserializer::from_reader(reader);
    let result = TorchSeed {
        trace: &mut trace,
        problem: &mut problem,
        found: &mut found,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end());
    if let Some(p) = problem {
        return Err(p);
    }
    if let Err(e) = result {
        return Err(ImportError::TraceJson {
            line: e.line(),
            column: e.column(),
            what: match e.classify() {
                serde_json::error::Category::Eof => "it ends early (truncated?)",
                serde_json::error::Category::Syntax => "a syntax error",
                serde_json::error::Category::Data => "a value of the wrong type",
                serde_json::error::Category::Io => "a read error",
            },
        });
    }
    if !found {
        return Err(ImportError::NotAnExport {
            key: "traceEvents",
            written_with: "torch.profiler's export_chrome_trace",
        });
    }
    Ok(trace)
}

// ---- Nsight Systems SQLite export ----

/// Read an Nsight Systems SQLite export.
pub fn read_nsys(path: &Path) -> Result<Trace, ImportError> {
    use rusqlite::{Connection, OpenFlags};
    // Regular file only, checked without blocking; SQLite then opens it read-only.
    drop(crate::files::open_regular(path).map_err(|e| ImportError::Open(e.into_io()))?);
    let db = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sql)?;
    let has_table = |name: &str| -> Result<bool, ImportError> {
        db.query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [name],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n > 0)
        .map_err(sql)
    };
    for table in ["CUPTI_ACTIVITY_KIND_KERNEL", "StringIds"] {
        if !has_table(table)? {
            return Err(ImportError::MissingTable { table });
        }
    }
    let nvtx = has_table("NVTX_EVENTS")?;
    let runtime = has_table("CUPTI_ACTIVITY_KIND_RUNTIME")?;
    let count = |table: &str| -> Result<u64, ImportError> {
        db.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| {
            r.get::<_, i64>(0)
        })
        .map(|n| n.max(0) as u64)
        .map_err(sql)
    };
    let mut events = count("CUPTI_ACTIVITY_KIND_KERNEL")?;
    if nvtx {
        events += count("NVTX_EVENTS")?;
    }
    if runtime {
        events += count("CUPTI_ACTIVITY_KIND_RUNTIME")?;
    }
    if events > MAX_TRACE_EVENTS {
        return Err(ImportError::TooManyEvents {
            limit: MAX_TRACE_EVENTS,
        });
    }
    let mut trace = Trace::default();
    let mut stmt = db
        .prepare(
            "SELECT k.start, k.end, k.correlationId, COALESCE(d.value, s.value) \
             FROM CUPTI_ACTIVITY_KIND_KERNEL k \
             LEFT JOIN StringIds d ON d.id = k.demangledName \
             LEFT JOIN StringIds s ON s.id = k.shortName",
        )
        .map_err(sql)?;
    let mut rows = stmt.query([]).map_err(sql)?;
    let mut index = 0;
    while let Some(row) = rows.next().map_err(sql)? {
        let bad = |what: &'static str| ImportError::BadEvent { index, what };
        let start: i64 = row
            .get(0)
            .map_err(|_| bad("a kernel `start` that is not an integer"))?;
        let end: i64 = row
            .get(1)
            .map_err(|_| bad("a kernel `end` that is not an integer"))?;
        if end < start {
            return Err(bad("a kernel that ends before it starts"));
        }
        let name: Option<String> = row.get(3).map_err(|_| bad("a kernel name that is not text"))?;
        trace.kernels.push(Kernel {
            name: name.ok_or(bad("a kernel name id missing from StringIds"))?,
            start,
            end,
            correlation: row.get(2).ok(),
        });
        index += 1;
    }
    if nvtx {
        // 59: push/pop range, 60: start/end range.
        let mut stmt = db
            .prepare(
                "SELECT n.start, n.end, COALESCE(n.text, s.value) FROM NVTX_EVENTS n \
                 LEFT JOIN StringIds s ON s.id = n.textId \
                 WHERE n.eventType IN (59, 60) AND n.end IS NOT NULL",
            )
            .map_err(sql)?;
        let mut rows = stmt.query([]).map_err(sql)?;
        while let Some(row) = rows.next().map_err(sql)? {
            let bad = |what: &'static str| ImportError::BadEvent { index, what };
            let start: i64 = row
                .get(0)
                .map_err(|_| bad("an NVTX `start` that is not an integer"))?;
            let end: i64 = row
                .get(1)
                .map_err(|_| bad("an NVTX `end` that is not an integer"))?;
            if end < start {
                return Err(bad("an NVTX range that ends before it starts"));
            }
            let name: Option<String> = row.get(2).unwrap_or(None);
            if let Some(name) = name {
                trace.ranges.push(Range { name, start, end });
            }
            index += 1;
        }
    }
    if runtime {
        let mut stmt = db
            .prepare("SELECT start, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME")
            .map_err(sql)?;
        let mut rows = stmt.query([]).map_err(sql)?;
        while let Some(row) = rows.next().map_err(sql)? {
            if let (Ok(start), Ok(c)) = (row.get::<_, i64>(0), row.get::<_, i64>(1)) {
                trace.launches.insert(c, start);
            }
        }
    }
    Ok(trace)
}

fn sql(e: rusqlite::Error) -> ImportError {
    ImportError::Sqlite(
        e.sqlite_error_code()
            .map_or_else(|| "a query failed".to_owned(), |c| format!("{c:?}")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixture(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/import")
            .join(name)
    }

    fn k(name: &str, start: i64, end: i64, correlation: Option<i64>) -> Kernel {
        Kernel {
            name: name.into(),
            start,
            end,
            correlation,
        }
    }

    #[test]
    fn builtin_patterns_classify_known_kernel_names() {
        let trace = Trace {
            kernels: vec![
                k(
                    "sm80_xmma_sparse_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x64",
                    0,
                    10,
                    None,
                ),
                k(
                    "cutlass_80_tensorop_f16_s16816gemm_sparse_f16_128x128_64x3_tn_align8",
                    10,
                    20,
                    None,
                ),
                k(
                    "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64",
                    20,
                    50,
                    None,
                ),
                k("ampere_sgemm_128x64_tn", 50, 60, None),
                k("void at::native::vectorized_elementwise_kernel<4>", 60, 100, None),
            ],
            ..Trace::default()
        };
        let m = classify(&trace, &TraceRules::default()).unwrap();
        let t = &m.kernels.total;
        assert_eq!((t.sparse, t.dense, t.other), (2, 2, 1));
        // 40 ns dense of 60 ns GEMM.
        assert!((t.fallback_rate().unwrap() - 40.0 / 60.0).abs() < 1e-12);
        assert_eq!(m.samples.len(), 1);
        assert!((m.samples[0] - 100e-9).abs() < 1e-18);
    }

    #[test]
    fn pack_patterns_extend_the_builtin_ones() {
        let trace = Trace {
            kernels: vec![k("my_24_kernel", 0, 10, None), k("my_dense_mm", 10, 30, None)],
            ..Trace::default()
        };
        let rules = TraceRules {
            sparse: vec!["my_24".into()],
            dense: vec!["_mm$".into()],
            ranges: None,
        };
        let t = classify(&trace, &rules).unwrap().kernels.total;
        assert_eq!((t.sparse, t.dense, t.other), (1, 1, 0));
        let t = classify(&trace, &TraceRules::default()).unwrap().kernels.total;
        assert_eq!(t.other, 2);
        assert_eq!(t.fallback_rate(), None);
    }

    #[test]
    fn kernels_go_to_the_innermost_range_of_their_launch_or_their_start() {
        let range = |name: &str, start, end| Range {
            name: name.into(),
            start,
            end,
        };
        let mut trace = Trace {
            kernels: vec![k("sparse_gemm", 500, 600, Some(1)), k("sgemm", 700, 800, Some(2))],
            ranges: vec![
                range("step", 0, 300),
                range("layer0", 10, 100),
                range("layer1", 100, 200),
            ],
            launches: HashMap::from([(1, 50), (2, 150)]),
        };
        let m = classify(&trace, &TraceRules::default()).unwrap();
        assert_eq!(m.kernels.attribution, "correlation");
        let names: Vec<_> = m
            .kernels
            .ranges
            .iter()
            .map(|r| (r.range.as_str(), r.kernels.sparse, r.kernels.dense))
            .collect();
        assert_eq!(names, [("layer0", 1, 0), ("layer1", 0, 1)]);
        // Selecting `step` only: both kernels in one occurrence, one sample.
        let rules = TraceRules {
            ranges: Some("^step$".into()),
            ..TraceRules::default()
        };
        let m = classify(&trace, &rules).unwrap();
        assert_eq!(m.samples.len(), 1);
        assert_eq!(
            m.kernels.ranges[0].kernels.sparse + m.kernels.ranges[0].kernels.dense,
            2
        );
        // Without launches, the GPU start time decides.
        trace.launches.clear();
        trace.ranges.push(range("late", 450, 650));
        let m = classify(&trace, &TraceRules::default()).unwrap();
        assert_eq!(m.kernels.attribution, "gpu_time");
        assert_eq!(m.kernels.ranges[0].range, "late");
        assert_eq!(m.kernels.ranges[0].kernels.sparse, 1);
    }

    #[test]
    fn issue_21_torch_fixture_shows_one_layer_sparse_and_one_fallen_back() {
        let m = measure(
            ImportFormat::TorchProfiler,
            &fixture("torch_trace.json"),
            &TraceRules::default(),
        )
        .unwrap();
        check_story(&m);
        assert_eq!(m.kernels.attribution, "correlation");
    }

    #[test]
    fn issue_21_nsys_fixture_tells_the_same_story() {
        let m = measure(
            ImportFormat::NsysSqlite,
            &fixture("nsys_trace.sqlite"),
            &TraceRules::default(),
        )
        .unwrap();
        check_story(&m);
    }

    /// A PyTorch-profiler trace from a real H200 run (issue 25, benches/gpu/h200_measure.py):
    /// one LLaMA projection (16 tokens × 4096 × 4096, fp16) ten times as 2:4 (cuSPARSELt)
    /// and ten times dense (cuBLAS), each in its own `record_function` range.
    #[test]
    fn issue_25_the_real_h200_trace_shows_the_sparse_kernel_ran_and_names_cublas_nvjet_dense() {
        let m = measure(
            ImportFormat::TorchProfiler,
            &fixture("torch_trace_h200.json"),
            &TraceRules::default(),
        )
        .unwrap();
        let by: BTreeMap<&str, &RangeKernels> =
            m.kernels.ranges.iter().map(|r| (r.range.as_str(), r)).collect();
        let (sparse, dense) = (by["layer0_sparse"], by["layer0_dense"]);
        // cuSPARSELt's `sm90_xmma_sparse_gemm_f16f16_...` alone in the sparse range.
        assert_eq!(
            (sparse.occurrences, sparse.kernels.sparse, sparse.kernels.dense),
            (10, 10, 0)
        );
        assert_eq!(sparse.kernels.other, 0);
        // cuBLAS: an `nvjet_sm90_hsh_...` split-K GEMM and its `cublasLt::splitKreduce_kernel`.
        assert_eq!(
            (dense.occurrences, dense.kernels.sparse, dense.kernels.dense),
            (10, 0, 20)
        );
        assert_eq!(dense.kernels.other, 0, "nvjet is a dense GEMM, not 'other'");
        // Measured on the chip: the 2:4 kernel took 33 us a call, the dense pair 15 us.
        let s_us = sparse.kernels.sparse_s / 10.0 * 1e6;
        let d_us = dense.kernels.dense_s / 10.0 * 1e6;
        assert!(
            (25.0..45.0).contains(&s_us) && (10.0..20.0).contains(&d_us),
            "{s_us} {d_us}"
        );
        let rate = m.kernels.total.fallback_rate().unwrap();
        assert!((rate - 0.31).abs() < 0.02, "dense share of GEMM time {rate}");
    }

    fn check_story(m: &Measured) {
        let by: BTreeMap<&str, &RangeKernels> =
            m.kernels.ranges.iter().map(|r| (r.range.as_str(), r)).collect();
        let l0 = by["layer0"];
        let l1 = by["layer1"];
        assert_eq!((l0.occurrences, l0.kernels.sparse, l0.kernels.dense), (4, 4, 0));
        assert_eq!((l1.occurrences, l1.kernels.sparse, l1.kernels.dense), (4, 0, 4));
        let rate = m.kernels.total.fallback_rate().unwrap();
        assert!(rate > 0.5 && rate < 1.0, "{rate}");
    }

    #[test]
    fn malformed_traces_are_refused_with_what_is_wrong() {
        let err = |f: ImportFormat, name: &str| {
            measure(f, &fixture(name), &TraceRules::default())
                .unwrap_err()
                .to_string()
        };
        let e = err(ImportFormat::TorchProfiler, "torch_truncated.json");
        assert!(e.contains("ends early"), "{e}");
        let e = err(ImportFormat::TorchProfiler, "torch_negative_dur.json");
        assert!(e.contains("negative `dur`"), "{e}");
        let e = err(ImportFormat::NsysSqlite, "nsys_no_kernels_table.sqlite");
        assert!(e.contains("CUPTI_ACTIVITY_KIND_KERNEL"), "{e}");
        let e = err(ImportFormat::NsysSqlite, "torch_trace.json");
        assert!(e.contains("SQLite"), "{e}");
    }
}
