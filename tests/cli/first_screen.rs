//! The memo's first screen (issue 24): the call in one sentence, who must act, and whether
//! the rollback trigger fired, end to end through `gate`.

use crate::support::{FAST, Sandbox, assert_contains, assert_exit, stdout};

fn pack(severity: &str, routing: &str) -> String {
    format!(
        "schema_version: 1
name: first-screen
owners:
  - {{name: Ada, email: ada@example.com, role: owner}}
  - {{name: Grace, email: grace@example.com, role: release-manager}}
rollback:
  trigger: the projection is not 1000x faster than dense
  when: proj-speedup
  action: ship the dense weights
{routing}samples: {FAST}
slices:
  - id: proj
    workload:
      ops:
        - gemm: {{name: proj, m: 32, n: 64, k: 64}}
    sparsity: [\"2:4\"]
    guardrails:
      - {{id: proj-speedup, metric: effective_speedup, at_least: 1000, severity: {severity}}}
      - {{metric: fallback_rate, at_most: 0}}
"
    )
}

/// A trigger over an advisory guardrail that failed fires and fails the gate; the memo
/// opens with the call, the trigger state and the routed owner.
#[test]
fn issue_24_a_fired_trigger_over_an_advisory_guardrail_fails_the_gate_and_leads_the_memo() {
    let sb = Sandbox::with_pack(&pack("warn", "routing: {kernel: release-manager}\n"));
    let out = sb.gate("pack.yaml", &[]);
    assert_exit(&out, 1);
    assert_contains(
        &stdout(&out),
        "Do not ship: the rollback trigger of first-screen fired",
    );
    let memo = sb.read("out/memo.md");
    let first_screen: String = memo.lines().take(12).collect::<Vec<_>>().join("\n");
    for needle in [
        "# DO NOT SHIP: closure memo (verdict fail, exit 1)",
        "**Rollback trigger: FIRED.**",
        "**Roll back:** ship the dense weights",
        "**release-manager** (accelerator architecture owner): Grace <grace@example.com>",
        "routed by routing.kernel",
    ] {
        assert_contains(&first_screen, needle);
    }
    let verdict: serde_json::Value = serde_json::from_str(&sb.read("out/verdict.json")).unwrap();
    assert_eq!(verdict["brief"]["call"], "do_not_ship");
    assert_eq!(verdict["brief"]["rollback"][0]["state"], "fired");
    let html = sb.read("out/memo.html");
    let decision = html.find("id=\"decision\"").expect("a decision section");
    assert!(
        decision < html.find("Validation matrix").unwrap(),
        "the decision comes first"
    );
}

/// When everything holds the memo says to ship and that the trigger was checked and did
/// not fire; failures-first ordering puts nothing above the passing rows.
#[test]
fn issue_24_a_passing_gate_says_ship_and_that_the_trigger_did_not_fire() {
    let sb = Sandbox::with_pack(&pack("block", "").replace("at_least: 1000", "at_least: 0.01"));
    assert_exit(&sb.gate("pack.yaml", &["-q"]), 0);
    let memo = sb.read("out/memo.md");
    assert_contains(&memo, "# SHIP: closure memo (verdict pass, exit 0)");
    assert_contains(
        &memo,
        "**Ship: all 2 blocking guardrails passed and no rollback trigger fired.**",
    );
    assert_contains(&memo, "**Rollback trigger: not fired.**");
    assert!(!memo.contains("Who must act"), "{memo}");
}
