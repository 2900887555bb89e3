//! `sparsegate trend`: one slice's metric over the recorded runs, with the change points
//! E-divisive means finds in it (the statistic lives with the rest of the statistics engine,
//! in `validate::stats`; this module only reads the history and words the result), and the
//! latest run compared with a rolling window of the runs before it and with the last golden
//! baseline a guardrail judged it against (issue 22). Change-point detection needs a few runs
//! on each side of a change; the window says at once whether the latest run left the range
//! of recent history.

use super::history::{History, HistoryError, SeriesPoint, SeriesSource};
use crate::stats::{EDivisiveOptions, MAD_NORMAL_SCALE, MAD_THRESHOLD, StatsError, e_divisive, mad, median};
use serde::Serialize;

/// A metric's series and its change points. The type is the format of `trend --json`
/// (`schemas/trend-report.schema.json`, drift-checked).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct TrendReport {
    /// The pack filter, when given.
    pub pack: Option<String>,
    /// The slice id.
    pub slice: String,
    /// The metric (or guardrail metric) name.
    pub metric: String,
    /// Where the values come from.
    pub source: SeriesSource,
    /// Significance level of the permutation test.
    pub pvalue: f64,
    /// Permutations per candidate.
    pub permutations: usize,
    /// Seed of the permutations.
    pub seed: u64,
    /// The series, oldest run first.
    pub points: Vec<SeriesPoint>,
    /// Change points, in series order.
    pub change_points: Vec<TrendChange>,
    /// The latest run against the runs before it; absent with fewer than two runs.
    pub window: Option<WindowComparison>,
    /// The latest run against the last golden baseline recorded for the metric; absent when
    /// no guardrail judged it against one.
    pub baseline: Option<BaselineComparison>,
}

/// The latest run's value against a rolling window of the runs just before it.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct WindowComparison {
    /// Runs the window asked for (`trend --window N`).
    pub requested: usize,
    /// Runs it held (fewer while the history is shorter).
    pub runs: usize,
    /// The window's oldest run.
    pub first_run_id: i64,
    /// The window's newest run (the one before the latest).
    pub last_run_id: i64,
    /// Median of the window's values.
    pub median: f64,
    /// Smallest value in the window.
    pub low: f64,
    /// Largest value in the window.
    pub high: f64,
    /// The latest run.
    pub latest_run_id: i64,
    /// Its commit, where recorded.
    pub latest_git_commit: Option<String>,
    /// Its value.
    pub latest_value: f64,
    /// `latest_value / median − 1`, when the median is not zero.
    pub relative_change: Option<f64>,
    /// Modified z-score of the latest value in the window, `0.6745 (x − median) / MAD`
    /// (Iglewicz & Hoaglin); absent when the window's MAD is zero.
    pub robust_z: Option<f64>,
    /// Whether the latest value stands out: |robust_z| above 3.5 (the MAD rule the outlier
    /// flags use), or, with a MAD of zero, any value other than the median. Needs at least 5
    /// runs in the window; a flag to look, not a verdict.
    pub outlier: bool,
}

/// The latest run's value against the last golden baseline recorded for the metric.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct BaselineComparison {
    /// The run whose guardrail recorded the baseline.
    pub run_id: i64,
    /// The baseline's value.
    pub baseline: f64,
    /// The latest run's value.
    pub latest_value: f64,
    /// `latest_value / baseline − 1`, when the baseline is not zero.
    pub relative_change: Option<f64>,
}

/// Fewest runs in the window for [`WindowComparison::outlier`] to flag anything.
pub const MIN_WINDOW_FOR_OUTLIER: usize = 5;

/// Runs in the rolling window when `trend --window` does not say: two weeks of nightly
/// gates, long enough for a stable median and MAD, short enough to follow drift.
pub const DEFAULT_WINDOW: usize = 14;

/// One change point, located in the series and in the history.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct TrendChange {
    /// Index into `points` of the first value of the new regime.
    pub index: usize,
    /// The first run after the change: its id.
    pub run_id: i64,
    /// Its git commit, where recorded: the first commit to look at.
    pub git_commit: Option<String>,
    /// When it was recorded.
    pub recorded_at: String,
    /// The candidate statistic.
    pub q: f64,
    /// Permutation p-value.
    pub p_value: f64,
    /// Median of the values from the previous change point (or the start) to this one.
    pub median_before: f64,
    /// Median of the values from this change point to the next (or the end).
    pub median_after: f64,
    /// `median_after / median_before − 1`, when the before median is not zero.
    pub relative_change: Option<f64>,
}

/// Why a trend could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum TrendError {
    /// Reading the history failed.
    #[error(transparent)]
    History(#[from] HistoryError),
    /// The statistic refused the series.
    #[error(transparent)]
    Stats(#[from] StatsError),
}

/// The series of `metric` for `slice` in `history`, with its change points, and its latest
/// run against the `window` runs before it and against the last baseline.
pub fn trend(
    history: &History,
    pack: Option<&str>,
    slice: &str,
    metric: &str,
    options: &EDivisiveOptions,
    window: usize,
) -> Result<TrendReport, TrendError> {
    let (source, points) = history.series(pack, slice, metric)?;
    let values: Vec<f64> = points.iter().map(|p| p.value).collect();
    let change_points = if values.is_empty() {
        Vec::new()
    } else {
        let mut found = e_divisive(&values, options)?;
        found.sort_by_key(|c| c.index);
        let mut bounds: Vec<usize> = vec![0];
        bounds.extend(found.iter().map(|c| c.index));
        bounds.push(values.len());
        found
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let before = median(&values[bounds[i]..c.index]).unwrap_or(f64::NAN);
                let after = median(&values[c.index..bounds[i + 2]]).unwrap_or(f64::NAN);
                TrendChange {
                    index: c.index,
                    run_id: points[c.index].run_id,
                    git_commit: points[c.index].git_commit.clone(),
                    recorded_at: points[c.index].recorded_at.clone(),
                    q: c.q,
                    p_value: c.p_value,
                    median_before: before,
                    median_after: after,
                    relative_change: (before != 0.0).then(|| after / before - 1.0),
                }
            })
            .collect()
    };
    let baseline = match points.last() {
        Some(latest) => history
            .last_baseline(pack, slice, metric)?
            .map(|(run_id, baseline)| BaselineComparison {
                run_id,
                baseline,
                latest_value: latest.value,
                relative_change: (baseline != 0.0).then(|| latest.value / baseline - 1.0),
            }),
        None => None,
    };
    Ok(TrendReport {
        window: compare_window(&points, window),
        baseline,
        pack: pack.map(str::to_owned),
        slice: slice.to_owned(),
        metric: metric.to_owned(),
        source,
        pvalue: options.pvalue,
        permutations: options.permutations,
        seed: options.seed,
        points,
        change_points,
    })
}

/// The last point against the (up to) `window` points before it; `None` without two points
/// or with an empty window.
fn compare_window(points: &[SeriesPoint], window: usize) -> Option<WindowComparison> {
    let (latest, before) = points.split_last()?;
    let held = &before[before.len().saturating_sub(window)..];
    let (first, last) = (held.first()?, held.last()?);
    let values: Vec<f64> = held.iter().map(|p| p.value).collect();
    let mid = median(&values).ok()?;
    let spread = mad(&values).ok()?;
    let robust_z = (spread > 0.0).then(|| (latest.value - mid) / (spread * MAD_NORMAL_SCALE));
    let outlier = values.len() >= MIN_WINDOW_FOR_OUTLIER
        && robust_z.map_or(latest.value != mid, |z| z.abs() > MAD_THRESHOLD);
    Some(WindowComparison {
        requested: window,
        runs: values.len(),
        first_run_id: first.run_id,
        last_run_id: last.run_id,
        median: mid,
        low: values.iter().copied().fold(f64::INFINITY, f64::min),
        high: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        latest_run_id: latest.run_id,
        latest_git_commit: latest.git_commit.clone(),
        latest_value: latest.value,
        relative_change: (mid != 0.0).then(|| latest.value / mid - 1.0),
        robust_z,
        outlier,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(values: &[f64]) -> Vec<SeriesPoint> {
        values
            .iter()
            .enumerate()
            .map(|(i, &value)| SeriesPoint {
                run_id: i as i64 + 1,
                recorded_at: format!("t{i}"),
                git_commit: Some(format!("c{i}")),
                value,
                ci_low: None,
                ci_high: None,
            })
            .collect()
    }

    /// A jump in the last run is flagged against the window before any change point could
    /// be found (E-divisive needs runs on both sides); a value inside the window is not.
    #[test]
    fn the_latest_run_is_flagged_only_when_it_leaves_the_window() {
        let flat = [1.00, 1.02, 0.99, 1.01, 0.98, 1.00, 1.03, 0.97];
        let jumped = series(&[&flat[..], &[1.5]].concat());
        let w = compare_window(&jumped, 5).unwrap();
        assert_eq!(
            (w.runs, w.first_run_id, w.last_run_id, w.latest_run_id),
            (5, 4, 8, 9)
        );
        assert!(w.outlier, "{w:?}");
        assert!((w.relative_change.unwrap() - 0.5).abs() < 0.02, "{w:?}");
        assert_eq!(w.latest_git_commit.as_deref(), Some("c8"));
        let steady = series(&[&flat[..], &[1.01]].concat());
        let w = compare_window(&steady, 5).unwrap();
        assert!(!w.outlier && w.robust_z.unwrap().abs() < 1.0, "{w:?}");
        // Too short a window flags nothing; one run alone has no window at all.
        assert!(!compare_window(&series(&[1.0, 1.0, 9.0]), 14).unwrap().outlier);
        assert!(compare_window(&series(&[1.0]), 14).is_none());
    }
}
