//! The JSON Schemas users and tools validate our files against, generated from the Rust
//! types (schemars) and committed under `schemas/`. A test keeps the committed files equal
//! to what the types generate, so the documented format can never drift from the code.
//! Regenerate them with `SPARSEGATE_UPDATE_SCHEMAS=1 cargo test --release schema`.

use serde_json::Value;

pub use crate::domain::schema::generate;

/// A committed schema: its file name under `schemas/` and how to generate it.
pub type CommittedSchema = (&'static str, fn() -> Value);

/// Every committed schema.
pub const COMMITTED: &[CommittedSchema] = &[
    ("scenario-pack.schema.json", crate::ingress::pack_schema),
    (
        "golden-baseline.schema.json",
        generate::<crate::validate::golden::Baseline>,
    ),
    ("memo.schema.json", generate::<crate::release::Memo>),
    ("verdict.schema.json", generate::<crate::release::Decision>),
    ("accelerator-preset.schema.json", generate::<crate::sim::Preset>),
    ("evidence.schema.json", generate::<crate::execute::Evidence>),
    (
        "validate-report.schema.json",
        generate::<Vec<crate::ingress::report::PackValidation>>,
    ),
    (
        "run-report.schema.json",
        generate::<Vec<crate::execute::summary::SliceSummary>>,
    ),
    ("sim-report.schema.json", generate::<crate::sim::SimRun>),
    (
        "gpu-measurement.schema.json",
        generate::<crate::sim::measured::MeasuredGrid>,
    ),
    (
        "sim-measured-report.schema.json",
        generate::<crate::sim::measured::Agreement>,
    ),
    (
        "stats-compare-report.schema.json",
        generate::<crate::validate::compare::Comparison>,
    ),
    (
        "bench-report.schema.json",
        generate::<crate::execute::bench::BenchReport>,
    ),
    (
        "bench-sweep.schema.json",
        generate::<crate::execute::bench::SweepReport>,
    ),
    (
        "bless-report.schema.json",
        generate::<Vec<crate::validate::golden::BlessChange>>,
    ),
    (
        "history-report.schema.json",
        generate::<Vec<crate::release::history::RunRow>>,
    ),
    (
        "trend-report.schema.json",
        generate::<crate::release::trend::TrendReport>,
    ),
    (
        "memo-sign-report.schema.json",
        generate::<crate::release::sign::SignReport>,
    ),
    (
        "memo-verify-report.schema.json",
        generate::<crate::release::sign::VerifyReport>,
    ),
];

/// A schema as it is committed: pretty JSON with a trailing newline.
pub fn to_committed_text(schema: &Value) -> String {
    let mut text = serde_json::to_string_pretty(schema).expect("schemas serialize");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn committed_schemas_are_up_to_date() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas");
        let update = std::env::var("SPARSEGATE_UPDATE_SCHEMAS").as_deref() == Ok("1");
        for (name, generate) in COMMITTED {
            let path = dir.join(name);
            let generated = to_committed_text(&generate());
            if update {
                std::fs::write(&path, &generated).expect("write schema");
                continue;
            }
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                generated == committed,
                "schemas/{name} is out of date with the Rust types; regenerate it with \
                 `SPARSEGATE_UPDATE_SCHEMAS=1 cargo test --release schema` and commit the result"
            );
        }
    }
}
