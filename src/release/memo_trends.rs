//! The memo's trend charts: each slice's recent latency history, read back from the run
//! history with this run in it (recorded, not yet committed: issue 23), with the change
//! points E-divisive means finds in it.

use super::MemoTrend;
use super::history::PendingRun;
use crate::domain::Metric;
use crate::execute::Evidence;
use crate::stats::{EDivisiveOptions, e_divisive};

/// Runs of history the memo charts per slice.
pub const MEMO_TREND_RUNS: usize = 30;

/// The metric the memo's trend chart follows: the one every backend records.
const MEMO_TREND_METRIC: Metric = Metric::Latency;

/// The recent latency history of every slice with at least two recorded runs, with its
/// change points. A read failure only drops the charts (the memo stays correct without
/// them).
pub fn memo_trends(history: &PendingRun<'_>, evidence: &Evidence) -> Vec<MemoTrend> {
    evidence
        .slices
        .iter()
        .filter_map(|s| {
            let (_, series) = history
                .series(Some(&s.pack), &s.slice, MEMO_TREND_METRIC.name())
                .ok()?;
            let recent = &series[series.len().saturating_sub(MEMO_TREND_RUNS)..];
            if recent.len() < 2 {
                return None;
            }
            let values: Vec<f64> = recent.iter().map(|p| p.value).collect();
            let mut change_points: Vec<usize> = e_divisive(&values, &EDivisiveOptions::default())
                .ok()?
                .iter()
                .map(|c| c.index)
                .collect();
            change_points.sort_unstable();
            Some(MemoTrend {
                pack: s.pack.clone(),
                slice: s.slice.clone(),
                metric: MEMO_TREND_METRIC.name().to_owned(),
                points: recent.iter().map(|p| (p.run_id, p.value)).collect(),
                change_points,
            })
        })
        .collect()
}
