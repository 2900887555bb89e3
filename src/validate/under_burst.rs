//! "Regresses only under burst" (issue 24): the same workload, at the same mean arrival
//! rate, holds its guardrails when requests arrive steadily (or as a Poisson process) and
//! fails them when they arrive in bursts. Found here, once, as data; the memo only shows
//! it. The two slices are found by what they run, not by how they are named, so a load
//! matrix (`load: [{arrivals: steady, ...}, {arrivals: bursts, ...}]`) and two hand-written
//! slices with the same workload both qualify.

use super::GuardrailOutcome;
use super::contradictions::failed;
use crate::domain::OfSlice;
use crate::domain::metric::Metric;
use crate::domain::verdict::Verdict;
use crate::ingress::Slice;
use serde::{Deserialize, Serialize};

/// A slice that fails under bursts while its steady (or Poisson) sibling at the same mean
/// rate passes the same guardrails.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BurstRegression {
    /// Pack name.
    pub pack: String,
    /// The slice served under bursts, which failed.
    pub slice: String,
    /// Requests per burst.
    pub burst: u32,
    /// The mean arrival rate both slices were offered, requests per second.
    pub rate_hz: f64,
    /// The sibling served at that rate without bursts, which held.
    pub holds_in: String,
    /// How requests arrived there: `steady` or `poisson`.
    pub holds_under: String,
    /// The metrics whose guardrails failed under bursts and passed in the sibling.
    pub metrics: Vec<Metric>,
}

/// Whether two slices run the same thing apart from their arrival pattern: same pack,
/// ops, sparsity, precision and backend (preset, command), and the same mean rate.
fn same_but_arrivals(a: &Slice, b: &Slice) -> bool {
    let rate = |s: &Slice| s.load.map(|l| l.arrivals.rate_per_s());
    let (Some(ra), Some(rb)) = (rate(a), rate(b)) else {
        return false;
    };
    a.pack == b.pack
        && a.id != b.id
        && a.ops == b.ops
        && a.sparsity == b.sparsity
        && a.precision == b.precision
        && a.backend == b.backend
        && (ra - rb).abs() <= 1e-9 * ra.abs().max(rb.abs())
}

/// Every slice that regresses only under burst, in slice order (first sibling that holds).
pub fn regressions_under_burst(slices: &[Slice], outcomes: &[GuardrailOutcome]) -> Vec<BurstRegression> {
    let of = |s: &Slice| -> Vec<&GuardrailOutcome> { outcomes.iter().filter(|g| g.same_slice(s)).collect() };
    let mut found = Vec::new();
    for bursty in slices {
        let Some(burst) = bursty.load.and_then(|l| l.arrivals.burst()) else {
            continue;
        };
        let failing: Vec<&GuardrailOutcome> = of(bursty).into_iter().filter(|g| failed(g)).collect();
        if failing.is_empty() {
            continue;
        }
        let sibling = slices
            .iter()
            .filter(|s| s.load.is_some_and(|l| l.arrivals.burst().is_none()))
            .filter(|s| same_but_arrivals(bursty, s))
            .find_map(|s| {
                let theirs = of(s);
                if theirs.iter().any(|g| failed(g)) {
                    return None;
                }
                // The same rule over the same metric held there.
                let metrics: Vec<Metric> = failing
                    .iter()
                    .filter(|f| {
                        theirs
                            .iter()
                            .any(|g| g.metric == f.metric && g.rule == f.rule && g.verdict == Verdict::Pass)
                    })
                    .map(|f| f.metric)
                    .collect();
                (!metrics.is_empty()).then_some((s, metrics))
            });
        if let Some((steady, metrics)) = sibling {
            found.push(BurstRegression {
                pack: bursty.pack.clone(),
                slice: bursty.id.clone(),
                burst,
                rate_hz: bursty.load.map_or(0.0, |l| l.arrivals.rate_per_s()),
                holds_in: steady.id.clone(),
                holds_under: steady.load.map_or("steady", |l| l.arrivals.pattern()).to_owned(),
                metrics,
            });
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Arrivals;
    use crate::ingress::{LoadPlan, Rule, Severity};
    use crate::validate::tests::{evidence, guard, slice, slice_ev, sparse_plan};
    use crate::validate::{AssessOptions, assess_with};

    fn served(id: &str, arrivals: Arrivals) -> Slice {
        Slice {
            id: id.into(),
            load: Some(LoadPlan {
                arrivals,
                queue: 8,
                requests: 700,
                matrix: true,
            }),
            ..slice(
                id,
                vec![guard(
                    Metric::LatencyP99,
                    Rule::AtMost { bound: 0.01 },
                    Severity::Block,
                )],
            )
        }
    }

    /// The p99 guardrail's outcome on `s`, with the verdict and detail given.
    fn outcome(s: &Slice, verdict: Verdict, detail: &str) -> GuardrailOutcome {
        let ev = slice_ev(&s.id, vec![("latency", vec![1e-3; 700])], vec![], sparse_plan());
        let mut o = assess_with(
            std::slice::from_ref(s),
            &evidence(vec![ev]),
            &Default::default(),
            &AssessOptions { resamples: 100 },
        )
        .outcomes[0]
            .clone();
        o.verdict = verdict;
        o.finding = verdict;
        o.detail = detail.into();
        o
    }

    const BURSTS: Arrivals = Arrivals::Bursts {
        rate_per_s: 100.0,
        size: 16,
    };

    #[test]
    fn a_slice_that_holds_steady_but_fails_bursts_regresses_only_under_burst() {
        // Issue 24: the seeds' worked example.
        let steady = served("w-steady", Arrivals::Steady { rate_per_s: 100.0 });
        let bursts = served("w-bursts", BURSTS);
        let outcomes = [
            outcome(&steady, Verdict::Pass, "p99 0.001 <= 0.01: pass"),
            outcome(&bursts, Verdict::Fail, "p99 0.02 > 0.01: fail"),
        ];
        let found = regressions_under_burst(&[steady.clone(), bursts.clone()], &outcomes);
        assert_eq!(
            found,
            vec![BurstRegression {
                pack: bursts.pack.clone(),
                slice: "w-bursts".into(),
                burst: 16,
                rate_hz: 100.0,
                holds_in: "w-steady".into(),
                holds_under: "steady".into(),
                metrics: vec![Metric::LatencyP99],
            }]
        );
    }

    #[test]
    fn no_burst_call_out_when_steady_also_fails_is_inconclusive_or_the_rate_differs() {
        let steady = served("w-steady", Arrivals::Poisson { rate_per_s: 100.0 });
        let bursts = served("w-bursts", BURSTS);
        let with = |steady_verdict: Verdict, bursts_verdict: Verdict, slices: &[Slice]| {
            let outcomes = [
                outcome(&slices[0], steady_verdict, "p99: x"),
                outcome(&slices[1], bursts_verdict, "p99: x"),
            ];
            regressions_under_burst(slices, &outcomes)
        };
        let pair = [steady.clone(), bursts.clone()];
        assert!(with(Verdict::Fail, Verdict::Fail, &pair).is_empty());
        assert!(with(Verdict::Inconclusive, Verdict::Fail, &pair).is_empty());
        assert!(with(Verdict::Pass, Verdict::Inconclusive, &pair).is_empty());
        assert_eq!(with(Verdict::Pass, Verdict::Fail, &pair).len(), 1);
        let faster = served("w-steady", Arrivals::Steady { rate_per_s: 50.0 });
        assert!(with(Verdict::Pass, Verdict::Fail, &[faster, bursts]).is_empty());
    }
}
