//! `trend`: one slice's metric over the recorded runs, with its change points.

use super::history::open_existing_history;
use crate::error::{Error, Result};
use crate::release::history::HistoryLocation;
use crate::release::trend::{self, TrendReport};
use crate::stats::EDivisiveOptions;

/// A slice's metric over the recorded runs with its change points (the `trend` command).
/// Refuses a slice id several packs recorded when no pack is named, and a series with no
/// values (saying what was recorded instead).
pub fn trend(
    location: &HistoryLocation,
    pack: Option<&str>,
    slice: &str,
    metric: &str,
    options: &EDivisiveOptions,
    window: usize,
) -> Result<TrendReport> {
    let history = open_existing_history(location)?;
    if pack.is_none() {
        let packs = history.packs_with_slice(slice)?;
        if packs.len() > 1 {
            return Err(Error::AmbiguousSlice {
                slice: slice.to_owned(),
                packs,
            });
        }
    }
    let report = trend::trend(&history, pack, slice, metric, options, window)?;
    if report.points.is_empty() {
        let known = history.metric_names(slice)?;
        return Err(Error::Usage {
            message: format!("no recorded values of `{metric}` for slice `{slice}` in {location}"),
            hint: if known.is_empty() {
                let slices = history.slice_names()?;
                if slices.is_empty() {
                    "the history has no runs yet; `sparsegate gate` records them".to_owned()
                } else {
                    format!(
                        "no run recorded a slice `{slice}`; recorded (pack/slice): {}",
                        slices.join(", ")
                    )
                }
            } else {
                format!("recorded metrics of `{slice}`: {}", known.join(", "))
            },
        });
    }
    Ok(report)
}
