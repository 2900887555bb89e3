//! `sparsegate trend`: one slice's metric over the recorded runs, with the change points
//! E-divisive means finds in it (the statistic lives with the rest of the statistics engine,
//! in `validate::stats`; this module only reads the history and words the result).

use super::history::{History, HistoryError, SeriesPoint, SeriesSource};
use crate::stats::{EDivisiveOptions, StatsError, e_divisive, median};
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
}

/// One change point, located in the series and in the history.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct TrendChange {
    /// Index into `points` of the first value of the new regime.
    pub index: usize,
    /// The run id of that value.
    pub run_id: i64,
    /// Its git commit, where recorded: the first commit to look at.
    pub git_commit: Option<String>,
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

/// The series of `metric` for `slice` in `history`, with its change points.
pub fn trend(
    history: &History,
    pack: Option<&str>,
    slice: &str,
    metric: &str,
    options: &EDivisiveOptions,
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
                    q: c.q,
                    p_value: c.p_value,
                    median_before: before,
                    median_after: after,
                    relative_change: (before != 0.0).then(|| after / before - 1.0),
                }
            })
            .collect()
    };
    Ok(TrendReport {
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
