//! The `command` backend: a slice is the user's own benchmark, a program that prints its
//! metrics as JSON lines (contract version 1, `docs/command-backend.md`). sparsegate owns the
//! protocol around it, as for the built-in kernels (DESIGN.md §6): warm-up until the
//! reported latency settles, repeated invocations interleaved with the comparator command
//! (A B, B A, …) so `effective_speedup` is a same-moment ratio, independent runs, a timeout
//! that kills the command with every process it started (issue 23: under a subreaper
//! supervisor, `contain.rs`, so a daemon that left the group dies too), bounded capture of
//! its pipes (`capture.rs`: at most [`STDOUT_LIMIT`] of stdout, the last
//! [`STDERR_KEEP_BYTES`] of stderr), and a failure at the execution stage (with the exit
//! status and the tail of stderr) when the command fails or prints something malformed.

use super::capture::{Drained, spawn_drains};
use super::contain::{CANCEL_GRACE, START_FAILED_PREFIX, START_FAILED_STATUS};
use super::error::{CommandError, CommandStderr, ExecError, PairSide, RecordError};
use super::evidence::{Look, MetricSamples, RunSummary, SliceEvidence};
use super::numbers::{median, zero_if_nan};
use super::paired::{BaselineRuns, PairOrder, SideReading};
use super::run::{OnProgress, Phase, RunProgress, StopRule};
use crate::domain::Counter;
use crate::domain::metric::Metric;
use crate::ingress::{CommandInvocation, CommandSlice, Slice};
use crate::lower::Plan;
use std::collections::BTreeMap;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Version of the JSON-lines contract this build reads (the `"sparsegate"` key).
pub const COMMAND_CONTRACT_VERSION: u64 = 1;

/// Warm-up never runs more invocations than this past the requested minimum…
const WARMUP_EXTRA_CAP: u32 = 10;
/// …nor past this share of the slice's time budget.
const WARMUP_BUDGET_SHARE: f64 = 0.25;
/// Warm-up ends once the last three latencies agree within this fraction of their median.
const STABLE_SPREAD: f64 = 0.05;
/// Bytes of stderr kept for the memo.
const STDERR_TAIL_BYTES: usize = 600;
/// Bytes of stderr kept while its pipe is drained (issue 23): the end of it, in a ring
/// buffer, from which [`STDERR_TAIL_BYTES`] are shown. Room for a long last error after
/// a flood of chatter, at a fixed 64 KiB per pipe.
const STDERR_KEEP_BYTES: usize = 64 << 10;
/// The most one invocation may print on stdout (issue 23). Records are ~80 bytes a line,
/// so this is some 200 000 of them: far past any benchmark's report, and a bound on the
/// gate's memory per pipe where an endless printer reached 4 GB in 8 s. One byte more
/// fails the invocation, killed at once.
const STDOUT_LIMIT: usize = 16 << 20;
/// How long to wait for a command's output pipes to close after it exited or was killed
/// (a daemonised grandchild may hold them open; its output is then cut short).
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// Run a `command` slice and record what it printed; `on_progress` hears after every
/// sample where the slice stands (a user's benchmark can take seconds per invocation).
/// With `samples.sequential` and a `stop` rule, runs are added one at a time past
/// `samples.runs` until the rule says the guardrails are decided or `samples.max_runs` is
/// reached, every look recorded, as for the built-in kernels (issue 22: the key was
/// silently ignored here).
pub fn execute_command_slice(
    slice: &Slice,
    command: &CommandSlice,
    plan: &Plan,
    stop: Option<&StopRule<'_>>,
    on_progress: Option<&mut OnProgress<'_>>,
) -> SliceEvidence {
    let start = Instant::now();
    let mut evidence = SliceEvidence::empty(slice, plan);
    let outcome = match slice.load {
        Some(load) => measure_under_load(slice, command, load, &mut evidence, on_progress),
        None => measure(slice, command, &mut evidence, stop, on_progress).map_err(ExecError::from),
    };
    evidence.finish(outcome, start)
}

/// Values of one invocation, per metric, in the order printed.
type Records = BTreeMap<Metric, Vec<f64>>;

/// One invocation's latency: the median of its `latency` records.
fn latency_of(records: &Records) -> Option<f64> {
    records.get(&Metric::Latency).map(|v| median(v))
}

/// One invocation's fastest `latency` record: how a side of a baseline pair is read
/// ([`SideReading::Fastest`], issue 22).
fn fastest_of(records: &Records) -> Option<f64> {
    records
        .get(&Metric::Latency)
        .and_then(|v| v.iter().copied().min_by(f64::total_cmp))
}

/// Serve the command under `load` (issue 24), LoadGen-style: the command is the system
/// under test and one request is one invocation, started when the arrival schedule says
/// (or, when the previous one is still running, as soon as it ends: one server, FIFO), so a
/// request's latency is its invocation's end minus its scheduled arrival, the process start
/// included; the latencies the command prints are checked against the contract but not
/// used. Warm-up invocations (`samples.warmup`) run first, outside the schedule.
fn measure_under_load(
    slice: &Slice,
    command: &CommandSlice,
    load: crate::ingress::LoadPlan,
    evidence: &mut SliceEvidence,
    mut on_progress: Option<&mut OnProgress<'_>>,
) -> Result<(), ExecError> {
    let started = Instant::now();
    let timeout = Duration::from_secs_f64(command.timeout_s);
    let mut invocations = 0u64;
    for _ in 0..slice.samples.warmup {
        invoke(&command.candidate, timeout)?;
        invocations += 1;
    }
    evidence.warmup_iterations = slice.samples.warmup;
    let tick = |phase| {
        if let Some(tell) = on_progress.as_deref_mut() {
            tell(RunProgress {
                phase,
                elapsed_s: started.elapsed().as_secs_f64(),
            });
        }
    };
    let service = || {
        invocations += 1;
        invoke(&command.candidate, timeout).map(|_| ())
    };
    let outcome = super::load::serve(load, slice.seed, service, tick)?;
    evidence.counters.insert(Counter::Invocations, invocations as f64);
    super::load::record(load, &outcome, evidence)
}

/// What the runs of a command slice took so far, to be written into its evidence at each
/// look of sequential sampling and at the end.
struct Taken {
    metrics: BTreeMap<Metric, MetricSamples>,
    comparator: MetricSamples,
    speedup: MetricSamples,
    baseline: Option<BaselineRuns>,
    invocations: u64,
}

impl Taken {
    /// Write what was taken into `evidence` (whose `runs` hold the run summaries so far).
    fn record(
        &self,
        command: &CommandSlice,
        policy: &crate::ingress::pack::SamplePolicy,
        evidence: &mut SliceEvidence,
    ) {
        evidence
            .counters
            .insert(Counter::Invocations, self.invocations as f64);
        evidence
            .counters
            .insert(Counter::Runs, evidence.runs.len() as f64);
        evidence.run_mode = Some(policy.effective_run_mode());
        for (metric, samples) in &self.metrics {
            evidence.metrics.insert(*metric, samples.clone());
        }
        if command.comparator.is_some() {
            evidence
                .counters
                .insert(Counter::Samples, self.speedup.samples.len() as f64);
            evidence
                .metrics
                .insert(Metric::EffectiveSpeedup, self.speedup.clone());
            evidence.comparator = Some(self.comparator.clone());
        }
        evidence.baseline_build = self.baseline.clone();
    }
}

fn measure(
    slice: &Slice,
    command: &CommandSlice,
    evidence: &mut SliceEvidence,
    stop: Option<&StopRule<'_>>,
    mut on_progress: Option<&mut OnProgress<'_>>,
) -> Result<(), CommandError> {
    let started = Instant::now();
    let mut taken = 0usize;
    let timeout = Duration::from_secs_f64(command.timeout_s);
    let policy = &slice.samples;
    let budget = policy.time_budget_s.max(0.0);
    let mut metrics: BTreeMap<Metric, MetricSamples> = BTreeMap::new();
    let (mut comparator, mut speedup) = (
        MetricSamples::single_run("s", vec![]),
        MetricSamples::single_run("x", vec![]),
    );
    let mut invocations = 0u64;
    let mut baseline = command.baseline.as_ref().map(|b| {
        BaselineRuns::new(
            format!("baseline command `{}`", b.display()),
            "invocation",
            SideReading::Fastest,
        )
    });
    let first = policy.runs.max(1);
    let stop = stop.filter(|_| policy.sequential);
    let most = match stop {
        Some(_) => policy.max_runs.unwrap_or(first).max(first),
        None => first,
    };
    let mut looks: Vec<Look> = Vec::new();
    for run in 0..most {
        let start = Instant::now();
        let elapsed = || start.elapsed().as_secs_f64();
        // Each run warms up afresh: caches, page cache and CPU frequency are the command's
        // own business, and its first invocations are routinely slower.
        let mut warm = Vec::new();
        loop {
            let records = invoke(&command.candidate, timeout)?;
            invocations += 1;
            for other in [&command.comparator, &command.baseline].into_iter().flatten() {
                invoke(other, timeout)?;
                invocations += 1;
            }
            warm.push(latency_of(&records));
            let done = warm.len() as u32;
            if done < policy.warmup {
                continue;
            }
            let latencies: Option<Vec<f64>> = warm.iter().copied().collect();
            let settled = latencies.is_none_or(|l| is_stable(&l));
            if settled
                || done >= policy.warmup + WARMUP_EXTRA_CAP
                || elapsed() >= WARMUP_BUDGET_SHARE * budget
            {
                break;
            }
        }
        evidence.warmup_iterations += warm.len() as u32;

        let (mut run_latency, mut run_comparator, mut run_speedup) = (Vec::new(), Vec::new(), Vec::new());
        let mut n = 0u32;
        loop {
            // Alternate which side goes first so order effects cancel in the ratio. The
            // baseline build (issue 22) runs right next to the candidate, on the other
            // side of it from the comparator: C B K, then K B C, …
            let order = PairOrder::of_pair(n as usize);
            let (cand, comp, base) = match order {
                PairOrder::CandidateFirst => {
                    let a = invoke(&command.candidate, timeout)?;
                    let base = invoke_opt(&command.baseline, timeout)?;
                    (a, invoke_opt(&command.comparator, timeout)?, base)
                }
                PairOrder::BaselineFirst => {
                    let comp = invoke_opt(&command.comparator, timeout)?;
                    let base = invoke_opt(&command.baseline, timeout)?;
                    (invoke(&command.candidate, timeout)?, comp, base)
                }
            };
            invocations += 1 + u64::from(comp.is_some()) + u64::from(base.is_some());
            if let (Some(base), Some(paired)) = (base, baseline.as_mut()) {
                let (Some(a), Some(b)) = (fastest_of(&cand), fastest_of(&base)) else {
                    return Err(CommandError::NoBaselineLatency {
                        silent: if latency_of(&cand).is_none() {
                            PairSide::Command
                        } else {
                            PairSide::Baseline
                        },
                        command: command.candidate.display(),
                        baseline: command
                            .baseline
                            .as_ref()
                            .map_or_else(String::new, |c| c.display()),
                    });
                };
                paired.push(run, order, a, b);
            }
            if let Some(comp) = comp {
                let (Some(a), Some(b)) = (latency_of(&cand), latency_of(&comp)) else {
                    return Err(CommandError::NoLatencyToPair {
                        silent: if latency_of(&cand).is_none() {
                            PairSide::Command
                        } else {
                            PairSide::Comparator
                        },
                        command: command.candidate.display(),
                        comparator: command
                            .comparator
                            .as_ref()
                            .map_or_else(String::new, |c| c.display()),
                    });
                };
                run_comparator.push(b);
                run_speedup.push(b / a);
                comparator.samples.push(b);
                comparator.runs.push(run);
                speedup.samples.push(b / a);
                speedup.runs.push(run);
            }
            if let Some(a) = latency_of(&cand) {
                run_latency.push(a);
            }
            for (metric, values) in cand {
                let entry = metrics
                    .entry(metric)
                    .or_insert_with(|| MetricSamples::single_run(metric.unit(), vec![]));
                entry.runs.extend(std::iter::repeat_n(run, values.len()));
                entry.samples.extend(values);
            }
            n += 1;
            taken += 1;
            let last = n >= policy.min && (elapsed() >= budget || n >= policy.max);
            if let Some(tell) = on_progress.as_deref_mut() {
                tell(RunProgress {
                    phase: Phase::Runs {
                        runs_done: run + u32::from(last),
                        runs_planned: first,
                        runs_max: most,
                        samples: taken,
                    },
                    elapsed_s: started.elapsed().as_secs_f64(),
                });
            }
            if last {
                break;
            }
        }
        evidence.runs.push(RunSummary {
            run,
            pid: None,
            warmup_iterations: warm.len() as u32,
            samples: n as usize,
            // 0 stands for "not measured" (JSON has no NaN): no calibration workload runs
            // beside a user's command, and no comparator unless the pack names one.
            latency_s: zero_if_nan(median(&run_latency)),
            comparator_s: zero_if_nan(median(&run_comparator)),
            calibration_s: 0.0,
            speedup: zero_if_nan(median(&run_speedup)),
            cpu_share: None,
        });
        // Sequential sampling: validate's interim look over everything taken so far.
        let Some(stop) = stop.filter(|_| run + 1 >= first) else {
            continue;
        };
        let mut so_far = evidence.clone();
        Taken {
            metrics: metrics.clone(),
            comparator: comparator.clone(),
            speedup: speedup.clone(),
            baseline: baseline.clone(),
            invocations,
        }
        .record(command, policy, &mut so_far);
        if super::run::take_look(&mut so_far, &mut looks, run + 1, stop) {
            break;
        }
    }

    // A guardrail over a metric the command never printed is the command's failure, not an
    // inconclusive verdict: say which metric is missing.
    for g in &slice.guardrails {
        let needed = match g.metric {
            Metric::LatencyP50 | Metric::LatencyP95 | Metric::LatencyP99 => Metric::Latency,
            m => m,
        };
        if needed != Metric::EffectiveSpeedup && !metrics.contains_key(&needed) {
            return Err(CommandError::MissingMetric {
                command: command.candidate.display(),
                needed,
                guardrail: g.metric,
            });
        }
    }
    Taken {
        metrics,
        comparator,
        speedup,
        baseline,
        invocations,
    }
    .record(command, policy, evidence);
    evidence.looks = looks;
    Ok(())
}

/// [`invoke`] when there is a process to invoke.
fn invoke_opt(inv: &Option<CommandInvocation>, timeout: Duration) -> Result<Option<Records>, CommandError> {
    inv.as_ref().map(|i| invoke(i, timeout)).transpose()
}

/// Whether the last three values lie within [`STABLE_SPREAD`] of their median.
fn is_stable(values: &[f64]) -> bool {
    let Some(window) = values.len().checked_sub(3).map(|s| &values[s..]) else {
        return false;
    };
    let m = median(window);
    window.iter().all(|v| (v - m).abs() <= STABLE_SPREAD * m)
}

/// Run one invocation to completion (or to its timeout) and parse what it printed.
fn invoke(inv: &CommandInvocation, timeout: Duration) -> Result<Records, CommandError> {
    let output = run_process(inv, timeout)?;
    let command = inv.display();
    let stderr = stderr_tail(&output.stderr);
    let wall_s = output.wall_s;
    if output.overflowed {
        return Err(CommandError::StdoutOverflow {
            command,
            limit: STDOUT_LIMIT,
            stderr,
        });
    }
    if output.timed_out {
        return Err(CommandError::TimedOut {
            command,
            timeout,
            stderr,
        });
    }
    match output.code {
        Some(0) => {}
        Some(code) => {
            return Err(CommandError::Exited {
                command,
                code,
                wall_s,
                stderr,
            });
        }
        None => {
            return Err(CommandError::Signalled {
                command,
                signal: output.signal.unwrap_or(0),
                wall_s,
                stderr,
            });
        }
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    parse_records(&stdout).map_err(|source| CommandError::Records { command, source })
}

/// What one process left behind.
struct ProcessOutput {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    code: Option<i32>,
    signal: Option<i32>,
    timed_out: bool,
    /// It printed more than [`STDOUT_LIMIT`] on stdout and was killed there.
    overflowed: bool,
    wall_s: f64,
}

/// Start `inv` contained (under the supervisor, [`super::contain`], where one is
/// installed; else in a process group of its own), drain both pipes on threads through
/// bounded sinks ([`super::capture`]: a chatty child never blocks on a full pipe, and an
/// endless one never exhausts memory), and kill it — the supervisor takes every
/// descendant along, the group kill the ones still in the group — at the timeout, at a
/// stdout overflow, and after it exits.
fn run_process(inv: &CommandInvocation, timeout: Duration) -> Result<ProcessOutput, CommandError> {
    let (program, args) = inv.argv.split_first().ok_or(CommandError::NoProgram)?;
    let start = Instant::now();
    let supervisor = super::contain::supervisor();
    let mut command = match supervisor {
        Some(s) => {
            let mut c = Command::new(&s.program);
            c.args(&s.args).args(&inv.argv).stdin(Stdio::piped());
            c
        }
        None => {
            let mut c = Command::new(program);
            c.args(args).stdin(Stdio::null());
            c
        }
    };
    let mut child = command
        .current_dir(&inv.cwd)
        .envs(&inv.env)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|source| CommandError::Start {
            command: inv.display(),
            cwd: inv.cwd.clone(),
            source,
        })?;
    let pgid = child.id() as i32;
    // The supervisor's stdin is its cancel line: dropping it tells it to kill everything.
    let mut cancel_line = child.stdin.take();
    let (stdout, stderr) = spawn_drains(&mut child, STDOUT_LIMIT, STDERR_KEEP_BYTES);
    let mut stdout_done: Option<Drained> = None;
    let mut kill = |child: &mut std::process::Child| {
        if cancel_line.take().is_some() {
            // Give the supervisor the chance to kill the command's descendants, which the
            // group kill cannot reach; then the group kill, whatever happened.
            let grace = Instant::now();
            while grace.elapsed() < CANCEL_GRACE && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        kill_group(pgid);
        child.wait().ok()
    };
    let mut pause = Duration::from_micros(200);
    let (status, timed_out, overflowed) = loop {
        if stdout_done.is_none()
            && let Some(d) = stdout.as_ref().and_then(|rx| rx.try_recv().ok())
        {
            if d.overflowed {
                break (kill(&mut child), false, true);
            }
            stdout_done = Some(d);
        }
        match child.try_wait() {
            Ok(Some(status)) => break (Some(status), false, false),
            Ok(None) if start.elapsed() >= timeout => break (kill(&mut child), true, false),
            Ok(None) => {
                std::thread::sleep(pause.min(timeout.saturating_sub(start.elapsed())));
                pause = (pause * 2).min(Duration::from_millis(10));
            }
            Err(e) => {
                kill(&mut child);
                return Err(CommandError::Wait {
                    command: inv.display(),
                    source: e,
                });
            }
        }
    };
    let wall_s = start.elapsed().as_secs_f64();
    // Whatever the command left running in its group goes too: no orphans between samples.
    // (Under the supervisor, which has exited by now, nothing is left.)
    drop(cancel_line);
    kill_group(pgid);
    let collect = |rx: Option<mpsc::Receiver<Drained>>| {
        rx.and_then(|rx| rx.recv_timeout(PIPE_GRACE).ok())
            .unwrap_or_default()
    };
    let stdout = stdout_done.unwrap_or_else(|| collect(stdout));
    let stderr = collect(stderr);
    let output = ProcessOutput {
        overflowed: overflowed || stdout.overflowed,
        stdout: stdout.bytes,
        stderr: stderr.bytes,
        code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        timed_out,
        wall_s,
    };
    if supervisor.is_some()
        && output.code == Some(START_FAILED_STATUS)
        && let Some(source) = start_failure(&output.stderr)
    {
        return Err(CommandError::Start {
            command: inv.display(),
            cwd: inv.cwd.clone(),
            source,
        });
    }
    Ok(output)
}

/// The OS error the supervisor reported on its last stderr line when the command could
/// not start ([`START_FAILED_PREFIX`]).
fn start_failure(stderr: &[u8]) -> Option<std::io::Error> {
    let text = String::from_utf8_lossy(stderr);
    let line = text.trim_end().lines().last()?;
    let errno: i32 = line.strip_prefix(START_FAILED_PREFIX)?.trim().parse().ok()?;
    Some(if errno > 0 {
        std::io::Error::from_raw_os_error(errno)
    } else {
        std::io::Error::other("the supervisor could not start it")
    })
}

/// SIGKILL every process in group `pgid` (already gone is fine).
fn kill_group(pgid: i32) {
    // `Pid::from_raw` refuses 0 and negative ids, which would name other groups than ours.
    if let Some(pid) = rustix::process::Pid::from_raw(pgid) {
        // Failure (ESRCH when the group is gone) is harmless here.
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// The end of a command's stderr on one line, for failure messages and the memo.
fn stderr_tail(stderr: &[u8]) -> CommandStderr {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim();
    if text.is_empty() {
        return CommandStderr(String::new());
    }
    let mut start = text.len().saturating_sub(STDERR_TAIL_BYTES);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let cut = if start > 0 { "…" } else { "" };
    let joined = text[start..].lines().collect::<Vec<_>>().join(" ⏎ ");
    CommandStderr(format!("{cut}{joined}"))
}

/// Parse the records of one invocation's stdout (contract version 1). Lines that do not
/// start with `{` are the benchmark's own chatter and are ignored, as are JSON objects
/// without a `"sparsegate"` key; a line that starts with `{` but is not valid JSON, or a
/// record that breaks the contract, is refused with its line number.
pub fn parse_records(stdout: &str) -> Result<Records, RecordError> {
    let mut records = Records::new();
    for (i, raw) in stdout.lines().enumerate() {
        let line = i + 1;
        let fail = |message: String| RecordError { line, message };
        let text = raw.trim();
        if !text.starts_with('{') {
            continue;
        }
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| fail(format!("not valid JSON ({e})")))?;
        let Some(obj) = value.as_object() else {
            return Err(fail("not a JSON object".into()));
        };
        let Some(version) = obj.get("sparsegate") else {
            continue;
        };
        if version.as_u64() != Some(COMMAND_CONTRACT_VERSION) {
            return Err(fail(format!(
                "contract version {version} is not supported (this build reads version {COMMAND_CONTRACT_VERSION})"
            )));
        }
        if let Some(unknown) = obj
            .keys()
            .find(|k| !matches!(k.as_str(), "sparsegate" | "metric" | "unit" | "value" | "samples"))
        {
            return Err(fail(format!("unknown key `{unknown}`")));
        }
        let name = obj
            .get("metric")
            .and_then(|m| m.as_str())
            .ok_or_else(|| fail("`metric` is missing or not a string".into()))?;
        let metric: Metric = name.parse().map_err(|_| {
            let known: Vec<&str> = Metric::ALL.iter().map(|m| m.name()).collect();
            fail(format!("unknown metric `{name}` (known: {})", known.join(", ")))
        })?;
        match metric {
            Metric::LatencyP50 | Metric::LatencyP95 | Metric::LatencyP99 => {
                return Err(fail(format!(
                    "`{name}` is derived by sparsegate: print every request's `latency` and it takes the percentiles"
                )));
            }
            Metric::EffectiveSpeedup => {
                return Err(fail(
                    "`effective_speedup` is derived by sparsegate from the comparator command's `latency`"
                        .into(),
                ));
            }
            Metric::FallbackRate | Metric::MetadataOverhead => {
                return Err(fail(format!("`{name}` is a counter of the built-in backends")));
            }
            Metric::DropRate => {
                return Err(fail(
                    "`drop_rate` is counted by sparsegate's serving loop: give the slice a `load`".into(),
                ));
            }
            _ => {}
        }
        let unit = obj
            .get("unit")
            .and_then(|u| u.as_str())
            .ok_or_else(|| fail("`unit` is missing or not a string".into()))?;
        let scale = unit_scale(metric, unit).ok_or_else(|| {
            fail(if metric == Metric::Latency {
                format!("unit `{unit}` for `latency`; expected one of s, ms, us, ns")
            } else {
                format!("unit `{unit}` for `{name}`; expected `{}`", metric.unit())
            })
        })?;
        let values: Vec<f64> = match (obj.get("value"), obj.get("samples")) {
            (Some(v), None) => vec![v.as_f64().ok_or_else(|| fail("`value` is not a number".into()))?],
            (None, Some(s)) => {
                let list = s
                    .as_array()
                    .filter(|a| !a.is_empty())
                    .ok_or_else(|| fail("`samples` is not a non-empty array".into()))?;
                list.iter()
                    .map(|v| {
                        v.as_f64()
                            .ok_or_else(|| fail("`samples` holds a value that is not a number".into()))
                    })
                    .collect::<Result<_, _>>()?
            }
            (Some(_), Some(_)) => return Err(fail("both `value` and `samples`; give one".into())),
            (None, None) => return Err(fail("neither `value` nor `samples`".into())),
        };
        if let Some(bad) = values
            .iter()
            .find(|v| !v.is_finite() || (metric == Metric::Latency && **v <= 0.0))
        {
            return Err(fail(format!(
                "`{name}` value {bad} is not a finite{} number",
                if metric == Metric::Latency {
                    " positive"
                } else {
                    ""
                }
            )));
        }
        records
            .entry(metric)
            .or_default()
            .extend(values.into_iter().map(|v| v * scale));
    }
    Ok(records)
}

/// The factor that converts `unit` into the metric's own unit, if the unit is accepted.
fn unit_scale(metric: Metric, unit: &str) -> Option<f64> {
    if metric == Metric::Latency {
        return match unit {
            "s" => Some(1.0),
            "ms" => Some(1e-3),
            "us" | "µs" => Some(1e-6),
            "ns" => Some(1e-9),
            _ => None,
        };
    }
    (unit == metric.unit()).then_some(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_8_records_are_parsed_and_converted() {
        let out = "warming up\n\
            {\"sparsegate\": 1, \"metric\": \"latency\", \"unit\": \"ms\", \"value\": 12.5}\n\
            {\"sparsegate\": 1, \"metric\": \"latency\", \"unit\": \"us\", \"samples\": [1, 2]}\n\
            {\"other\": \"json log line\"}\n\
            {\"sparsegate\": 1, \"metric\": \"accuracy\", \"unit\": \"fraction\", \"value\": 0.9}\n";
        let r = parse_records(out).unwrap();
        assert_eq!(r[&Metric::Latency], vec![12.5e-3, 1e-6, 2e-6]);
        assert_eq!(r[&Metric::Accuracy], vec![0.9]);
    }

    #[test]
    fn issue_8_malformed_records_name_the_line() {
        let cases = [
            (
                "x\n{\"sparsegate\": 1, \"metric\": \"latency\"",
                2,
                "not valid JSON",
            ),
            (
                "{\"sparsegate\": 2, \"metric\": \"latency\", \"unit\": \"s\", \"value\": 1}",
                1,
                "version 2",
            ),
            (
                "{\"sparsegate\": 1, \"metric\": \"speed\", \"unit\": \"s\", \"value\": 1}",
                1,
                "unknown metric `speed`",
            ),
            (
                "{\"sparsegate\": 1, \"metric\": \"latency\", \"unit\": \"h\", \"value\": 1}",
                1,
                "unit `h`",
            ),
            (
                "{\"sparsegate\": 1, \"metric\": \"latency\", \"unit\": \"s\"}",
                1,
                "neither",
            ),
            (
                "{\"sparsegate\": 1, \"metric\": \"latency\", \"unit\": \"s\", \"value\": \"1\"}",
                1,
                "not a number",
            ),
            (
                "{\"sparsegate\": 1, \"metric\": \"latency\", \"unit\": \"s\", \"samples\": []}",
                1,
                "non-empty",
            ),
            (
                "{\"sparsegate\": 1, \"metric\": \"latency\", \"unit\": \"s\", \"value\": -1}",
                1,
                "positive",
            ),
            (
                "{\"sparsegate\": 1, \"metric\": \"latency\", \"unit\": \"s\", \"vaule\": 1}",
                1,
                "unknown key `vaule`",
            ),
            (
                "{\"sparsegate\": 1, \"metric\": \"latency_p99\", \"unit\": \"s\", \"value\": 1}",
                1,
                "derived",
            ),
        ];
        for (text, line, needle) in cases {
            let e = parse_records(text).unwrap_err();
            assert_eq!(e.line, line, "{text}");
            assert!(e.to_string().contains(needle), "{text}: {e}");
            assert!(e.to_string().contains("expected one JSON object per line"), "{e}");
        }
    }

    #[test]
    fn issue_8_stderr_tail_is_bounded_and_on_one_line() {
        let long = "a\n".repeat(1000) + "the real error";
        let tail = stderr_tail(long.as_bytes()).to_string();
        assert!(tail.ends_with("the real error"), "{tail}");
        assert!(tail.len() < STDERR_TAIL_BYTES * 3);
        assert!(!tail.contains('\n'));
        assert_eq!(stderr_tail(b"  \n").to_string(), "; stderr was empty");
    }

    #[test]
    fn issue_23_an_endless_stdout_is_cut_at_its_cap_and_killed() {
        // Without the supervisor (the library alone): the group kill, at the first byte
        // past the cap, long before the timeout.
        let inv = CommandInvocation {
            argv: vec!["yes".into()],
            cwd: std::env::temp_dir(),
            env: BTreeMap::new(),
        };
        let started = Instant::now();
        let out = run_process(&inv, Duration::from_secs(60)).unwrap();
        assert!(out.overflowed && !out.timed_out);
        assert!(out.stdout.is_empty());
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
        let err = invoke(&inv, Duration::from_secs(60)).unwrap_err();
        assert!(matches!(err, CommandError::StdoutOverflow { .. }), "{err}");
    }

    #[test]
    fn issue_23_the_stderr_tail_survives_a_flood() {
        let inv = CommandInvocation {
            argv: vec![
                "sh".into(),
                "-c".into(),
                "yes chatter | head -c 20000000 >&2; echo 'the real error' >&2; exit 4".into(),
            ],
            cwd: std::env::temp_dir(),
            env: BTreeMap::new(),
        };
        let out = run_process(&inv, Duration::from_secs(60)).unwrap();
        assert_eq!(out.code, Some(4));
        assert_eq!(out.stderr.len(), STDERR_KEEP_BYTES);
        assert!(out.stderr.ends_with(b"the real error\n"));
    }

    #[test]
    fn issue_23_a_start_failure_reported_by_the_supervisor_is_read_back() {
        let stderr = format!("some chatter\n{START_FAILED_PREFIX}2\n");
        let e = start_failure(stderr.as_bytes()).unwrap();
        assert_eq!(e.raw_os_error(), Some(2));
        assert!(start_failure(b"exit 127 for another reason\n").is_none());
    }

    #[test]
    fn issue_8_timeout_kills_the_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("survived");
        // The child's own child would touch the marker after 1 s if it outlived the kill.
        let script = format!("(sleep 1; touch {}) & sleep 30", marker.display());
        let inv = CommandInvocation {
            argv: vec!["sh".into(), "-c".into(), script],
            cwd: dir.path().to_path_buf(),
            env: BTreeMap::new(),
        };
        let out = run_process(&inv, Duration::from_millis(200)).unwrap();
        assert!(out.timed_out);
        std::thread::sleep(Duration::from_millis(1500));
        assert!(!marker.exists(), "a grandchild outlived the timeout kill");
    }
}
