//! Forged memos (issue 23): what an insider listed in allowed_signers tried, each accepted
//! by `memo verify` before, each refused now (exit 2). The forger here is given more than
//! the CLI: the tests rebuild statements and envelopes by hand, as a hostile tool would.

use crate::memo::{PACK, key, sign, signed_memo, signed_memo_of, verify};
use crate::support::{Sandbox, assert_contains, assert_exit, assert_refused, stderr, stdout};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use signature::Signer;
use ssh_key::private::Ed25519Keypair;
use ssh_key::{HashAlg, LineEnding, PrivateKey};

/// The pack of [`PACK`] with a guardrail that fails (no op falls back).
fn failing_pack() -> String {
    PACK.replace(
        "{metric: fallback_rate, at_most: 0}",
        "{metric: fallback_rate, at_least: 1}",
    )
}

fn keypair(seed: u8) -> PrivateKey {
    PrivateKey::from(Ed25519Keypair::from_seed(&[seed; 32]))
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Re-seal the memo in `sb/out` as a forger would: recompute every subject digest from the
/// files as they are now, apply `edit` to the statement, write it, and sign it with `seed`'s
/// key: a DSSE envelope by that key alone and, for each of `roles`, an SSHSIG.
fn reseal(sb: &Sandbox, seed: u8, roles: &[&str], edit: impl FnOnce(&mut serde_json::Value)) {
    let mut statement = sb.json("out/memo.statement.json");
    for s in statement["subject"].as_array_mut().unwrap() {
        let name = s["name"].as_str().unwrap().to_owned();
        let outputs = [
            "memo.json",
            "memo.md",
            "memo.html",
            "verdict.json",
            "evidence.json",
            "junit.xml",
        ];
        let path = if outputs.contains(&name.as_str()) {
            format!("out/{name}")
        } else {
            name
        };
        let bytes = std::fs::read(sb.path().join(path)).unwrap();
        s["digest"]["sha256"] = sha256(&bytes).into();
    }
    edit(&mut statement);
    let mut payload = serde_json::to_string_pretty(&statement).unwrap();
    payload.push('\n');
    sb.write_raw("out/memo.statement.json", &payload);
    let key = keypair(seed);
    let pae = format!(
        "DSSEv1 28 application/vnd.in-toto+json {} {payload}",
        payload.len()
    );
    let sig: ssh_key::Signature = key.try_sign(pae.as_bytes()).unwrap();
    let envelope = serde_json::json!({
        "payload": BASE64.encode(payload.as_bytes()),
        "payloadType": "application/vnd.in-toto+json",
        "signatures": [{"keyid": key.fingerprint(HashAlg::Sha256).to_string(), "sig": BASE64.encode(sig.as_bytes())}],
    });
    sb.write_raw("out/memo.intoto.json", &envelope.to_string());
    for role in roles {
        let sshsig = key
            .sign("sparsegate-memo", HashAlg::Sha512, payload.as_bytes())
            .unwrap();
        sb.write_raw(
            &format!("out/memo.statement.json.{role}.sig"),
            &sshsig.to_pem(LineEnding::LF).unwrap(),
        );
    }
}

/// Mallory, listed in allowed_signers but holding no role in the pack.
fn with_mallory(sb: &Sandbox) {
    let mallory = key(sb, "mallory", "mallory@example.com", 9);
    let signers = sb.read("allowed_signers");
    sb.write(
        "allowed_signers",
        &format!("{signers}mallory@example.com {mallory}\n"),
    );
}

/// memo.json with the pack's owners replaced by `owners` (role, email).
fn rewrite_owners(sb: &Sandbox, owners: &[(&str, &str)]) {
    let mut memo = sb.json("out/memo.json");
    memo["packs"][0]["owners"] = owners
        .iter()
        .map(|(role, email)| serde_json::json!({"name": email, "email": email, "role": role}))
        .collect();
    memo["sign_off"] = owners
        .iter()
        .map(|(role, email)| serde_json::json!({"role": role, "holders": [email]}))
        .collect();
    memo["verdict"] = "pass".into();
    memo["exit_code"] = 0.into();
    sb.write_raw(
        "out/memo.json",
        &format!("{}\n", serde_json::to_string_pretty(&memo).unwrap()),
    );
}

fn remove_signatures(sb: &Sandbox) {
    for f in sb.files_under("out") {
        if f.ends_with(".sig") || f.ends_with("memo.intoto.json") || f.ends_with("memo.statement.json") {
            std::fs::remove_file(sb.path().join("out").join(&f)).unwrap();
        }
    }
}

/// Issue 23, forgery 1: an allowed signer makes themself the pack's owner in memo.json and
/// signs. Who must sign comes from the (unchanged) pack file, so neither `memo sign` nor a
/// hand-made statement gets past it.
#[test]
fn a_memo_whose_owners_were_rewritten_is_refused() {
    let sb = signed_memo_of(&failing_pack(), 1);
    with_mallory(&sb);
    rewrite_owners(&sb, &[("owner", "mallory@example.com")]);
    remove_signatures(&sb);
    assert_refused(
        &sign(&sb, "mallory", "owner"),
        "role `owner` is held by ada@example.com",
    );
    assert!(!sb.path().join("out/memo.statement.json.owner.sig").exists());

    // By hand: a statement whose sign-off names Mallory, sealed by her in both forms.
    assert_exit(&sign(&sb, "ada", "owner"), 0);
    reseal(&sb, 9, &["owner", "release-manager"], |s| {
        s["predicate"]["verdict"] = "pass".into();
        s["predicate"]["exit_code"] = 0.into();
        s["predicate"]["sign_off"] =
            serde_json::json!([{"role": "owner", "principals": ["mallory@example.com"]}]);
    });
    let out = verify(&sb);
    assert_refused(&out, "not those the packs give their owners");
    assert_contains(
        &stderr(&out),
        "the `owner` signature was made with a key that allowed_signers does not bind",
    );
}

/// Issue 23, forgery 2: one owner removes the other's role from memo.json and signs alone.
#[test]
fn a_co_owner_dropped_from_the_memo_must_still_sign() {
    let sb = signed_memo();
    rewrite_owners(&sb, &[("owner", "ada@example.com")]);
    remove_signatures(&sb);
    let signed = sign(&sb, "ada", "owner");
    assert_exit(&signed, 0);
    assert_refused(&verify(&sb), "role `release-manager` has not signed");
    // Nor does a hand-made statement without the role help.
    reseal(&sb, 1, &["owner"], |s| {
        s["predicate"]["sign_off"] =
            serde_json::json!([{"role": "owner", "principals": ["ada@example.com"]}]);
    });
    let out = verify(&sb);
    assert_refused(&out, "role `release-manager` has not signed");
    assert_contains(&stderr(&out), "not those the packs give their owners");
}

/// Issue 23, forgery 3: after the owners signed a failed gate, verdict.json (or any other
/// file) is edited to pass, the envelope re-sealed with the editor's own key and the owners'
/// `.sig` files put back. The role signatures cover the whole statement, so they fail.
#[test]
fn a_resealed_envelope_over_edited_outputs_is_refused() {
    for (file, forger) in [
        ("out/verdict.json", 9),
        ("out/evidence.json", 2),
        ("out/junit.xml", 9),
        ("out/memo.json", 2),
        ("pack.yaml", 9),
    ] {
        let sb = signed_memo_of(&failing_pack(), 1);
        with_mallory(&sb);
        let sigs: Vec<(String, String)> = ["owner", "release-manager"]
            .iter()
            .map(|r| {
                let f = format!("out/memo.statement.json.{r}.sig");
                (f.clone(), sb.read(&f))
            })
            .collect();
        let text = sb.read(file);
        let edited = if file.ends_with("verdict.json") || file.ends_with("memo.json") {
            text.replacen("\"fail\"", "\"pass\"", 1)
        } else {
            format!("{text}\n")
        };
        assert_ne!(text, edited);
        sb.write_raw(file, &edited);
        reseal(&sb, forger, &[], |s| {
            s["predicate"]["verdict"] = "pass".into();
            s["predicate"]["exit_code"] = 0.into();
        });
        for (f, pem) in &sigs {
            sb.write_raw(f, pem);
        }
        let out = verify(&sb);
        assert_exit(&out, 2);
        let err = stderr(&out);
        if file == "pack.yaml" {
            assert_contains(&err, "pack.yaml changed since the gate ran");
        } else {
            assert_contains(&err, "the `owner` signature does not verify over the statement");
            assert_contains(
                &err,
                "the `release-manager` signature does not verify over the statement",
            );
        }
        assert!(!stdout(&out).contains("verified"), "{file}");
    }
}

/// Issue 23, forgery 4: one DSSE signature removed while every `.sig` file stays.
#[test]
fn an_envelope_missing_a_role_signature_is_refused() {
    let sb = signed_memo();
    let mut envelope = sb.json("out/memo.intoto.json");
    envelope["signatures"].as_array_mut().unwrap().remove(1);
    sb.write_raw("out/memo.intoto.json", &envelope.to_string());
    assert_refused(
        &verify(&sb),
        "the envelope carries no signature by `release-manager`'s key",
    );
}

/// Issue 23: an extra DSSE signature by a key that signs no role is refused too.
#[test]
fn an_envelope_signature_by_someone_without_a_role_is_refused() {
    let sb = signed_memo();
    with_mallory(&sb);
    let payload = sb.read("out/memo.statement.json");
    let key = keypair(9);
    let pae = format!(
        "DSSEv1 28 application/vnd.in-toto+json {} {payload}",
        payload.len()
    );
    let sig: ssh_key::Signature = key.try_sign(pae.as_bytes()).unwrap();
    let mut envelope = sb.json("out/memo.intoto.json");
    envelope["signatures"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"keyid": "SHA256:mallory", "sig": BASE64.encode(sig.as_bytes())}));
    sb.write_raw("out/memo.intoto.json", &envelope.to_string());
    assert_refused(
        &verify(&sb),
        "envelope signature by SHA256:mallory is not a verified signature",
    );
}

/// Issue 23: a pack with two holders of one role: the first signs, the second cannot
/// replace that signature (the signer itself can re-sign).
#[test]
fn signing_never_overwrites_another_signers_signature() {
    let sb = Sandbox::with_pack(&PACK.replace(
        "  - {name: Grace, email: grace@example.com, role: release-manager}",
        "  - {name: Grace, email: grace@example.com, role: release-manager}\n  - {name: Bob, email: bob@example.com, role: owner}",
    ));
    let ada = key(&sb, "ada", "ada@example.com", 1);
    let bob = key(&sb, "bob", "bob@example.com", 3);
    sb.write(
        "allowed_signers",
        &format!("ada@example.com {ada}\nbob@example.com {bob}\n"),
    );
    assert_exit(&sb.gate("pack.yaml", &["-q"]), 0);
    assert_exit(&sign(&sb, "ada", "owner"), 0);
    let ada_sig = sb.read("out/memo.statement.json.owner.sig");
    assert_refused(
        &sign(&sb, "bob", "owner"),
        "never overwrites another signer's signature",
    );
    assert_eq!(sb.read("out/memo.statement.json.owner.sig"), ada_sig);
    assert_exit(&sign(&sb, "ada", "owner"), 0);
}

/// Issue 23: `verify` prints the signed verdict; `--require-pass` fails unless the gate
/// passed, with the gate's own exit code, so `verify --require-pass && deploy` cannot ship
/// a failed gate. Signing the failed memo is allowed, with a warning.
#[test]
fn require_pass_refuses_a_validly_signed_failed_gate() {
    let sb = Sandbox::with_pack(&failing_pack());
    let ada = key(&sb, "ada", "ada@example.com", 1);
    let grace = key(&sb, "grace", "grace@example.com", 2);
    sb.write(
        "allowed_signers",
        &format!("ada@example.com {ada}\ngrace@example.com {grace}\n"),
    );
    assert_exit(&sb.gate("pack.yaml", &["-q"]), 1);
    for (k, role) in [("ada", "owner"), ("grace", "release-manager")] {
        let out = sign(&sb, k, role);
        assert_exit(&out, 0);
        assert_contains(
            &stderr(&out),
            "warning: this memo records a gate that did not pass (verdict fail",
        );
    }
    let out = verify(&sb);
    assert_exit(&out, 0);
    assert_contains(&stdout(&out), "verdict fail");
    let out = sb.output(&[
        "memo",
        "verify",
        "out",
        "--allowed-signers",
        "allowed_signers",
        "--require-pass",
    ]);
    assert_exit(&out, 1);
    assert_contains(&stderr(&out), "--require-pass refuses it");
}

#[test]
fn require_pass_accepts_a_signed_passing_gate() {
    let sb = signed_memo();
    let out = sb.output(&[
        "memo",
        "verify",
        "out",
        "--allowed-signers",
        "allowed_signers",
        "--require-pass",
        "--pack",
        "pack.yaml",
    ]);
    assert_exit(&out, 0);
    assert_contains(&stdout(&out), "verdict pass");
}

/// Issue 23: a memo gated (and validly signed) on another pack, whose owners are the
/// forger, is refused when the verifier names the pack it expects.
#[test]
fn a_memo_for_another_pack_is_refused_when_the_pack_is_pinned() {
    let sb = signed_memo();
    sb.write("other.yaml", &PACK.replace("name: signed", "name: other"));
    let out = sb.output(&[
        "memo",
        "verify",
        "out",
        "--allowed-signers",
        "allowed_signers",
        "--pack",
        "other.yaml",
    ]);
    assert_refused(&out, "the memo is not for other.yaml");
}

/// Issue 23: a role that would name a file outside the output directory is refused at
/// ingress, located, with a hint, and nothing is written.
#[test]
fn a_role_that_is_not_a_plain_name_is_refused_at_ingress() {
    let sb =
        Sandbox::with_pack(&PACK.replace("role: release-manager", "role: x/../../../victim/memo.json.owner"));
    for args in [
        &["validate", "pack.yaml"][..],
        &["gate", "pack.yaml", "--out", "out", "-q"],
    ] {
        let out = sb.output(args);
        assert_exit(&out, 2);
        let err = stderr(&out);
        assert_contains(&err, "pack.yaml:5:51");
        assert_contains(&err, "does not match the pattern");
        assert_contains(&err, "lowercase letters, digits");
    }
    assert!(!sb.path().join("out").exists());
}
