//! What a guardrail's metric looks like in the evidence (or in a baseline): a sample to
//! summarise by a quantile, or a point value (a counter).

use crate::domain::{Counters, KeyedMap, Metric, Series};
use crate::execute::MetricSamples;

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

/// Why a metric has no value to judge: said in the guardrail's detail, never a panic.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum Unobserved {
    /// The evidence has no samples of this name.
    #[error("no `{0}` samples")]
    NoSamples(&'static str),
    /// The samples are there but empty.
    #[error("`{0}` has no samples")]
    EmptySamples(&'static str),
    /// A sample is NaN or infinite.
    #[error("`{name}` holds a non-finite sample ({value})")]
    NonFiniteSample {
        /// The samples' name.
        name: &'static str,
        /// The first such value.
        value: f64,
    },
    /// The counter is NaN or infinite.
    #[error("counter `{name}` is not finite ({value})")]
    NonFiniteCounter {
        /// The counter's name.
        name: &'static str,
        /// Its value.
        value: f64,
    },
    /// The evidence has no counter of this name.
    #[error("no `{0}` counter")]
    NoCounter(&'static str),
    /// Neither samples nor a counter of the metric.
    #[error("no `{0}` samples or counter in the evidence")]
    Missing(Metric),
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
    metrics: &KeyedMap<Series, MetricSamples>,
    counters: &Counters,
    plan_fallback: Option<f64>,
) -> Result<Observed, Unobserved> {
    let sampled = |metric: Metric, q: f64| -> Result<Observed, Unobserved> {
        let name = metric.name();
        let m = metrics.get(metric).ok_or(Unobserved::NoSamples(name))?;
        if m.samples.is_empty() {
            return Err(Unobserved::EmptySamples(name));
        }
        if let Some(&value) = m.samples.iter().find(|v| !v.is_finite()) {
            return Err(Unobserved::NonFiniteSample { name, value });
        }
        Ok(Observed::Sampled {
            samples: m.samples.clone(),
            runs: m.runs.clone(),
            q,
        })
    };
    let counter = |metric: Metric| -> Result<Observed, Unobserved> {
        let name = metric.name();
        match counters.get(metric) {
            Some(v) if v.is_finite() => Ok(Observed::Point(*v)),
            Some(&value) => Err(Unobserved::NonFiniteCounter { name, value }),
            None => Err(Unobserved::NoCounter(name)),
        }
    };
    match metric {
        Metric::LatencyP50 => sampled(Metric::Latency, 0.5),
        Metric::LatencyP95 => sampled(Metric::Latency, 0.95),
        Metric::LatencyP99 => sampled(Metric::Latency, 0.99),
        Metric::FallbackRate => {
            counter(Metric::FallbackRate).or_else(|e| plan_fallback.map(Observed::Point).ok_or(e))
        }
        Metric::MetadataOverhead => counter(Metric::MetadataOverhead),
        m if metrics.contains(m) => sampled(m, 0.5),
        m => counter(m).map_err(|_| Unobserved::Missing(m)),
    }
}
