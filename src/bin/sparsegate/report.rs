//! How every command prints its report: with `--json`, the JSON its committed schema
//! describes (`schemas/*-report.schema.json`); else the text a person reads.

use serde::Serialize;
use sparsegate::app;

/// `report` on stdout: as JSON when `json`, else through `text`.
pub fn print_report<T: Serialize>(report: &T, json: bool, text: impl FnOnce(&T)) {
    if json {
        print!("{}", app::to_json(report));
    } else {
        text(report);
    }
}
