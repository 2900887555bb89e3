//! Signing and verifying closure memos (issue 6): two owners sign, anyone verifies, and
//! every tampering case is caught with exit 2.

use crate::support::{
    Sandbox, assert_contains, assert_exit, assert_refused, assert_stdout_matches_schema, stderr, stdout,
    stdout_json,
};
use ssh_key::private::Ed25519Keypair;
use ssh_key::{LineEnding, PrivateKey};

pub(crate) const PACK: &str = "
schema_version: 1
name: signed
owners:
  - {name: Ada, email: ada@example.com, role: owner}
  - {name: Grace, email: grace@example.com, role: release-manager}
rollback:
  trigger: speedup below 1x
samples: {warmup: 1, min: 8, max: 10, time_budget_s: 0.05}
slices:
  - id: tiny
    workload:
      ops:
        - gemm: {name: proj, m: 32, n: 64, k: 64}
    sparsity: [\"2:4\"]
    guardrails:
      - {metric: fallback_rate, at_most: 0}
";

/// Write an ed25519 key made from `seed` as `<name>` / `<name>.pub`; returns the public line.
pub(crate) fn key(sb: &Sandbox, name: &str, email: &str, seed: u8) -> String {
    let mut key = PrivateKey::from(Ed25519Keypair::from_seed(&[seed; 32]));
    key.set_comment(email);
    let private = key.to_openssh(LineEnding::LF).unwrap();
    let path = sb.write(name, &private);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    key.public_key().to_openssh().unwrap()
}

/// A gated memo signed by both owners, with an allowed_signers file for them.
pub(crate) fn signed_memo() -> Sandbox {
    signed_memo_of(PACK, 0)
}

/// A memo of `pack` (whose gate exits `exit`) signed by both owners (Ada `owner`, Grace
/// `release-manager`), with an allowed_signers file for them.
pub(crate) fn signed_memo_of(pack: &str, exit: i32) -> Sandbox {
    let sb = Sandbox::with_pack(pack);
    let ada = key(&sb, "ada", "ada@example.com", 1);
    let grace = key(&sb, "grace", "grace@example.com", 2);
    sb.write(
        "allowed_signers",
        &format!("ada@example.com {ada}\ngrace@example.com namespaces=\"sparsegate-memo\" {grace}\n"),
    );
    assert_exit(&sb.gate("pack.yaml", &["-q"]), exit);
    for (k, role) in [("ada", "owner"), ("grace", "release-manager")] {
        assert_exit(&sign(&sb, k, role), 0);
    }
    sb
}

/// `memo sign out --key KEY --role ROLE --allowed-signers allowed_signers`.
pub(crate) fn sign(sb: &Sandbox, key: &str, role: &str) -> std::process::Output {
    sb.output(&[
        "memo",
        "sign",
        "out",
        "--key",
        key,
        "--role",
        role,
        "--allowed-signers",
        "allowed_signers",
    ])
}

pub(crate) fn verify(sb: &Sandbox) -> std::process::Output {
    sb.output(&["memo", "verify", "out", "--allowed-signers", "allowed_signers"])
}

#[test]
fn issue_6_two_owners_sign_and_verify() {
    let sb = signed_memo();
    let out = verify(&sb);
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert_contains(&text, "owner: ada@example.com");
    assert_contains(&text, "release-manager: grace@example.com");
    let envelope = sb.json("out/memo.intoto.json");
    assert_eq!(envelope["payloadType"], "application/vnd.in-toto+json");
    assert_eq!(envelope["signatures"].as_array().unwrap().len(), 2);
}

/// Issue 19: both `--json` reports are what their committed schemas describe.
#[test]
fn verify_and_sign_print_the_reports_their_schemas_describe() {
    let sb = signed_memo();
    let out = sb.output(&[
        "memo",
        "verify",
        "out",
        "--allowed-signers",
        "allowed_signers",
        "--json",
    ]);
    assert_exit(&out, 0);
    assert_stdout_matches_schema(&out, "memo-verify-report.schema.json");
    let verified = stdout_json(&out);
    assert_eq!(verified["roles"].as_array().unwrap().len(), 2, "{verified}");
    assert_eq!(verified["envelope_signatures"], 2, "{verified}");

    let out = sb.output(&[
        "memo",
        "sign",
        "out",
        "--key",
        "ada",
        "--role",
        "owner",
        "--allowed-signers",
        "allowed_signers",
        "--json",
    ]);
    assert_exit(&out, 0);
    assert_stdout_matches_schema(&out, "memo-sign-report.schema.json");
    let signed = stdout_json(&out);
    assert_eq!(signed["role"], "owner");
    assert!(
        signed["fingerprint"].as_str().unwrap().starts_with("SHA256:"),
        "{signed}"
    );
}

#[test]
fn issue_6_stock_ssh_keygen_accepts_the_signature() {
    let sb = signed_memo();
    // Issue 23: each role signs the statement (every digest, every role), not memo.json.
    let Ok(memo) = std::fs::File::open(sb.path().join("out/memo.statement.json")) else {
        panic!("no memo.statement.json")
    };
    let status = std::process::Command::new("ssh-keygen")
        .current_dir(sb.path())
        .args([
            "-Y",
            "verify",
            "-n",
            "sparsegate-memo",
            "-f",
            "allowed_signers",
            "-I",
            "grace@example.com",
        ])
        .args(["-s", "out/memo.statement.json.release-manager.sig"])
        .stdin(memo)
        .output();
    match status {
        // No OpenSSH on this machine: the Rust verifier above is the check.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("ssh-keygen: {e}"),
        Ok(out) => assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out)),
    }
}

#[test]
fn issue_6_a_flipped_byte_in_the_memo_fails() {
    let sb = signed_memo();
    // One byte: the rollback trigger now reads "below 2x".
    let text = sb.read("out/memo.json");
    assert!(text.contains("speedup below 1x"));
    sb.write_raw(
        "out/memo.json",
        &text.replace("speedup below 1x", "speedup below 2x"),
    );
    assert_refused(&verify(&sb), "memo.json changed since signing");
}

#[test]
fn issue_6_memo_replayed_against_other_evidence_fails() {
    let sb = signed_memo();
    // Another run's evidence put beside the signed memo (a `run --out out` would replace
    // the whole output set, signatures included: issue 23).
    assert_exit(&sb.output(&["run", "pack.yaml", "--out", "other", "-q"]), 0);
    std::fs::copy(
        sb.path().join("other/evidence.json"),
        sb.path().join("out/evidence.json"),
    )
    .unwrap();
    assert_refused(&verify(&sb), "evidence.json changed since signing");
}

/// Issue 23: `memo sign` itself refuses a key that allowed_signers does not bind to a holder
/// of the role (issue 6 only caught it at verify).
#[test]
fn signing_with_a_key_not_bound_to_the_role_is_refused() {
    let sb = signed_memo();
    let before = sb.read("out/memo.statement.json.owner.sig");
    key(&sb, "mallory", "mallory@example.com", 9);
    assert_refused(&sign(&sb, "mallory", "owner"), "does not list the key");
    // Listed, but as someone who holds no role in the pack.
    let mallory = key(&sb, "mallory", "mallory@example.com", 9);
    let signers = sb.read("allowed_signers");
    sb.write(
        "allowed_signers",
        &format!("{signers}mallory@example.com {mallory}\n"),
    );
    assert_refused(
        &sign(&sb, "mallory", "owner"),
        "is bound to mallory@example.com, and role `owner` is held by ada@example.com",
    );
    // Grace's key is bound, but to the other role.
    assert_refused(&sign(&sb, "grace", "owner"), "refusing to sign for `owner`");
    assert_eq!(sb.read("out/memo.statement.json.owner.sig"), before);
    assert_exit(&verify(&sb), 0);
}

#[test]
fn issue_6_a_missing_role_fails() {
    let sb = signed_memo();
    std::fs::remove_file(sb.path().join("out/memo.statement.json.release-manager.sig")).unwrap();
    assert_refused(&verify(&sb), "role `release-manager` has not signed");
}

#[test]
fn issue_6_signing_for_a_role_nobody_holds_is_refused() {
    let sb = signed_memo();
    assert_refused(&sign(&sb, "ada", "janitor"), "release-manager");
}

/// Issue 6: a gate measures the CPU roofs into the evidence's environment (not the lock),
/// times every op, and the memo carries each slice's diagnosis: the roofline point, the
/// class with its numbers, and the dense-fallback impact.
#[test]
fn issue_6_gate_records_roofs_per_op_costs_and_the_fallback_impact() {
    let sb = Sandbox::with_pack(
        "
schema_version: 1
name: roofs
owners: [{name: Ada, email: ada@example.com, role: owner}]
rollback: {trigger: any fallback}
samples: {warmup: 1, min: 6, max: 8, time_budget_s: 0.05}
slices:
  - id: mixed
    workload: {ops: [{gemm: {name: proj, m: 32, n: 64, k: 64}}, {gemm: {name: odd, m: 32, n: 64, k: 62}}]}
    sparsity: [\"2:4\"]
    guardrails: [{metric: fallback_rate, at_most: 1}]
  - id: sim
    backend: sim
    preset: h100
    precision: [fp16]
    workload: {ops: [{gemm: {name: proj, m: 4096, n: 768, k: 768}}, {gemm: {name: odd, m: 4096, n: 768, k: 766}}]}
    sparsity: [\"2:4\"]
    guardrails: [{metric: fallback_rate, at_most: 1}]
",
    );
    assert_exit(&sb.gate("pack.yaml", &["-q"]), 0);
    let evidence = sb.json("out/evidence.json");
    let roofs = &evidence["environment"]["roofs"];
    assert!(roofs["peak_gflops"].as_f64().unwrap() > 0.0, "{roofs}");
    assert!(roofs["bandwidth_gbps"].as_f64().unwrap() > 0.0, "{roofs}");
    for s in evidence["slices"].as_array().unwrap() {
        assert_eq!(s["op_costs"].as_array().unwrap().len(), 2, "{s}");
    }
    let memo = sb.json("out/memo.json");
    let slices = memo["slices"].as_array().unwrap();
    let cpu = &slices[0]["diagnosis"];
    assert_eq!(cpu["class"], "fallback", "{cpu}");
    assert_eq!(cpu["fallback"]["fallback_ops"], serde_json::json!(["odd"]));
    let share = cpu["fallback"]["latency_share"].as_f64().unwrap();
    assert!(share > 0.0 && share < 1.0, "{cpu}");
    assert_eq!(cpu["roofline"]["machine"], "cpu");
    assert!(
        cpu["fallback"]["note"]
            .as_str()
            .unwrap()
            .contains("energy not measured on CPU")
    );
    let sim = &slices[1]["diagnosis"];
    assert_eq!(sim["roofline"]["machine"], "h100", "{sim}");
    let energy = sim["fallback"]["energy_share"].as_f64().unwrap();
    assert!(energy > 0.0 && energy < 1.0, "{sim}");
    assert!(sim["fallback"]["latency_gain"].as_f64().unwrap() > 0.0, "{sim}");
    let html = sb.read("out/memo.html");
    assert!(html.contains("aria-label=\"Roofline of cpu\""));
    assert!(html.contains("aria-label=\"Roofline of h100\""));
    let md = sb.read("out/memo.md");
    assert_contains(&md, "### Dense-fallback impact on latency and energy");
}

/// Issue 19: with several owner roles and no `--role`, signing is refused; the library says
/// what is wrong and lists the roles, the binary names the flag.
#[test]
fn signing_a_memo_with_several_roles_needs_a_role() {
    let sb = Sandbox::with_pack(PACK);
    let ada = key(&sb, "ada", "ada@example.com", 1);
    sb.write("allowed_signers", &format!("ada@example.com {ada}\n"));
    assert_exit(&sb.gate("pack.yaml", &["-q"]), 0);
    let out = sb.output(&[
        "memo",
        "sign",
        "out",
        "--key",
        "ada",
        "--allowed-signers",
        "allowed_signers",
    ]);
    assert_refused(
        &out,
        "this memo has several owner roles; say which one you sign for",
    );
    assert_contains(&stderr(&out), "pass --role with one of: owner, release-manager");
}
