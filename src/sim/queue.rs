//! Requests under load: a discrete-event simulation of one simulated accelerator serving a
//! stream of requests FIFO, each taking the model's service time (throttling included), so
//! tail latency (p50/p95/p99) reflects queueing, not just the kernel.
//!
//! How many requests a tail estimate needs follows MLPerf LoadGen's early stopping
//! (research `stat-gating-anchors.md` §9): with `t` requests over the latency bound among
//! `h + t`, the estimate is trusted when `I_p(h, t + 1) ≤ 1 − confidence` (a one-sided
//! binomial bound), which gives LoadGen's 64 requests for p90 and 662 for p99 at t = 1.

pub use crate::domain::arrivals::{Arrivals, arrival_times, parse_arrivals};
use serde::Serialize;

/// Latency distribution of a simulated load run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, schemars::JsonSchema)]
pub struct QueueReport {
    /// Requests simulated.
    pub requests: u64,
    /// Median latency (nearest-rank order statistic `ceil(q·n)`), seconds.
    pub p50_s: f64,
    /// 95th percentile, nearest rank.
    pub p95_s: f64,
    /// 99th percentile, nearest rank.
    pub p99_s: f64,
    /// Mean latency.
    pub mean_s: f64,
    /// Busy time / makespan.
    pub utilisation: f64,
    /// Most requests waiting at once.
    pub max_queue: u64,
    /// Requests LoadGen's early stopping needs for a p99 claim at 99% confidence (t = 1).
    pub p99_min_requests: u64,
    /// Whether `requests` reaches `p99_min_requests`.
    pub p99_trustworthy: bool,
}

/// Simulate `requests` requests of `service_s` seconds each arriving per `arrivals`; seeded
/// and single-threaded, so bit-identical for the same inputs.
pub fn simulate(service_s: f64, arrivals: Arrivals, requests: u64, seed: u64) -> QueueReport {
    let mut latencies = Vec::with_capacity(requests as usize);
    let mut server_free = 0.0f64;
    let mut completions: std::collections::VecDeque<f64> = std::collections::VecDeque::new();
    let mut max_queue = 0u64;
    for t_arrival in arrival_times(arrivals, requests, seed) {
        while completions.front().is_some_and(|&c| c <= t_arrival) {
            completions.pop_front();
        }
        let start = server_free.max(t_arrival);
        server_free = start + service_s;
        completions.push_back(server_free);
        max_queue = max_queue.max(completions.len() as u64);
        latencies.push(server_free - t_arrival);
    }
    let mean_s = latencies.iter().sum::<f64>() / latencies.len().max(1) as f64;
    latencies.sort_by(f64::total_cmp);
    let q = |p: f64| -> f64 {
        if latencies.is_empty() {
            return 0.0;
        }
        let rank = (p * latencies.len() as f64).ceil().max(1.0) as usize;
        latencies[rank.min(latencies.len()) - 1]
    };
    let p99_min_requests = early_stopping_min_requests(0.99, 0.99, 1);
    QueueReport {
        requests,
        p50_s: q(0.5),
        p95_s: q(0.95),
        p99_s: q(0.99),
        mean_s,
        utilisation: if server_free > 0.0 {
            requests as f64 * service_s / server_free
        } else {
            0.0
        },
        max_queue,
        p99_min_requests,
        p99_trustworthy: requests >= p99_min_requests,
    }
}

/// Fewest requests `h + t` for which LoadGen's early stopping accepts a `percentile`
/// estimate at `confidence` with `t` requests over the bound: the smallest `h` with
/// `I_p(h, t + 1) ≤ 1 − confidence` (regularised incomplete beta), plus `t`.
pub fn early_stopping_min_requests(percentile: f64, confidence: f64, t: u64) -> u64 {
    let fails =
        |h: u64| statrs::function::beta::beta_reg(h as f64, t as f64 + 1.0, percentile) > 1.0 - confidence;
    let (mut lo, mut hi) = (1u64, 1u64 << 40);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if fails(mid) { lo = mid + 1 } else { hi = mid }
    }
    lo + t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_4_early_stopping_matches_loadgen_minimums() {
        // stat-gating-anchors §9: at least 64 queries for p90 and 662 for p99.
        assert_eq!(early_stopping_min_requests(0.90, 0.99, 1), 64);
        assert_eq!(early_stopping_min_requests(0.99, 0.99, 1), 662);
    }

    #[test]
    fn issue_4_queueing_adds_tail_latency_under_load() {
        let service = 1e-3;
        let light = simulate(service, Arrivals::Steady { rate_per_s: 100.0 }, 1000, 1);
        assert!((light.p99_s - service).abs() < 1e-12, "{light:?}");
        let poisson = simulate(service, Arrivals::Poisson { rate_per_s: 800.0 }, 5000, 7);
        assert!(
            poisson.p99_s > 3.0 * service && poisson.p50_s < poisson.p99_s,
            "{poisson:?}"
        );
        assert!(poisson.p99_trustworthy);
        let bursts = simulate(
            service,
            Arrivals::Bursts {
                rate_per_s: 100.0,
                size: 10,
            },
            1000,
            1,
        );
        // The 10th request of a burst waits for the nine before it.
        assert!((bursts.p99_s - 10.0 * service).abs() < 1e-12, "{bursts:?}");
        assert_eq!(
            poisson,
            simulate(service, Arrivals::Poisson { rate_per_s: 800.0 }, 5000, 7)
        );
    }
}
