//! Latency under load on the CPU backend: the slice's workload served as requests that
//! arrive at a target rate (steady, Poisson or bursts, seeded, from the same arrival model
//! as the simulator's queue, `sim::queue`) through a bounded FIFO queue with one server.
//! A request's latency is its completion minus its *scheduled* arrival, so time spent
//! queued behind earlier requests counts, as a user would see it; an arrival that finds
//! `queue` requests already in the system is dropped and counted. Bursts are where this
//! differs from back-to-back timing: the same mean rate that a steady stream absorbs makes
//! the last request of every burst wait for all the ones before it.

use super::error::ExecError;
use super::evidence::{MetricSamples, SliceEvidence};
use super::run::{OnProgress, Phase, RunProgress, worker_pool};
use super::workload::Workload;
use crate::domain::{Counter, Metric};
use crate::ingress::{LoadPlan, Slice};
use crate::lower::Plan;
use crate::sim::queue::{arrival_times, early_stopping_min_requests};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Sleep (rather than spin) while the next arrival is further away than this: a loaded
/// machine wakes a sleeper late, and lateness would count as request latency.
const SPIN_BELOW: Duration = Duration::from_millis(1);

/// The serving loop says where it stands at most this often (issue 24), so that telling
/// never costs the measured requests more than a clock read.
const TICK_EVERY: Duration = Duration::from_millis(250);

/// What one serving loop observed.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadOutcome {
    /// Latency of every served request (seconds, queueing included), in arrival order.
    pub latencies: Vec<f64>,
    /// Requests offered.
    pub requests: u64,
    /// Arrivals that found the queue full.
    pub dropped: u64,
    /// Served requests that arrived while another was in the system (they queued).
    pub queued: u64,
    /// Most requests in the system at once (the arriving one included).
    pub max_in_system: u64,
    /// Median service time of one request, seconds.
    pub service_s: f64,
}

/// Serve `slice`'s workload under its `load` and record request latencies; `on_progress`
/// hears how many requests have been served while the loop runs.
pub fn execute_load_slice(
    slice: &Slice,
    load: LoadPlan,
    plan: &Plan,
    on_progress: Option<&mut OnProgress<'_>>,
) -> SliceEvidence {
    let start = Instant::now();
    let mut evidence = SliceEvidence::empty(slice, plan);
    evidence
        .counters
        .insert(Metric::FallbackRate, plan.fallback_rate());
    let outcome = measure(slice, load, plan, &mut evidence, on_progress);
    evidence.finish(outcome, start)
}

fn measure(
    slice: &Slice,
    load: LoadPlan,
    plan: &Plan,
    evidence: &mut SliceEvidence,
    on_progress: Option<&mut OnProgress<'_>>,
) -> Result<(), ExecError> {
    if plan.ops.is_empty() {
        return Err(ExecError::NoOps);
    }
    let started = Instant::now();
    let pool = worker_pool(slice)?;
    let mut work = Workload::prepare(slice, plan)?;
    let (value_bytes, metadata_bytes) = work.sparse_bytes();
    let overhead = if value_bytes == 0 {
        0.0
    } else {
        metadata_bytes as f64 / value_bytes as f64
    };
    evidence.counters.insert(Metric::MetadataOverhead, overhead);
    let warmup = slice.samples.warmup;
    // The loop runs on the worker pool, where the caller's (not `Send`) progress callback
    // cannot go: it sends its ticks here instead, and this thread tells the caller while
    // the loop runs on another.
    let (ticks, told) = std::sync::mpsc::channel::<Phase>();
    let outcome = std::thread::scope(|scope| {
        let serving = scope.spawn(|| {
            pool.install(move || -> Result<LoadOutcome, ExecError> {
                // Correct before fast: the same check as the back-to-back protocol.
                work.run_candidate()?;
                work.run_comparator()?;
                work.check()?;
                for _ in 0..warmup {
                    work.run_candidate()?;
                }
                let tick = |phase| {
                    let _ = ticks.send(phase);
                };
                Ok(serve(load, slice.seed, || work.run_candidate(), tick)?)
            })
        });
        let mut on_progress = on_progress;
        for phase in told {
            if let Some(tell) = on_progress.as_deref_mut() {
                tell(RunProgress {
                    phase,
                    elapsed_s: started.elapsed().as_secs_f64(),
                });
            }
        }
        serving.join()
    });
    let outcome = match outcome {
        Ok(outcome) => outcome?,
        Err(panic) => std::panic::resume_unwind(panic),
    };
    evidence.warmup_iterations = warmup;
    record(load, &outcome, evidence)
}

/// Record what a serving loop observed: the request counts, `drop_rate` (dropped /
/// offered, issue 24) and every served request's latency as the `latency` samples. Fails
/// when the queue turned every request away.
pub(crate) fn record(
    load: LoadPlan,
    outcome: &LoadOutcome,
    evidence: &mut SliceEvidence,
) -> Result<(), ExecError> {
    let counters = &mut evidence.counters;
    counters.insert(Counter::Requests, outcome.requests as f64);
    counters.insert(Counter::Served, outcome.latencies.len() as f64);
    counters.insert(Counter::Dropped, outcome.dropped as f64);
    counters.insert(
        Metric::DropRate,
        outcome.dropped as f64 / outcome.requests.max(1) as f64,
    );
    counters.insert(Counter::Queued, outcome.queued as f64);
    counters.insert(Counter::MaxInSystem, outcome.max_in_system as f64);
    counters.insert(Counter::ServiceS, outcome.service_s);
    counters.insert(Counter::QueueCapacity, f64::from(load.queue));
    counters.insert(
        Counter::P99MinRequests,
        early_stopping_min_requests(0.99, 0.99, 1) as f64,
    );
    counters.insert(Counter::Samples, outcome.latencies.len() as f64);
    if outcome.latencies.is_empty() {
        return Err(ExecError::AllDropped {
            requests: outcome.requests,
        });
    }
    evidence.metrics.insert(
        Metric::Latency,
        MetricSamples::single_run("s", outcome.latencies.clone()),
    );
    Ok(())
}

/// The admission rule both serving loops share: one FIFO server, at most `capacity`
/// requests in the system, completion times known in arrival order.
struct Admission {
    capacity: usize,
    /// Completion times of the accepted requests still in the system.
    in_system: VecDeque<f64>,
}

impl Admission {
    fn new(capacity: u32) -> Admission {
        Admission {
            capacity: capacity as usize,
            in_system: VecDeque::new(),
        }
    }

    /// Whether a request arriving at `arrival` finds room, counting it in `out` (dropped,
    /// queued behind another, the most in the system).
    fn admit(&mut self, arrival: f64, out: &mut LoadOutcome) -> bool {
        while self.in_system.front().is_some_and(|&done| done <= arrival) {
            self.in_system.pop_front();
        }
        if self.in_system.len() >= self.capacity {
            out.dropped += 1;
            return false;
        }
        if !self.in_system.is_empty() {
            out.queued += 1;
        }
        out.max_in_system = out.max_in_system.max(self.in_system.len() as u64 + 1);
        true
    }

    /// An admitted request completes at `done`.
    fn complete(&mut self, done: f64) {
        self.in_system.push_back(done);
    }
}

/// The serving loop in simulated time, for a system whose service time is known rather
/// than measured (the simulated accelerator: issue 24): the same FIFO server, queue bound
/// and drop rule as [`serve`], each request taking `service_s`. Seeded and exact.
pub fn serve_simulated(load: LoadPlan, seed: u64, service_s: f64) -> LoadOutcome {
    let arrivals = arrival_times(load.arrivals, load.requests, seed);
    let mut queue = Admission::new(load.queue);
    let mut out = LoadOutcome {
        latencies: Vec::with_capacity(arrivals.len()),
        requests: load.requests,
        dropped: 0,
        queued: 0,
        max_in_system: 0,
        service_s,
    };
    let mut server_free = 0.0f64;
    for arrival in arrivals {
        if !queue.admit(arrival, &mut out) {
            continue;
        }
        server_free = server_free.max(arrival) + service_s;
        queue.complete(server_free);
        out.latencies.push((server_free - arrival).max(1e-12));
    }
    out
}

/// The serving loop: one server, FIFO, at most `load.queue` requests in the system.
/// Requests are served in arrival order, so when request `i` is considered every earlier
/// accepted request has completed and its completion time is known: whether `i` found the
/// queue full at its arrival is decided exactly, after the fact. `tick` hears the counts
/// so far every [`TICK_EVERY`] and once at the end. Fails only with the service's own
/// error.
pub fn serve<E>(
    load: LoadPlan,
    seed: u64,
    mut service: impl FnMut() -> Result<(), E>,
    mut tick: impl FnMut(Phase),
) -> Result<LoadOutcome, E> {
    let arrivals = arrival_times(load.arrivals, load.requests, seed);
    let mut queue = Admission::new(load.queue);
    let mut out = LoadOutcome {
        latencies: Vec::with_capacity(arrivals.len()),
        requests: load.requests,
        dropped: 0,
        queued: 0,
        max_in_system: 0,
        service_s: 0.0,
    };
    let mut service_times = Vec::with_capacity(arrivals.len());
    let t0 = Instant::now();
    let mut told = t0;
    let tell = |offered: usize, out: &LoadOutcome, tick: &mut dyn FnMut(Phase)| {
        tick(Phase::Serving {
            offered: offered as u64,
            requests: out.requests,
            served: out.latencies.len() as u64,
            dropped: out.dropped,
        });
    };
    for (offered, arrival) in arrivals.into_iter().enumerate() {
        if told.elapsed() >= TICK_EVERY {
            tell(offered, &out, &mut tick);
            told = Instant::now();
        }
        if !queue.admit(arrival, &mut out) {
            continue;
        }
        // Idle until the request arrives (sleep coarsely, spin the last stretch).
        loop {
            let now = t0.elapsed();
            let due = Duration::from_secs_f64(arrival);
            if now >= due {
                break;
            }
            let left = due - now;
            if left > SPIN_BELOW {
                std::thread::sleep(left - SPIN_BELOW);
            } else {
                std::hint::spin_loop();
            }
        }
        let began = Instant::now();
        service()?;
        service_times.push(began.elapsed().as_secs_f64());
        let done = t0.elapsed().as_secs_f64();
        queue.complete(done);
        out.latencies.push((done - arrival).max(1e-9));
    }
    tell(out.requests as usize, &out, &mut tick);
    service_times.sort_by(f64::total_cmp);
    out.service_s = service_times.get(service_times.len() / 2).copied().unwrap_or(0.0);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Arrivals;

    /// A service that takes `d` of wall time.
    fn busy(d: Duration) -> impl FnMut() -> Result<(), String> {
        move || {
            let t = Instant::now();
            while t.elapsed() < d {
                std::hint::spin_loop();
            }
            Ok(())
        }
    }

    #[test]
    fn issue_8_bursts_queue_and_drop_where_steady_traffic_does_not() {
        let service = Duration::from_micros(500);
        // Same mean rate, 100/s: a steady stream every 10 ms never finds the 0.5 ms server
        // busy; bursts of 16 every 160 ms fill a queue of 8 and drop the other 8.
        let steady = LoadPlan {
            arrivals: Arrivals::Steady { rate_per_s: 100.0 },
            queue: 8,
            requests: 64,
            matrix: false,
        };
        let bursts = LoadPlan {
            arrivals: Arrivals::Bursts {
                rate_per_s: 100.0,
                size: 16,
            },
            ..steady
        };
        let s = serve(steady, 1, busy(service), |_| ()).unwrap();
        let b = serve(bursts, 1, busy(service), |_| ()).unwrap();
        assert_eq!(s.dropped, 0);
        assert_eq!(b.dropped, 4 * 8, "{b:?}");
        assert_eq!(b.latencies.len(), 32);
        assert_eq!(b.max_in_system, 8);
        // 7 of the 8 accepted requests of each burst waited behind another one.
        assert_eq!(b.queued, 4 * 7);
        // Structure, not speed: the 8th request of a burst waited for 7 services.
        let worst = b.latencies.iter().copied().fold(0.0, f64::max);
        assert!(worst >= 7.0 * service.as_secs_f64(), "{worst}");
    }

    #[test]
    fn simulated_service_queues_and_drops_exactly_like_the_real_loop() {
        // Issue 24: the simulator's serving loop, same rule as `serve`, in exact time.
        let steady = LoadPlan {
            arrivals: Arrivals::Steady { rate_per_s: 100.0 },
            queue: 8,
            requests: 64,
            matrix: false,
        };
        let bursts = LoadPlan {
            arrivals: Arrivals::Bursts {
                rate_per_s: 100.0,
                size: 16,
            },
            ..steady
        };
        let s = serve_simulated(steady, 1, 5e-4);
        assert_eq!((s.dropped, s.queued, s.max_in_system), (0, 0, 1));
        assert!(s.latencies.iter().all(|&l| (l - 5e-4).abs() < 1e-12));
        let b = serve_simulated(bursts, 1, 5e-4);
        assert_eq!((b.dropped, b.queued, b.max_in_system), (32, 28, 8));
        let worst = b.latencies.iter().copied().fold(0.0, f64::max);
        assert!((worst - 8.0 * 5e-4).abs() < 1e-12, "{worst}");
        assert_eq!(b, serve_simulated(bursts, 1, 5e-4));
    }
}
