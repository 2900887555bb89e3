//! Every `--json` output is a typed report with a committed, drift-checked schema (issue 19).
//! The tests of each command validate what it prints against its schema; this one keeps the
//! list complete: a command that grows a `--json` flag fails here until its report is named.

use crate::support::{Sandbox, stdout};

/// Each command with a `--json` flag and the committed schema its stdout follows. `gate`
/// and `merge` print verdict.json, whose schema is the verdict's.
const REPORTS: &[(&str, &str)] = &[
    ("validate", "validate-report.schema.json"),
    ("run", "run-report.schema.json"),
    ("merge", "verdict.schema.json"),
    ("gate", "verdict.schema.json"),
    ("history", "history-report.schema.json"),
    ("trend", "trend-report.schema.json"),
    ("memo sign", "memo-sign-report.schema.json"),
    ("memo verify", "memo-verify-report.schema.json"),
    ("bless", "bless-report.schema.json"),
    ("stats compare", "stats-compare-report.schema.json"),
    ("bench", "bench-report.schema.json"),
    ("sim", "sim-report.schema.json"),
];

/// The subcommands `--help` lists under `Commands:` (without `help`).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// Every leaf command (`memo sign`, `sim`, ...) whose help offers `--json`, in help order.
fn commands_with_json(sb: &Sandbox, path: &[String], found: &mut Vec<String>) {
    let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
    args.push("--help");
    let help = stdout(&sb.output(&args));
    let children = subcommands(&help);
    if children.is_empty() {
        if help.contains("--json") {
            found.push(path.join(" "));
        }
        return;
    }
    for child in children {
        let mut next = path.to_vec();
        next.push(child);
        commands_with_json(sb, &next, found);
    }
}

#[test]
fn every_command_with_a_json_flag_names_a_committed_report_schema() {
    let sb = Sandbox::new();
    let mut found = Vec::new();
    commands_with_json(&sb, &[], &mut found);
    let listed: Vec<&str> = REPORTS.iter().map(|(command, _)| *command).collect();
    assert_eq!(
        found, listed,
        "the commands with --json differ from REPORTS: type the new report, commit its schema \
         (src/schema.rs) and name it here"
    );
    let committed: Vec<&str> = sparsegate::schema::COMMITTED
        .iter()
        .map(|(name, _)| *name)
        .collect();
    for (command, schema) in REPORTS {
        assert!(
            committed.contains(schema),
            "`{command} --json` names {schema}, which src/schema.rs does not commit"
        );
    }
}
