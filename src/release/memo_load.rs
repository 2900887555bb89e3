//! What the memo shows of a slice served under load (issue 24): the traffic it was offered
//! (arrival pattern, mean rate, burst size, queue bound, requests), what became of it
//! (served, dropped, `drop_rate`, the request-latency tail) and validation's finding that it
//! regresses only under burst. Data only; `memo.deployment.*.j2` renders it.

use crate::domain::{Counter, Metric};
use crate::execute::SliceEvidence;
use crate::validate::BurstRegression;
use serde::{Deserialize, Serialize};

/// A load slice's traffic and outcome, as the memo shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemoLoad {
    /// How requests arrived: `steady`, `poisson` or `bursts`.
    pub arrivals: String,
    /// Mean arrival rate, requests per second.
    pub rate_hz: f64,
    /// Requests per burst (`bursts` only).
    pub burst: Option<u32>,
    /// Most requests in the system at once; arrivals beyond it were dropped.
    pub queue: u32,
    /// Requests offered.
    pub requests: u64,
    /// Requests served (absent when the slice did not run).
    pub served: Option<u64>,
    /// Requests dropped because the queue was full.
    pub dropped: Option<u64>,
    /// Dropped / offered.
    pub drop_rate: Option<f64>,
    /// 99th percentile of the served requests' latency (nearest rank), seconds.
    pub p99_s: Option<f64>,
    /// Set when this slice fails under bursts while a sibling at the same mean rate holds.
    pub regresses_only_under_burst: Option<BurstRegression>,
}

/// The memo's view of `s`'s load, if it ran under one.
pub(crate) fn memo_load(s: &SliceEvidence, under_burst: &[BurstRegression]) -> Option<MemoLoad> {
    let load = s.load?;
    let count = |c: Counter| s.counters.value(c).map(|v| v.max(0.0).round() as u64);
    let p99_s = s.metrics.get(Metric::Latency).and_then(|m| {
        let mut v = m.samples.clone();
        v.sort_by(f64::total_cmp);
        let rank = (0.99 * v.len() as f64).ceil().max(1.0) as usize;
        v.get(rank.min(v.len()).checked_sub(1)?).copied()
    });
    Some(MemoLoad {
        arrivals: load.arrivals.pattern().to_owned(),
        rate_hz: load.arrivals.rate_per_s(),
        burst: load.arrivals.burst(),
        queue: load.queue,
        requests: load.requests,
        served: count(Counter::Served),
        dropped: count(Counter::Dropped),
        drop_rate: s.counters.value(Metric::DropRate),
        p99_s,
        regresses_only_under_burst: under_burst
            .iter()
            .find(|b| b.pack == s.pack && b.slice == s.slice)
            .cloned(),
    })
}
