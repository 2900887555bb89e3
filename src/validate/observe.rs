//! What a guardrail's metric looks like in the evidence (or in a baseline): a sample to
//! summarise by a quantile, or a point value (a counter).

use crate::domain::metric::Metric;
use crate::execute::MetricSamples;
use std::collections::BTreeMap;

/// A metric as measured.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Observed {
    /// Raw samples, judged by their `q`-quantile (0.5: the median).
    Sampled {
        /// The values.
        samples: Vec<f64>,
        /// The run each value came from (may be empty or mismatched in hand-made files).
        runs: Vec<u32>,
        /// Which quantile the rule is about.
        q: f64,
    },
    /// A property of the run with no sampling error (`fallback_rate`, …).
    Point(f64),
}

impl Observed {
    /// The statistic's name for sentences: `median`, `p95`, `value`.
    pub(crate) fn statistic(&self) -> String {
        match self {
            Observed::Sampled { q, .. } if *q == 0.5 => "median".into(),
            Observed::Sampled { q, .. } => format!("p{}", (q * 100.0).round()),
            Observed::Point(_) => "value".into(),
        }
    }
}

/// Where the metric comes from:
/// - `latency_p50|p95|p99`: that quantile of the `latency` samples;
/// - `fallback_rate`, `metadata_overhead`: the counters (`fallback_rate` falls back to
///   `plan_fallback`, the plan's share of fallback ops, when the counter is absent);
/// - everything else (`latency`, `throughput_gflops`, `effective_speedup`, …): the median
///   of its samples, else a counter of the same name.
///
/// The error is a reason for the memo; it never panics on malformed evidence.
pub(crate) fn observe(
    metric: Metric,
    metrics: &BTreeMap<String, MetricSamples>,
    counters: &BTreeMap<String, f64>,
    plan_fallback: Option<f64>,
) -> Result<Observed, String> {
    let sampled = |name: &str, q: f64| -> Result<Observed, String> {
        let m = metrics.get(name).ok_or_else(|| format!("no `{name}` samples"))?;
        if m.samples.is_empty() {
            return Err(format!("`{name}` has no samples"));
        }
        if let Some(bad) = m.samples.iter().find(|v| !v.is_finite()) {
            return Err(format!("`{name}` holds a non-finite sample ({bad})"));
        }
        Ok(Observed::Sampled {
            samples: m.samples.clone(),
            runs: m.runs.clone(),
            q,
        })
    };
    let counter = |name: &str| -> Result<Observed, String> {
        match counters.get(name) {
            Some(v) if v.is_finite() => Ok(Observed::Point(*v)),
            Some(v) => Err(format!("counter `{name}` is not finite ({v})")),
            None => Err(format!("no `{name}` counter")),
        }
    };
    match metric {
        Metric::LatencyP50 => sampled("latency", 0.5),
        Metric::LatencyP95 => sampled("latency", 0.95),
        Metric::LatencyP99 => sampled("latency", 0.99),
        Metric::FallbackRate => {
            counter("fallback_rate").or_else(|e| plan_fallback.map(Observed::Point).ok_or(e))
        }
        Metric::MetadataOverhead => counter("metadata_overhead"),
        m if metrics.contains_key(m.name()) => sampled(m.name(), 0.5),
        m => counter(m.name()).map_err(|_| format!("no `{}` samples or counter in the evidence", m.name())),
    }
}
