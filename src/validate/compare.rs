//! `sparsegate stats compare`: the engine exposed for two files of numbers, like ministat.
//!
//! Input: one number per line (blank lines and `#` comments skipped), a JSON array of
//! numbers, or a JSON array of arrays (one inner array per run). With runs on both sides
//! the comparison is **run-aware** (DESIGN.md §6, issue 9): the rank and t tests use the
//! per-run medians (the run is the unit of replication; samples inside a run are repeated
//! measures, autocorrelated and sharing the run's speed mode) and the ratio interval comes
//! from a hierarchical bootstrap (runs, then samples within runs). Flat input is analysed
//! as independent samples, and the result says so: on a noisy machine that assumption is
//! what makes naive tools flag 22–44% of A/A pairs.

use super::describe::num;
use super::observe::Observed;
use super::rules::{Quantity, regression};
use crate::domain::metric::Better;
use crate::stats::{
    self, Bootstrap, BootstrapCi, CiMethod, HodgesLehmann, MannWhitney, MwuMethod, OutlierFlags, StatsError,
    TwoSample, Welch,
};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A file of samples that cannot be used, located to the line where possible.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum InputError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    #[diagnostic(code(sparsegate::stats::io))]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// No numbers at all.
    #[error("{}: no samples", path.display())]
    #[diagnostic(
        code(sparsegate::stats::empty),
        help("give one number per line, a JSON array, or a JSON array of arrays (one per run)")
    )]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// A line (or JSON element) is not a number.
    #[error("{}:{line}: {message}", path.display())]
    #[diagnostic(
        code(sparsegate::stats::parse),
        help(
            "one number per line; `#` starts a comment; JSON input must be an array of numbers or of arrays of numbers"
        )
    )]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// NaN or an infinity: no statistic can use it, and silently dropping it would hide a
    /// broken measurement.
    #[error("{}:{line}: non-finite value `{value}`", path.display())]
    #[diagnostic(
        code(sparsegate::stats::non_finite),
        help("NaN and infinities usually mean a failed measurement; fix or remove it")
    )]
    NonFinite {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// The text as written.
        value: String,
    },
    /// The two files disagree in shape (one grouped by run, one flat).
    #[error("{message}")]
    #[diagnostic(
        code(sparsegate::stats::shape),
        help("give both files per-run arrays, or both flat")
    )]
    Shape {
        /// What is wrong.
        message: String,
    },
    /// The numbers admit no comparison (e.g. a zero median under a ratio).
    #[error(transparent)]
    #[diagnostic(code(sparsegate::stats::degenerate))]
    Stats(#[from] StatsError),
    /// A ratio ("5% slower") only means something for positive quantities.
    #[error("{}: value {value} is not positive; a ratio of medians needs positive values (times, rates)", path.display())]
    #[diagnostic(code(sparsegate::stats::non_positive))]
    NonPositive {
        /// The file.
        path: PathBuf,
        /// The first offending value.
        value: f64,
    },
}

/// Samples read from one file.
#[derive(Debug, Clone, PartialEq)]
pub struct Samples {
    /// Where they came from.
    pub path: PathBuf,
    /// One group per run, or a single group for flat input.
    pub runs: Vec<Vec<f64>>,
    /// Whether the input was grouped by run.
    pub grouped: bool,
}

impl Samples {
    /// Every value, runs concatenated.
    pub fn values(&self) -> Vec<f64> {
        self.runs.concat()
    }
}

/// Read and parse a samples file.
pub fn read_samples(path: &Path) -> Result<Samples, InputError> {
    // Bounded (issue 23): 32 MiB is millions of samples.
    let text = crate::files::read_bounded(path, 32 << 20).map_err(|e| InputError::Read {
        path: path.to_owned(),
        source: e.into_io(),
    })?;
    parse_samples(path, &text)
}

/// "`x` is not a number", quoting only a short token: a long line may be a file that is
/// not a samples file at all, and its bytes must not reach a CI log (issue 23).
fn not_a_number(token: &str) -> String {
    if token.len() <= 24 && token.chars().all(|c| c.is_ascii_graphic() || c == ' ') {
        format!("`{token}` is not a number")
    } else {
        format!("not a number (a {}-byte line, not shown)", token.len())
    }
}

/// Parse samples from `text` (see the module docs for the formats); `path` is for messages.
pub fn parse_samples(path: &Path, text: &str) -> Result<Samples, InputError> {
    let err = |line: usize, message: String| InputError::Parse {
        path: path.to_owned(),
        line,
        message,
    };
    let (runs, grouped) = if text.trim_start().starts_with('[') {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| err(e.line(), format!("invalid JSON: {e}")))?;
        let line_of = |needle: usize| json_element_line(text, needle);
        let arr = value
            .as_array()
            .ok_or_else(|| err(1, "expected a JSON array".into()))?;
        let number = |v: &serde_json::Value, flat_index: usize| -> Result<f64, InputError> {
            v.as_f64()
                .ok_or_else(|| err(line_of(flat_index), not_a_number(&v.to_string())))
        };
        if arr.iter().any(serde_json::Value::is_array) {
            let mut runs = Vec::with_capacity(arr.len());
            let mut flat = 0;
            for (r, inner) in arr.iter().enumerate() {
                let inner = inner.as_array().ok_or_else(|| {
                    err(
                        line_of(flat),
                        format!("run #{r} is `{inner}`, not an array of numbers"),
                    )
                })?;
                let mut run = Vec::with_capacity(inner.len());
                for v in inner {
                    run.push(number(v, flat)?);
                    flat += 1;
                }
                if run.is_empty() {
                    return Err(err(line_of(flat), format!("run #{r} is empty")));
                }
                runs.push(run);
            }
            (runs, true)
        } else {
            let run = arr
                .iter()
                .enumerate()
                .map(|(i, v)| number(v, i))
                .collect::<Result<Vec<_>, _>>()?;
            (vec![run], false)
        }
    } else {
        let mut run = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let v: f64 = line.parse().map_err(|_| err(i + 1, not_a_number(line)))?;
            if !v.is_finite() {
                return Err(InputError::NonFinite {
                    path: path.to_owned(),
                    line: i + 1,
                    value: line.to_owned(),
                });
            }
            run.push(v);
        }
        (vec![run], false)
    };
    if runs.iter().all(Vec::is_empty) {
        return Err(InputError::Empty {
            path: path.to_owned(),
        });
    }
    Ok(Samples {
        path: path.to_owned(),
        runs,
        grouped,
    })
}

/// Line of the `index`-th scalar (number, string, bool, null) of a JSON text: a cheap
/// scanner, good enough to point at the offending element of an array of numbers.
fn json_element_line(text: &str, index: usize) -> usize {
    let mut line = 1;
    let mut seen = 0;
    let mut in_scalar = false;
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            if c == '\n' {
                line += 1;
            }
            continue;
        }
        let scalar_char = !matches!(c, '[' | ']' | ',' | ' ' | '\t' | '\r' | '\n');
        if scalar_char && !in_scalar {
            if seen == index {
                return line;
            }
            seen += 1;
            in_string = c == '"';
        }
        in_scalar = scalar_char && !in_string;
        if c == '\n' {
            line += 1;
        }
    }
    line
}

/// Which direction is worse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Worse {
    /// Timings, latencies: larger is worse (the default).
    Higher,
    /// Throughputs, speedups: smaller is worse.
    Lower,
}

/// Settings of a comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompareOptions {
    /// Tolerated regression of the median, as a fraction (0.05 = 5%).
    pub margin: f64,
    /// Confidence of every interval.
    pub confidence: f64,
    /// Bootstrap resamples.
    pub resamples: usize,
    /// Bootstrap seed.
    pub seed: u64,
    /// Which direction is a regression.
    pub worse: Worse,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            margin: 0.05,
            confidence: 0.95,
            resamples: 10_000,
            seed: 0,
            worse: Worse::Higher,
        }
    }
}

/// Summary of one side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Side {
    /// The file.
    pub path: PathBuf,
    /// Number of values.
    pub n: usize,
    /// Number of runs (1 for flat input).
    pub runs: usize,
    /// Median of all values (type 7).
    pub median: f64,
    /// Mean of all values.
    pub mean: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Coefficient of variation within runs (median over runs of sd/mean), when runs have
    /// at least two values.
    pub within_run_cv: Option<f64>,
    /// Coefficient of variation of the run medians, with at least two runs.
    pub between_run_cv: Option<f64>,
    /// Outliers by index into the concatenated values (flagged, never dropped here).
    pub outliers: OutlierFlags,
}

/// The comparison of a candidate with a baseline. The type is the format of
/// `stats compare --json` (`schemas/stats-compare-report.schema.json`, drift-checked).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Comparison {
    /// `independent samples` or `run-aware`; say which assumption the numbers rest on.
    pub method: String,
    /// The baseline side.
    pub baseline: Side,
    /// The candidate side.
    pub candidate: Side,
    /// Mann–Whitney U of candidate (x) against baseline (y): `greater` means "candidate
    /// tends to be larger". Run-aware: on per-run medians.
    pub mann_whitney: MannWhitney,
    /// Hodges–Lehmann shift candidate − baseline with its interval. Run-aware: on per-run
    /// medians.
    pub hodges_lehmann: HodgesLehmann,
    /// Welch's t of candidate − baseline (absent when undefined, e.g. one value per side).
    /// Run-aware: on per-run medians.
    pub welch: Option<Welch>,
    /// Interval of median(candidate) / median(baseline).
    pub ratio: RatioInterval,
    /// Tolerated regression (fraction).
    pub margin: f64,
    /// Which direction is worse.
    pub worse: Worse,
    /// `pass` (regression within the margin shown), `fail` (regression beyond the margin
    /// shown) or `inconclusive`: the gate's `regress_at_most` rule on these samples.
    pub verdict: crate::domain::verdict::Verdict,
    /// The interval of the ratio the verdict was read from (the gate's: Hodges–Lehmann on
    /// log values for independent samples, the run-aware bootstrap for runs); `ratio` is the
    /// bootstrap interval, reported beside it.
    pub decision_interval: Option<(f64, f64)>,
    /// Why, in the gate's words.
    pub reason: String,
    /// Smallest regression (fraction) this evidence would fail with 80% power.
    pub minimum_detectable_regression: Option<f64>,
}

/// A ratio interval with the way it was computed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RatioInterval {
    /// median(candidate) / median(baseline).
    pub estimate: f64,
    /// Lower end.
    pub low: f64,
    /// Upper end.
    pub high: f64,
    /// Confidence.
    pub confidence: f64,
    /// Percentile (run-aware) or BCa (independent samples).
    pub method: CiMethod,
    /// Resamples drawn.
    pub resamples: usize,
}

impl From<BootstrapCi> for RatioInterval {
    fn from(c: BootstrapCi) -> Self {
        RatioInterval {
            estimate: c.estimate,
            low: c.low,
            high: c.high,
            confidence: c.confidence,
            method: c.method,
            resamples: c.resamples,
        }
    }
}

fn side(s: &Samples) -> Result<Side, InputError> {
    let all = s.values();
    let n = all.len();
    let mean = all.iter().sum::<f64>() / n as f64;
    let cv = |xs: &[f64]| -> Option<f64> {
        if xs.len() < 2 {
            return None;
        }
        let m = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (xs.len() - 1) as f64;
        (m != 0.0).then(|| var.sqrt() / m.abs())
    };
    let within: Vec<f64> = s.runs.iter().filter_map(|r| cv(r)).collect();
    let run_medians = run_medians(s)?;
    Ok(Side {
        path: s.path.clone(),
        n,
        runs: s.runs.len(),
        median: stats::median(&all)?,
        mean,
        min: all.iter().copied().fold(f64::INFINITY, f64::min),
        max: all.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        within_run_cv: if within.is_empty() {
            None
        } else {
            Some(stats::median(&within)?)
        },
        between_run_cv: if s.runs.len() >= 2 { cv(&run_medians) } else { None },
        outliers: stats::flag_outliers(&all)?,
    })
}

fn run_medians(s: &Samples) -> Result<Vec<f64>, StatsError> {
    s.runs.iter().map(|r| stats::median(r)).collect()
}

/// Compare `candidate` with `baseline`.
///
/// Errors when one side is grouped by run and the other is not, or when the data admit no
/// ratio (a zero baseline median) or no test.
pub fn compare(
    baseline: &Samples,
    candidate: &Samples,
    opts: &CompareOptions,
) -> Result<Comparison, InputError> {
    if baseline.grouped != candidate.grouped {
        return Err(InputError::Shape {
            message: format!(
                "{} is {} but {} is {}",
                baseline.path.display(),
                if baseline.grouped {
                    "grouped by run"
                } else {
                    "flat"
                },
                candidate.path.display(),
                if candidate.grouped {
                    "grouped by run"
                } else {
                    "flat"
                },
            ),
        });
    }
    if !(opts.margin >= 0.0 && opts.margin < 1.0) {
        return Err(StatsError::InvalidArgument(format!("margin {} is outside [0, 1)", opts.margin)).into());
    }
    let run_aware = baseline.grouped;
    let (b_all, c_all) = (baseline.values(), candidate.values());
    for (s, all) in [(baseline, &b_all), (candidate, &c_all)] {
        if let Some(&value) = all.iter().find(|&&v| v <= 0.0) {
            return Err(InputError::NonPositive {
                path: s.path.clone(),
                value,
            });
        }
    }
    let (b_units, c_units) = if run_aware {
        (run_medians(baseline)?, run_medians(candidate)?)
    } else {
        (b_all.clone(), c_all.clone())
    };
    let mann_whitney = stats::mann_whitney_u(&c_units, &b_units, MwuMethod::Auto)?;
    let hodges_lehmann = stats::hodges_lehmann(&b_units, &c_units, opts.confidence)?;
    let welch = stats::welch_t(&c_units, &b_units).ok();
    let boot = Bootstrap::new(opts.resamples, opts.seed);
    let stat = TwoSample::RatioOfQuantiles { q: 0.5 };
    let (ratio, method) = if run_aware {
        let dist = boot.distribution(&baseline.runs, &candidate.runs, stat)?;
        let (low, high) = dist.percentile(opts.confidence);
        let ci = BootstrapCi {
            estimate: dist.estimate,
            low,
            high,
            confidence: opts.confidence,
            resamples: opts.resamples,
            method: CiMethod::Percentile,
        };
        (
            ci,
            format!(
                "run-aware: tests on per-run medians ({} vs {} runs), hierarchical bootstrap (runs, then samples)",
                baseline.runs.len(),
                candidate.runs.len()
            ),
        )
    } else {
        (
            boot.two_sample(&b_all, &c_all, stat, CiMethod::Bca, opts.confidence)?,
            "assuming independent samples (give a JSON array of arrays, one per run, for the run-aware method)"
                .to_owned(),
        )
    };
    // The verdict is the gate's own `regress_at_most` rule on the same numbers (the run ids
    // make it run-aware exactly as the gate is), so `stats compare` can never disagree
    // with what a gate decides on these samples.
    let observed = |s: &Samples| Observed::Sampled {
        samples: s.values(),
        runs: if s.grouped {
            s.runs
                .iter()
                .zip(0u32..)
                .flat_map(|(r, id)| std::iter::repeat_n(id, r.len()))
                .collect()
        } else {
            Vec::new()
        },
        q: 0.5,
    };
    let quantity = Quantity {
        name: "value",
        unit: "",
        better: match opts.worse {
            Worse::Higher => Better::Lower,
            Worse::Lower => Better::Higher,
        },
    };
    let judged = regression(
        quantity,
        &observed(candidate),
        &observed(baseline),
        opts.margin,
        opts.confidence,
        Bootstrap::new(opts.resamples, opts.seed),
        false,
    );
    let mde = judged
        .ci
        .and_then(|(low, high)| stats::se_from_interval(low, high, opts.confidence))
        .map(|se| stats::mde(se, opts.margin, opts.confidence, stats::DEFAULT_POWER));
    Ok(Comparison {
        method,
        baseline: side(baseline)?,
        candidate: side(candidate)?,
        mann_whitney,
        hodges_lehmann,
        welch,
        ratio: ratio.into(),
        margin: opts.margin,
        worse: opts.worse,
        verdict: judged.verdict,
        decision_interval: judged.ci,
        reason: judged.detail,
        minimum_detectable_regression: mde,
    })
}

impl Comparison {
    /// A ministat-style text report.
    pub fn render_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "method: {}", self.method);
        let _ = writeln!(
            s,
            "{:<10} {:>6} {:>5} {:>14} {:>14} {:>14} {:>14}",
            "", "n", "runs", "median", "mean", "min", "max"
        );
        for (name, side) in [("baseline", &self.baseline), ("candidate", &self.candidate)] {
            let _ = writeln!(
                s,
                "{name:<10} {:>6} {:>5} {:>14} {:>14} {:>14} {:>14}",
                side.n,
                side.runs,
                num(side.median),
                num(side.mean),
                num(side.min),
                num(side.max)
            );
            let mut noise = Vec::new();
            if let Some(cv) = side.within_run_cv {
                noise.push(format!("within-run CV {:.1}%", cv * 100.0));
            }
            if let Some(cv) = side.between_run_cv {
                noise.push(format!("between-run CV {:.1}%", cv * 100.0));
            }
            noise.push(format!("outliers {}", side.outliers.describe()));
            let _ = writeln!(s, "{:<10} {}", "", noise.join(", "));
        }
        let mw = &self.mann_whitney;
        let _ = writeln!(
            s,
            "Mann–Whitney U = {} ({}): p two-sided {}, less {}, greater {} (candidate vs baseline)",
            mw.u,
            if mw.method == MwuMethod::Exact {
                "exact"
            } else {
                "normal approximation"
            },
            num(mw.p_two_sided),
            num(mw.p_less),
            num(mw.p_greater)
        );
        let hl = &self.hodges_lehmann;
        let ci = hl.ci.map_or_else(
            || "no interval: too few values".to_owned(),
            |(l, h)| format!("{} to {}", num(l), num(h)),
        );
        let _ = writeln!(
            s,
            "Hodges–Lehmann shift {} ({}% CI {ci})",
            num(hl.shift),
            hl.confidence * 100.0
        );
        match &self.welch {
            Some(w) => {
                let _ = writeln!(
                    s,
                    "Welch t = {}, df = {}, p = {}",
                    num(w.t),
                    num(w.df),
                    num(w.p_two_sided)
                );
            }
            None => {
                let _ = writeln!(s, "Welch t: undefined (a side with < 2 values, or both constant)");
            }
        }
        let r = &self.ratio;
        let _ = writeln!(
            s,
            "ratio of medians {:.4} ({}% {} bootstrap CI {:.4}–{:.4}, {} resamples)",
            r.estimate,
            r.confidence * 100.0,
            match r.method {
                CiMethod::Bca => "BCa",
                CiMethod::Percentile => "percentile",
            },
            r.low,
            r.high,
            r.resamples
        );
        if let Some(m) = self.minimum_detectable_regression {
            let _ = writeln!(
                s,
                "smallest regression detectable with 80% power: {:.2}%",
                m * 100.0
            );
        }
        let _ = writeln!(s, "verdict: {} ({})", self.verdict, self.reason);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Samples, InputError> {
        parse_samples(Path::new("f.txt"), text)
    }

    #[test]
    fn formats_parse() {
        assert_eq!(p("1\n# c\n\n2.5 # x\n").unwrap().runs, vec![vec![1.0, 2.5]]);
        let g = p("[[1, 2], [3]]").unwrap();
        assert!(g.grouped && g.runs.len() == 2);
        assert!(!p("[1, 2, 3]").unwrap().grouped);
    }

    #[test]
    fn errors_name_the_line() {
        match p("1\n2\nabc\n") {
            Err(InputError::Parse { line: 3, .. }) => {}
            other => panic!("{other:?}"),
        }
        match p("1\nNaN\n") {
            Err(InputError::NonFinite { line: 2, .. }) => {}
            other => panic!("{other:?}"),
        }
        match p("[1,\n 2,\n \"x\"]") {
            Err(InputError::Parse { line: 3, .. }) => {}
            other => panic!("{other:?}"),
        }
        assert!(matches!(p("\n# nothing\n"), Err(InputError::Empty { .. })));
        assert!(matches!(p("[[1], []]"), Err(InputError::Parse { .. })));
        assert!(matches!(p("[1, [2]]"), Err(InputError::Parse { .. })));
    }

    #[test]
    fn a_clear_slowdown_fails_and_a_copy_passes() {
        let base: Vec<f64> = (0..40).map(|i| 1.0 + f64::from(i % 9) * 0.002).collect();
        let slow: Vec<f64> = base.iter().map(|v| v * 1.2).collect();
        let s = |v: Vec<f64>| Samples {
            path: "x".into(),
            runs: vec![v],
            grouped: false,
        };
        let opts = CompareOptions {
            resamples: 1000,
            ..CompareOptions::default()
        };
        let c = compare(&s(base.clone()), &s(slow), &opts).unwrap();
        assert_eq!(c.verdict, crate::domain::verdict::Verdict::Fail, "{}", c.reason);
        let c = compare(&s(base.clone()), &s(base), &opts).unwrap();
        assert_eq!(c.verdict, crate::domain::verdict::Verdict::Pass, "{}", c.reason);
        assert!(c.render_text().contains("independent samples"));
    }
}
