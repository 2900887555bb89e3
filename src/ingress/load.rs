//! The pack loader: text → YAML → JSON Schema → typed pack → semantic checks → slices.
//!
//! Every failure is a [`PackError`] whose diagnostics point at `file:line:col`; the loader
//! never panics on user input and collects every problem of a pass before giving up.

use super::diagnostic::{Location, PackDiagnostic, PackError};
use super::pack::PackFile;
use super::span::{Locator, Pos, SpanIndex, escape_segment};
use super::{LoadedPack, expand, semantic};
use crate::domain::digest::sha256_hex;
use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{JsonType, ValidationError, Validator};
use serde::Deserialize;
use serde_json::Value;
use serde_saphyr::{Budget, MessageFormatter, Options, UserMessageFormatter};
use std::path::Path;
use std::sync::OnceLock;

/// The committed JSON Schema of the pack format; the loader validates against exactly this.
pub const PACK_SCHEMA_JSON: &str = include_str!("../../schemas/scenario-pack.schema.json");

/// Packs larger than this are refused before parsing.
const MAX_PACK_BYTES: usize = 4 << 20;

/// The smallest useful pack, quoted in hints.
const MINIMAL_KEYS: &str = "a pack needs at least `schema_version: 1`, `name`, `owners` (each with \
     `name`, `email`, `role`), `rollback: {trigger: ...}` and `slices`";

/// The pack format's JSON Schema (draft 2020-12), generated from [`PackFile`].
///
/// `schemas/scenario-pack.schema.json` is this value, pretty-printed; a test keeps the two
/// equal (see `crate::schema`).
pub fn pack_schema() -> Value {
    crate::domain::schema::generate::<PackFile>()
}

/// Load, validate and expand the scenario pack at `path`.
///
/// # Errors
///
/// A [`PackError`] listing every problem found, each located at `file:line:col` with a hint:
/// an unreadable or empty file, YAML syntax, schema violations, semantic problems.
pub fn load_pack(path: &Path) -> Result<LoadedPack, PackError> {
    let file = path.display().to_string();
    let fail = |diag: PackDiagnostic, text: String| PackError {
        path: path.to_path_buf(),
        source_text: text,
        diagnostics: vec![diag],
    };
    // Bounded and non-blocking: a FIFO, a device or a sparse giant is refused before any
    // byte is read (issue 23).
    let bytes = match crate::files::read_bounded_bytes(path, MAX_PACK_BYTES as u64) {
        Ok(b) => b,
        Err(e) => {
            let (message, hint) = match &e {
                crate::files::FileError::TooLarge { .. } => (
                    format!("pack is over the {} MiB limit", MAX_PACK_BYTES >> 20),
                    "split the pack, or move generated data out of it",
                ),
                crate::files::FileError::NotAFile { .. } => (
                    "cannot read pack: not a regular file (a directory, FIFO, socket or device)".to_owned(),
                    "point at the pack's YAML file itself",
                ),
                _ => (
                    format!("cannot read pack: {e}"),
                    "check the path and that the file is readable",
                ),
            };
            return Err(fail(start_diag(&file, message, hint), String::new()));
        }
    };
    let text = match String::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let good = e.utf8_error().valid_up_to();
            let prefix = String::from_utf8_lossy(&e.as_bytes()[..good]).into_owned();
            let line = prefix.matches('\n').count() + 1;
            let col = prefix.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            let pos = Pos {
                line: to_u32(line),
                col: to_u32(col),
                offset: good,
                len: 1,
            };
            let diag = PackDiagnostic {
                location: Location {
                    file,
                    line: pos.line,
                    col: pos.col,
                },
                pointer: String::new(),
                message: "pack is not valid UTF-8".into(),
                hint: Some("save the file as UTF-8".into()),
                span: (0, 0),
            };
            return Err(fail(diag, String::new()));
        }
    };
    parse_pack(path, text)
}

/// Validate and expand a pack whose text is already in memory; `path` names it in
/// diagnostics. [`load_pack`] is this after reading the file.
///
/// # Errors
///
/// As [`load_pack`], minus the I/O failures.
pub fn parse_pack(path: &Path, source: String) -> Result<LoadedPack, PackError> {
    let file = path.display().to_string();
    match check_text(&file, &source) {
        Ok((pack, slices, trigger, mut warnings)) => {
            let digest = sha256_hex(source.as_bytes());
            warnings.sort_by_key(|d| (d.location.line, d.location.col));
            warnings.dedup();
            Ok(LoadedPack {
                path: path.to_path_buf(),
                source,
                digest,
                file: pack,
                slices,
                trigger,
                warnings,
                left_out: Default::default(),
            })
        }
        Err(mut diagnostics) => {
            diagnostics.sort_by_key(|d| (d.location.line, d.location.col));
            diagnostics.dedup();
            Err(PackError {
                path: path.to_path_buf(),
                source_text: source,
                diagnostics,
            })
        }
    }
}

/// A checked pack: its typed form, its slices, its parsed rollback trigger and its warnings.
type CheckedText = (
    PackFile,
    Vec<super::Slice>,
    Option<super::TriggerExpr>,
    Vec<PackDiagnostic>,
);

fn check_text(file: &str, text: &str) -> Result<CheckedText, Vec<PackDiagnostic>> {
    if text.trim().is_empty() {
        return Err(vec![empty_diag(file)]);
    }
    let mut value = parse_yaml(file, text)?;
    if value.is_null() {
        return Err(vec![empty_diag(file)]);
    }
    if let Value::Object(map) = &mut value {
        map.retain(|k, _| !k.starts_with("x-"));
    }

    let loc = Locator {
        file: file.to_owned(),
        index: SpanIndex::build(text),
    };
    let repeated: Vec<PackDiagnostic> = loc
        .index
        .repeated_merges()
        .iter()
        .map(|(pointer, pos)| PackDiagnostic {
            location: loc.location(*pos),
            pointer: pointer.clone(),
            message: "duplicate merge key `<<` in one mapping".into(),
            hint: Some(
                "each key may appear once per mapping: merge several anchors with one key, `<<: [*a, *b]`"
                    .into(),
            ),
            span: (pos.offset, pos.len),
        })
        .collect();
    if !repeated.is_empty() {
        return Err(repeated);
    }
    let schema = compiled_schema().map_err(|e| {
        vec![start_diag(
            file,
            format!("internal error: the embedded pack schema is invalid: {e}"),
            BUG_HINT,
        )]
    })?;
    let mut diags = Vec::new();
    for error in schema.validator.iter_errors(&value) {
        schema_diags(&error, &schema.value, &loc, &mut diags);
    }
    if !diags.is_empty() {
        return Err(diags);
    }

    integral_floats_to_integers(&mut value);
    let pack: PackFile = match PackFile::deserialize(&value) {
        Ok(p) => p,
        Err(e) => {
            // Schema-clean but not representable: a number beyond its field's range. serde_json
            // quotes the value; find it to point there.
            let message = e.to_string();
            let pointer = message
                .split('`')
                .nth(1)
                .and_then(|quoted| find_number(&value, quoted, String::new()))
                .unwrap_or_default();
            return Err(vec![loc.at_value(
                &pointer,
                format!("value out of range: {message}"),
                Some(
                    "use a smaller number; see the field's range in schemas/scenario-pack.schema.json".into(),
                ),
            )]);
        }
    };
    let mut checked = semantic::check(&pack, &loc)?;
    let slices = expand::expand(&pack, &checked);
    let warnings = std::mem::take(&mut checked.warnings);
    Ok((pack, slices, checked.trigger, warnings))
}

/// The pointer of the first number in `value` that prints as `text`.
fn find_number(value: &Value, text: &str, pointer: String) -> Option<String> {
    match value {
        Value::Number(n) if n.to_string() == text => Some(pointer),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| find_number(v, text, format!("{pointer}/{i}"))),
        Value::Object(map) => map
            .iter()
            .find_map(|(k, v)| find_number(v, text, format!("{pointer}/{}", escape_segment(k)))),
        _ => None,
    }
}

/// JSON Schema counts `128.0` as an integer; let the typed model agree by storing such
/// numbers as integers (floats fields accept integers, so nothing else changes).
fn integral_floats_to_integers(value: &mut Value) {
    const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;
    match value {
        Value::Number(n) if n.is_f64() => {
            if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0) {
                if (0.0..TWO_POW_64).contains(&f) {
                    *value = Value::from(f as u64);
                } else if (i64::MIN as f64..0.0).contains(&f) {
                    *value = Value::from(f as i64);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_floats_to_integers),
        Value::Object(map) => map.values_mut().for_each(integral_floats_to_integers),
        _ => {}
    }
}

const BUG_HINT: &str = "this is a bug in sparsegate; please report it";

fn to_u32(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

fn start_diag(file: &str, message: impl Into<String>, hint: &str) -> PackDiagnostic {
    PackDiagnostic {
        location: Location {
            file: file.to_owned(),
            line: 1,
            col: 1,
        },
        pointer: String::new(),
        message: message.into(),
        hint: Some(hint.to_owned()),
        span: (0, 0),
    }
}

fn empty_diag(file: &str) -> PackDiagnostic {
    start_diag(
        file,
        "pack is empty",
        "start from:\n    schema_version: 1\n    name: my-pack\n    owners: [{name: Ada, email: ada@example.com, role: owner}]\n    rollback: {trigger: \"2:4 speedup below 1.1x\"}\n    slices:\n      - {id: qkv, workload: {ops: [{gemm: {name: qkv, m: 128, n: 2304, k: 768}}]}, sparsity: [\"2:4\"]}",
    )
}

/// Parse the YAML into a JSON value: anchors and merge keys expanded, duplicate keys
/// refused, within budgets that stop pathological input (alias bombs, deep nesting).
fn parse_yaml(file: &str, text: &str) -> Result<Value, Vec<PackDiagnostic>> {
    let mut budget = Budget::default();
    budget.max_depth = 32;
    budget.max_nodes = 100_000;
    budget.max_events = 250_000;
    budget.max_aliases = 10_000;
    budget.max_anchors = 10_000;
    budget.max_documents = 1;
    budget.max_total_scalar_bytes = MAX_PACK_BYTES;
    budget.max_merge_keys = 10_000;
    let mut options = Options::default();
    options.budget = Some(budget);
    options.alias_limits.max_total_replayed_events = 200_000;
    options.with_snippet = false;
    // `!!python/object` and other tags we do not know were ignored silently (issue 23).
    options.reject_unsupported_tags = true;
    serde_saphyr::from_str_with_options::<Value>(text, options).map_err(|e| {
        let message = UserMessageFormatter
            .format_message(&e)
            .replace(char::is_control, " ");
        let (line, col) = e.location().map_or((1, 1), |l| {
            (
                u32::try_from(l.line()).unwrap_or(1),
                u32::try_from(l.column()).unwrap_or(1),
            )
        });
        let (line, col) = (line.max(1), col.max(1));
        let offset = byte_offset(text, line, col);
        let len = text[offset..].chars().next().map_or(0, char::len_utf8);
        let (message, hint) = if message.contains("duplicate") {
            (
                message,
                "each key may appear once per mapping: remove or rename one of them",
            )
        } else if message.contains("Documents") {
            (
                "a pack is a single YAML document".to_owned(),
                "remove the second `---` document, or split it into its own pack file",
            )
        } else if message.contains("limits breached") || message.contains("recursion limit") {
            (
                format!("pack is too large or too deeply nested to load ({message})"),
                "packs are small, hand-written files: look for runaway aliases (`*name`) or deep nesting",
            )
        } else if message.contains("finite") {
            (message, "use a finite number")
        } else {
            (
                format!("YAML syntax: {message}"),
                "check indentation, quoting and `key: value` pairs; quote strings such as \"2:4\" or \"5%\" \
                 when in doubt",
            )
        };
        vec![PackDiagnostic {
            location: Location {
                file: file.to_owned(),
                line,
                col,
            },
            pointer: String::new(),
            message,
            hint: Some(hint.into()),
            span: (offset, len),
        }]
    })
}

/// Byte offset of a 1-based line and character column, clamped to the text.
fn byte_offset(text: &str, line: u32, col: u32) -> usize {
    let mut start = 0;
    for _ in 1..line {
        match text[start..].find('\n') {
            Some(i) => start += i + 1,
            None => return text.len(),
        }
    }
    let rest = &text[start..];
    start
        + rest
            .char_indices()
            .nth(col as usize - 1)
            .map_or(rest.len(), |(i, _)| i)
}

struct CompiledSchema {
    value: Value,
    validator: Validator,
}

fn compiled_schema() -> Result<&'static CompiledSchema, String> {
    static SCHEMA: OnceLock<Result<CompiledSchema, String>> = OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            let value: Value = serde_json::from_str(PACK_SCHEMA_JSON).map_err(|e| e.to_string())?;
            let validator = jsonschema::draft202012::new(&value).map_err(|e| e.to_string())?;
            Ok(CompiledSchema { value, validator })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Follow a schema location (a JSON pointer that may pass through `$ref`) to its node.
fn schema_node<'a>(schema: &'a Value, path: &str) -> Option<&'a Value> {
    let mut node = schema;
    for raw in path.split('/').skip(1) {
        let seg = raw.replace("~1", "/").replace("~0", "~");
        node = if seg == "$ref" {
            resolve_ref(schema, node)?
        } else {
            match node {
                Value::Object(m) => m.get(&seg)?,
                Value::Array(a) => a.get(seg.parse::<usize>().ok()?)?,
                _ => return None,
            }
        };
    }
    Some(node)
}

fn resolve_ref<'a>(schema: &'a Value, node: &'a Value) -> Option<&'a Value> {
    let r = node.get("$ref")?.as_str()?;
    schema.pointer(r.strip_prefix('#')?)
}

/// The node itself, or what its `$ref` points at.
fn deref<'a>(schema: &'a Value, node: &'a Value) -> &'a Value {
    resolve_ref(schema, node).unwrap_or(node)
}

/// The schema object holding the keyword that failed (its parent in the schema path).
fn keyword_parent<'a>(schema: &'a Value, schema_path: &str) -> Option<&'a Value> {
    let parent = schema_path.rfind('/').map(|i| &schema_path[..i])?;
    schema_node(schema, parent).map(|n| deref(schema, n))
}

fn description(node: &Value) -> Option<String> {
    node.get("description")
        .and_then(Value::as_str)
        .map(|d| d.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// A readable name for the value at `pointer`: its key, or `key[i]` for a list item.
fn last_segment(pointer: &str) -> String {
    if pointer.is_empty() {
        return "pack".into();
    }
    let mut segments = pointer.rsplit('/').filter(|s| !s.is_empty());
    let Some(last) = segments.next() else {
        return "pack".into();
    };
    let unescape = |s: &str| s.replace("~1", "/").replace("~0", "~");
    if last.parse::<usize>().is_ok() {
        match segments.next() {
            Some(parent) => format!("{}[{last}]", unescape(parent)),
            None => format!("[{last}]"),
        }
    } else {
        unescape(last)
    }
}

fn choice(v: &Value) -> String {
    match v.as_str() {
        Some(s) => format!("`{s}`"),
        None => format!("`{v}`"),
    }
}

fn describe(v: &Value) -> String {
    match v {
        Value::Null => "an empty value (null)".into(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => {
            let mut short: String = s.chars().take(40).collect();
            if short.len() < s.len() {
                short.push('…');
            }
            format!("string {short:?}")
        }
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "a mapping".into(),
    }
}

fn type_name(t: JsonType) -> &'static str {
    match t {
        JsonType::Array => "a list",
        JsonType::Boolean => "a boolean (true or false)",
        JsonType::Integer => "an integer",
        JsonType::Null => "nothing (null)",
        JsonType::Number => "a number",
        JsonType::Object => "a mapping",
        JsonType::String => "a string",
    }
}

fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

const ID_PATTERN_HINT: &str = "use lowercase letters, digits, `-` and `_`, starting with a letter or digit";

/// Turn one schema error into located, human diagnostics.
fn schema_diags(error: &ValidationError<'_>, schema: &Value, loc: &Locator, out: &mut Vec<PackDiagnostic>) {
    let pointer = error.instance_path().as_str().to_owned();
    let schema_path = error.schema_path().as_str().to_owned();
    let instance = error.instance();
    let parent = keyword_parent(schema, &schema_path);
    let field = last_segment(&pointer);
    let field_hint = || {
        if pointer.is_empty() {
            Some(MINIMAL_KEYS.to_owned())
        } else {
            parent.and_then(description).map(|d| format!("`{field}`: {d}"))
        }
    };

    match error.kind() {
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            let mut allowed: Vec<String> = parent
                .and_then(|p| p.get("properties"))
                .and_then(Value::as_object)
                .map(|m| m.keys().map(|k| format!("`{k}`")).collect())
                .unwrap_or_default();
            if parent.and_then(|p| p.get("patternProperties")).is_some() {
                allowed.push("keys starting with `x-` (for anchors)".into());
            }
            for key in unexpected {
                let hint = if allowed.is_empty() {
                    None
                } else {
                    Some(format!("allowed keys here: {}", allowed.join(", ")))
                };
                out.push(loc.at_key(
                    &format!("{pointer}/{}", escape_segment(key)),
                    format!("unknown key `{key}`"),
                    hint,
                ));
            }
        }
        ValidationErrorKind::Required { property } => {
            let name = property
                .as_str()
                .map_or_else(|| property.to_string(), str::to_owned);
            let prop_hint = parent
                .and_then(|p| p.get("properties"))
                .and_then(|p| p.get(&name))
                .and_then(|n| description(n).or_else(|| description(deref(schema, n))));
            let hint = match prop_hint {
                Some(d) => format!("add `{name}:` ({d})"),
                None => format!("add `{name}:`"),
            };
            let hint = if pointer.is_empty() {
                format!("{hint}; {MINIMAL_KEYS}")
            } else {
                hint
            };
            let whose = if pointer.is_empty() {
                "the pack".to_owned()
            } else {
                format!("`{field}`")
            };
            out.push(loc.at_key(
                &pointer,
                format!("missing required key `{name}` in {whose}"),
                Some(hint),
            ));
        }
        ValidationErrorKind::Type { kind } => {
            let expected = match kind {
                TypeKind::Single(t) => type_name(*t).to_owned(),
                TypeKind::Multiple(set) => {
                    let names: Vec<&str> = set
                        .iter()
                        .filter(|t| *t != JsonType::Null)
                        .map(type_name)
                        .collect();
                    names.join(" or ")
                }
            };
            let hint = if field == "regress_at_most" {
                Some(
                    "write the tolerated regression as a percentage string, e.g. `regress_at_most: 5%`"
                        .into(),
                )
            } else if matches!(instance.as_ref(), Value::String(s) if s.contains(':')) && field == "sparsity"
            {
                Some("`sparsity` is a list, e.g. `sparsity: [\"2:4\"]`".into())
            } else {
                field_hint()
            };
            out.push(loc.at_value(
                &pointer,
                format!("expected {expected}, found {}", describe(instance)),
                hint,
            ));
        }
        ValidationErrorKind::Minimum { limit }
        | ValidationErrorKind::Maximum { limit }
        | ValidationErrorKind::ExclusiveMinimum { limit }
        | ValidationErrorKind::ExclusiveMaximum { limit } => {
            let bound = match error.kind() {
                ValidationErrorKind::Minimum { .. } => "is less than the minimum of",
                ValidationErrorKind::Maximum { .. } => "is greater than the maximum of",
                ValidationErrorKind::ExclusiveMinimum { .. } => "must be greater than",
                _ => "must be less than",
            };
            let message = format!("{} {bound} {limit}", plain(instance));
            out.push(loc.at_value(&pointer, message, field_hint()));
        }
        ValidationErrorKind::MinLength { limit } => {
            let message = if *limit <= 1 {
                format!("`{field}` must not be empty")
            } else {
                format!("{} is shorter than {limit} characters", plain(instance))
            };
            out.push(loc.at_value(&pointer, message, field_hint()));
        }
        ValidationErrorKind::MaxLength { limit } => out.push(loc.at_value(
            &pointer,
            format!("{} is longer than {limit} characters", plain(instance)),
            field_hint(),
        )),
        ValidationErrorKind::MinItems { limit } => {
            let message = if *limit <= 1 {
                format!("`{field}` must list at least one entry")
            } else {
                format!("`{field}` must list at least {limit} entries")
            };
            out.push(loc.at_key(&pointer, message, field_hint()));
        }
        ValidationErrorKind::MaxItems { limit } => out.push(loc.at_key(
            &pointer,
            format!("`{field}` lists more than {limit} entries"),
            field_hint(),
        )),
        ValidationErrorKind::Pattern { pattern } => {
            let hint = if pattern.contains("a-z0-9") {
                Some(ID_PATTERN_HINT.into())
            } else {
                field_hint()
            };
            out.push(loc.at_value(
                &pointer,
                format!("{} does not match the pattern `{pattern}`", describe(instance)),
                hint,
            ));
        }
        ValidationErrorKind::Enum { options } => {
            let choices: Vec<String> = options
                .as_array()
                .map(|a| a.iter().map(choice).collect())
                .unwrap_or_default();
            out.push(loc.at_value(
                &pointer,
                format!("unknown value {}", describe(instance)),
                Some(format!("expected one of {}", choices.join(", "))),
            ));
        }
        ValidationErrorKind::Constant { expected_value } => out.push(loc.at_value(
            &pointer,
            format!("expected {}, found {}", plain(expected_value), describe(instance)),
            None,
        )),
        ValidationErrorKind::OneOfNotValid { context } | ValidationErrorKind::AnyOf { context }
            if context.len() == 1 =>
        {
            for e in &context[0] {
                schema_diags(e, schema, loc, out);
            }
        }
        ValidationErrorKind::OneOfNotValid { context } | ValidationErrorKind::AnyOf { context } => {
            // A documented enum is a `oneOf` of constants: name the choices.
            let constants: Option<Vec<String>> = context
                .iter()
                .map(|branch| match branch.as_slice() {
                    [e] => match e.kind() {
                        ValidationErrorKind::Constant { expected_value } => Some(choice(expected_value)),
                        _ => None,
                    },
                    _ => None,
                })
                .collect();
            if let Some(choices) = constants.filter(|c| !c.is_empty()) {
                out.push(loc.at_value(
                    &pointer,
                    format!("unknown value {}", describe(instance)),
                    Some(format!("expected one of {}", choices.join(", "))),
                ));
                return;
            }
            // Several forms are allowed: report the closest (fewest errors) when it is
            // unambiguous, else say that none matched.
            let best = context.iter().min_by_key(|errs| errs.len());
            match best {
                Some(errs) if context.iter().filter(|e| e.len() == errs.len()).count() == 1 => {
                    for e in errs {
                        schema_diags(e, schema, loc, out);
                    }
                }
                _ => out.push(loc.at_value(
                    &pointer,
                    format!("{} matches none of the allowed forms", describe(instance)),
                    field_hint(),
                )),
            }
        }
        _ => out.push(loc.at_value(&pointer, error.to_string(), field_hint())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_offsets() {
        let t = "ab\ncdé f\n";
        assert_eq!(byte_offset(t, 1, 1), 0);
        assert_eq!(byte_offset(t, 2, 1), 3);
        assert_eq!(byte_offset(t, 2, 5), 8);
        assert_eq!(byte_offset(t, 9, 9), t.len());
    }
}
