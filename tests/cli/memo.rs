//! Signing and verifying closure memos (issue 6): two owners sign, anyone verifies, and
//! every tampering case is caught with exit 2.

use crate::support::{Sandbox, stderr, stdout};
use ssh_key::private::Ed25519Keypair;
use ssh_key::{LineEnding, PrivateKey};

const PACK: &str = "
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
fn key(sb: &Sandbox, name: &str, email: &str, seed: u8) -> String {
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
fn signed_memo() -> Sandbox {
    let sb = Sandbox::new();
    sb.write("pack.yaml", PACK);
    let ada = key(&sb, "ada", "ada@example.com", 1);
    let grace = key(&sb, "grace", "grace@example.com", 2);
    sb.write(
        "allowed_signers",
        &format!("ada@example.com {ada}\ngrace@example.com namespaces=\"sparsegate-memo\" {grace}\n"),
    );
    let out = sb
        .cmd(&["gate", "pack.yaml", "--out", "out", "-q"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for (k, role) in [("ada", "owner"), ("grace", "release-manager")] {
        let out = sb
            .cmd(&["memo", "sign", "out", "--key", k, "--role", role])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    sb
}

fn verify(sb: &Sandbox) -> std::process::Output {
    sb.cmd(&["memo", "verify", "out", "--allowed-signers", "allowed_signers"])
        .output()
        .unwrap()
}

#[test]
fn issue_6_two_owners_sign_and_verify() {
    let sb = signed_memo();
    let out = verify(&sb);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("owner: ada@example.com") && text.contains("release-manager: grace@example.com"),
        "{text}"
    );
    let envelope: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sb.path().join("out/memo.intoto.json")).unwrap())
            .unwrap();
    assert_eq!(envelope["payloadType"], "application/vnd.in-toto+json");
    assert_eq!(envelope["signatures"].as_array().unwrap().len(), 2);
}

#[test]
fn issue_6_stock_ssh_keygen_accepts_the_signature() {
    let sb = signed_memo();
    let Ok(memo) = std::fs::File::open(sb.path().join("out/memo.json")) else {
        panic!("no memo.json")
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
        .args(["-s", "out/memo.json.release-manager.sig"])
        .stdin(memo)
        .output();
    match status {
        // No OpenSSH on this machine: the Rust verifier above is the check.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("ssh-keygen: {e}"),
        Ok(out) => assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out)),
    }
}

fn assert_refused(sb: &Sandbox, needle: &str) {
    let out = verify(sb);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(needle), "expected {needle:?} in:\n{err}");
}

#[test]
fn issue_6_a_flipped_byte_in_the_memo_fails() {
    let sb = signed_memo();
    let path = sb.path().join("out/memo.json");
    // One byte: the rollback trigger now reads "below 2x".
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("speedup below 1x"));
    std::fs::write(&path, text.replace("speedup below 1x", "speedup below 2x")).unwrap();
    assert_refused(&sb, "memo.json changed since signing");
}

#[test]
fn issue_6_memo_replayed_against_other_evidence_fails() {
    let sb = signed_memo();
    let out = sb
        .cmd(&["run", "pack.yaml", "--out", "out", "-q"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_refused(&sb, "evidence.json changed since signing");
}

#[test]
fn issue_6_a_key_not_bound_to_the_role_fails() {
    let sb = signed_memo();
    key(&sb, "mallory", "mallory@example.com", 9);
    let out = sb
        .cmd(&["memo", "sign", "out", "--key", "mallory", "--role", "owner"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_refused(&sb, "does not bind to an owner with that role");
}

#[test]
fn issue_6_a_missing_role_fails() {
    let sb = signed_memo();
    std::fs::remove_file(sb.path().join("out/memo.json.release-manager.sig")).unwrap();
    assert_refused(&sb, "role `release-manager` has not signed");
}

#[test]
fn issue_6_signing_for_a_role_nobody_holds_is_refused() {
    let sb = signed_memo();
    let out = sb
        .cmd(&["memo", "sign", "out", "--key", "ada", "--role", "janitor"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("release-manager"), "{}", stderr(&out));
}

/// Issue 6: a gate measures the CPU roofs into the evidence's environment (not the lock),
/// times every op, and the memo carries each slice's diagnosis: the roofline point, the
/// class with its numbers, and the dense-fallback impact.
#[test]
fn issue_6_gate_records_roofs_per_op_costs_and_the_fallback_impact() {
    let sb = Sandbox::new();
    sb.write(
        "pack.yaml",
        "
schema_version: 1
name: roofs
owners:
  - {name: Ada, email: ada@example.com, role: owner}
rollback:
  trigger: any fallback
samples: {warmup: 1, min: 6, max: 8, time_budget_s: 0.05}
slices:
  - id: mixed
    workload:
      ops:
        - gemm: {name: proj, m: 32, n: 64, k: 64}
        - gemm: {name: odd, m: 32, n: 64, k: 62}
    sparsity: [\"2:4\"]
    guardrails:
      - {metric: fallback_rate, at_most: 1}
  - id: sim
    backend: sim
    preset: h100
    precision: [fp16]
    workload:
      ops:
        - gemm: {name: proj, m: 4096, n: 768, k: 768}
        - gemm: {name: odd, m: 4096, n: 768, k: 766}
    sparsity: [\"2:4\"]
    guardrails:
      - {metric: fallback_rate, at_most: 1}
",
    );
    let out = sb
        .cmd(&["gate", "pack.yaml", "--out", "out", "-q"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let read = |name: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(sb.path().join("out").join(name)).unwrap()).unwrap()
    };
    let evidence = read("evidence.json");
    let roofs = &evidence["environment"]["roofs"];
    assert!(roofs["peak_gflops"].as_f64().unwrap() > 0.0, "{roofs}");
    assert!(roofs["bandwidth_gbps"].as_f64().unwrap() > 0.0, "{roofs}");
    for s in evidence["slices"].as_array().unwrap() {
        assert_eq!(s["op_costs"].as_array().unwrap().len(), 2, "{s}");
    }
    let memo = read("memo.json");
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
    let html = std::fs::read_to_string(sb.path().join("out/memo.html")).unwrap();
    assert!(html.contains("aria-label=\"Roofline of cpu\""));
    assert!(html.contains("aria-label=\"Roofline of h100\""));
    let md = std::fs::read_to_string(sb.path().join("out/memo.md")).unwrap();
    assert!(
        md.contains("### Dense-fallback impact on latency and energy"),
        "{md}"
    );
}
