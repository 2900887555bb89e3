//! What `sparsegate validate --json` prints: one entry per pack, its slices or its located
//! problems. The type is the format (`schemas/validate-report.schema.json`, drift-checked).

use super::{LoadedPack, PackError};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// One pack's validation. Fields are in alphabetical order, the order the report has always
/// had on disk.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct PackValidation {
    /// Every problem found, empty when the pack is valid.
    pub errors: Vec<ProblemReport>,
    /// The pack file.
    pub path: PathBuf,
    /// The expanded slice ids of a valid pack.
    pub slices: Vec<String>,
    /// Whether the pack loaded.
    pub valid: bool,
    /// Located problems that do not stop a valid pack (issue 24): a guardrail its runs are
    /// unlikely to resolve, a slice that gates nothing.
    pub warnings: Vec<ProblemReport>,
}

/// One located problem of a pack.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ProblemReport {
    /// What would fix it.
    pub hint: Option<String>,
    /// `file:line:col`.
    pub location: String,
    /// What is wrong.
    pub message: String,
    /// JSON pointer to the offending value, empty for the root.
    pub pointer: String,
}

impl ProblemReport {
    fn of(d: &super::PackDiagnostic) -> ProblemReport {
        ProblemReport {
            hint: d.hint.clone(),
            location: d.location.to_string(),
            message: d.message.clone(),
            pointer: d.pointer.clone(),
        }
    }
}

impl PackValidation {
    /// The report of the pack at `path`, loaded or refused.
    pub fn of(path: &Path, result: Result<&LoadedPack, &PackError>) -> PackValidation {
        match result {
            Ok(pack) => PackValidation {
                errors: vec![],
                path: path.to_owned(),
                slices: pack.slices.iter().map(|s| s.id.clone()).collect(),
                valid: true,
                warnings: pack.warnings.iter().map(ProblemReport::of).collect(),
            },
            Err(err) => PackValidation {
                errors: err.diagnostics.iter().map(ProblemReport::of).collect(),
                path: path.to_owned(),
                slices: vec![],
                valid: false,
                warnings: vec![],
            },
        }
    }
}
