//! How a file format's JSON Schema is derived from its Rust type, the same way for every
//! format (the committed files and their drift test live in `crate::schema`).

use serde_json::Value;

/// The schema of `T` as draft 2020-12 JSON.
pub fn generate<T: schemars::JsonSchema>() -> Value {
    schemars::generate::SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value()
}
