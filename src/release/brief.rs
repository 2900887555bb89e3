//! The memo's first screen, decided here so the memo only renders it (issue 24): the call
//! in one sentence, the failed blocking guardrails, who must act on each, and whether each
//! pack's rollback trigger fired.

use super::text::{bound, interval, outcome_sentence, with_unit};
use crate::domain::concern::Concern;
use crate::domain::metric::Metric;
use crate::domain::stage::Stage;
use crate::domain::verdict::Verdict;
use crate::ingress::{LoadedPack, Severity};
use crate::validate::GuardrailOutcome;
use serde::{Deserialize, Serialize};

/// What a release manager is told to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Call {
    /// Every blocking guardrail passed and no rollback trigger fired.
    Ship,
    /// A blocking guardrail failed or a rollback trigger fired.
    DoNotShip,
    /// Nothing failed, but something that must hold could not be shown to.
    NotEnoughEvidence,
}

/// The first screen of the memo.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Brief {
    /// Ship, do not ship, or not enough evidence.
    pub call: Call,
    /// The call and its single most important reason, as one sentence.
    pub headline: String,
    /// The guardrails behind a "do not ship" (blocking failures, and advisory failures a
    /// fired trigger names), or behind "not enough evidence" (undecided blocking ones).
    pub findings: Vec<Finding>,
    /// Who must act: one entry per owner role, with what it must act on.
    pub act: Vec<Action>,
    /// Each pack's rollback trigger and whether it fired.
    pub rollback: Vec<RollbackState>,
}

/// One guardrail outcome on the first screen, with its numbers written out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Finding {
    /// Pack name.
    pub pack: String,
    /// Slice id.
    pub slice: String,
    /// The guardrail's id, when it has one.
    pub guardrail: Option<String>,
    /// The metric.
    pub metric: Metric,
    /// The verdict.
    pub verdict: Verdict,
    /// The measured value with its unit.
    pub value: String,
    /// The bound, e.g. `≥ 1.5x`.
    pub bound: String,
    /// The interval the verdict was read from, e.g. `[1.2x, 1.4x] @ 95%`.
    pub interval: Option<String>,
    /// The stage the failure is attributed to.
    pub stage: Stage,
    /// The part of the stack it points at.
    pub concern: Concern,
    /// The owner role it is routed to.
    pub role: String,
}

/// An owner role that must act, and on what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Action {
    /// Pack name.
    pub pack: String,
    /// The role.
    pub role: String,
    /// `Name <email>` of each owner holding it.
    pub holders: Vec<String>,
    /// The concerns routed to it, e.g. `kernel`.
    pub concerns: Vec<Concern>,
    /// What each concern's owner usually is, e.g. `accelerator architecture owner`.
    pub titles: Vec<String>,
    /// How the routing was chosen: the pack's `routing:` entry, the conventional role, or
    /// the pack owner because nobody holds the conventional one.
    pub routed_by: String,
    /// The findings routed here, as `slice metric`.
    pub on: Vec<String>,
}

/// Whether a pack's rollback trigger fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TriggerState {
    /// `rollback.when` is true on this evidence: roll back.
    Fired,
    /// `rollback.when` is false on this evidence.
    NotFired,
    /// Undecided guardrails could make it either: the gate cannot pass.
    Undecided,
    /// The pack has no `rollback.when` (its trigger is free text), or it names guardrails
    /// of slices `gate --slice` left out and what ran does not decide it: not checked.
    Unchecked,
}

impl TriggerState {
    /// The state in words: `fired`, `not fired`, `undecided`, `not checked`.
    pub fn as_str(self) -> &'static str {
        match self {
            TriggerState::Fired => "fired",
            TriggerState::NotFired => "not fired",
            TriggerState::Undecided => "undecided",
            TriggerState::Unchecked => "not checked",
        }
    }
}

/// A pack's rollback trigger, evaluated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RollbackState {
    /// Pack name.
    pub pack: String,
    /// The trigger as the pack words it.
    pub description: String,
    /// The machine-checked expression, when there is one.
    pub when: Option<String>,
    /// What to do when it fires.
    pub action: Option<String>,
    /// Fired, not fired, undecided or unchecked.
    pub state: TriggerState,
    /// Why, in one sentence.
    pub why: String,
}

/// Evaluate each pack's `rollback.when` over the outcomes (by guardrail id within the pack).
pub(crate) fn rollback_states(packs: &[LoadedPack], outcomes: &[GuardrailOutcome]) -> Vec<RollbackState> {
    packs
        .iter()
        .map(|p| {
            let name = &p.file.name;
            let of = |id: &str| -> Vec<&GuardrailOutcome> {
                outcomes
                    .iter()
                    .filter(|o| &o.pack == name && o.guardrail.as_deref() == Some(id))
                    .collect()
            };
            let atom = |id: &str| -> Option<bool> {
                let os = of(id);
                if os.iter().any(|o| o.failed() == Some(true)) {
                    Some(true)
                } else if !os.is_empty() && os.iter().all(|o| o.failed() == Some(false)) {
                    Some(false)
                } else {
                    None
                }
            };
            let (state, why) = match &p.trigger {
                None => (
                    TriggerState::Unchecked,
                    "free text only: add `rollback.when` (an expression over guardrail ids) to have it checked"
                        .to_owned(),
                ),
                Some(expr) => {
                    let mut ids: Vec<&str> = expr.ids();
                    ids.dedup();
                    // Undecided only for want of slices `gate --slice` left out: not checked
                    // here (the full gate checks it), rather than holding the narrowed gate
                    // inconclusive.
                    let left_out = |id: &str| p.left_out.contains(id) && of(id).is_empty();
                    let open_here = ids.iter().any(|&id| !left_out(id) && atom(id).is_none());
                    let state = match expr.eval(&atom) {
                        Some(true) => TriggerState::Fired,
                        Some(false) => TriggerState::NotFired,
                        None if !open_here => TriggerState::Unchecked,
                        None => TriggerState::Undecided,
                    };
                    let mut parts = Vec::new();
                    for id in ids {
                        let os = of(id);
                        let failed: Vec<&&GuardrailOutcome> =
                            os.iter().filter(|o| o.failed() == Some(true)).collect();
                        let open: Vec<&&GuardrailOutcome> = os.iter().filter(|o| o.failed().is_none()).collect();
                        parts.push(if let Some(f) = failed.first() {
                            format!("{id} failed ({})", outcome_sentence(f))
                        } else if left_out(id) {
                            format!("{id} was not run here (its slices are outside --slice)")
                        } else if os.is_empty() {
                            format!("{id} applies to no slice that was judged")
                        } else if let Some(u) = open.first() {
                            format!("{id} is undecided on {} ({})", u.slice, outcome_sentence(u))
                        } else {
                            match os.len() {
                                1 => format!("{id} held on its slice"),
                                n => format!("{id} held on all {n} slices"),
                            }
                        });
                    }
                    (state, format!("{}.", parts.join("; ")))
                }
            };
            RollbackState {
                pack: name.clone(),
                description: p.file.rollback.trigger.clone(),
                when: p.file.rollback.when.clone(),
                action: p.file.rollback.action.clone(),
                state,
                why,
            }
        })
        .collect()
}

/// The concern a guardrail outcome points at.
pub(crate) fn concern_of(o: &GuardrailOutcome, under_load: bool) -> Concern {
    match (o.stage, o.metric) {
        (Stage::Ingress | Stage::Execution, _) => Concern::Harness,
        (Stage::Lowering, _)
        | (_, Metric::FallbackRate | Metric::PatternViolations | Metric::SparseCoverage) => Concern::Lowering,
        (_, Metric::Accuracy | Metric::QualityDelta) => Concern::Quality,
        (_, Metric::DropRate) => Concern::Serving,
        (_, Metric::Latency | Metric::LatencyP50 | Metric::LatencyP95 | Metric::LatencyP99) if under_load => {
            Concern::Serving
        }
        _ => Concern::Kernel,
    }
}

/// The role a concern is routed to in a pack, and how that was chosen.
fn route(pack: &LoadedPack, concern: Concern) -> (String, String) {
    let holds = |role: &str| pack.file.owners.iter().any(|o| o.role == role);
    if let Some(role) = pack.file.routing.role_for(concern) {
        return (role.to_owned(), format!("routing.{concern}"));
    }
    let conventional = concern.default_role();
    if holds(conventional) {
        return (conventional.to_owned(), format!("the {conventional} role"));
    }
    let fallback = if holds("owner") {
        "owner".to_owned()
    } else {
        pack.file
            .owners
            .first()
            .map(|o| o.role.clone())
            .unwrap_or_default()
    };
    (
        fallback.clone(),
        format!("nobody holds role `{conventional}`, so the {fallback} role"),
    )
}

/// Build the first screen from the decided verdict, the outcomes and the triggers.
pub(crate) fn brief(
    packs: &[LoadedPack],
    verdict: Verdict,
    outcomes: &[GuardrailOutcome],
    rollback: Vec<RollbackState>,
) -> Brief {
    // Whether `o`'s pack has a trigger in `state` that names `o`'s guardrail.
    let named_by = |o: &GuardrailOutcome, state: TriggerState| {
        rollback.iter().any(|r| r.pack == o.pack && r.state == state)
            && packs.iter().any(|p| {
                p.file.name == o.pack
                    && p.trigger
                        .as_ref()
                        .zip(o.guardrail.as_deref())
                        .is_some_and(|(t, id)| t.ids().contains(&id))
            })
    };
    let blocking = |o: &&GuardrailOutcome| o.severity == Severity::Block;
    let call = match verdict {
        Verdict::Fail => Call::DoNotShip,
        Verdict::Inconclusive => Call::NotEnoughEvidence,
        Verdict::Pass | Verdict::Warn => Call::Ship,
    };
    let pick = |keep: &dyn Fn(&GuardrailOutcome) -> bool| -> Vec<&GuardrailOutcome> {
        outcomes.iter().filter(|o| keep(o)).collect()
    };
    let mut picked = match call {
        // Blocking failures, and advisory ones a fired trigger names.
        Call::DoNotShip | Call::Ship => pick(&|o| {
            (blocking(&o) && o.verdict == Verdict::Fail)
                || (o.failed() == Some(true) && named_by(o, TriggerState::Fired))
        }),
        Call::NotEnoughEvidence => {
            let undecided = pick(&|o| blocking(&o) && o.verdict == Verdict::Inconclusive);
            if undecided.is_empty() {
                // An undecided trigger over advisory guardrails: those must be decided.
                pick(&|o| o.failed().is_none() && named_by(o, TriggerState::Undecided))
            } else {
                undecided
            }
        }
    };
    // Earliest stage first: the first failing stage leads.
    picked.sort_by_key(|o| o.stage);
    let under_load = |o: &GuardrailOutcome| {
        packs
            .iter()
            .flat_map(|p| p.slices.iter())
            .any(|s| s.pack == o.pack && s.id == o.slice && s.load.is_some())
    };
    let findings: Vec<Finding> = picked
        .iter()
        .map(|o| {
            let concern = concern_of(o, under_load(o));
            let role = packs
                .iter()
                .find(|p| p.file.name == o.pack)
                .map(|p| route(p, concern).0)
                .unwrap_or_default();
            Finding {
                pack: o.pack.clone(),
                slice: o.slice.clone(),
                guardrail: o.guardrail.clone(),
                metric: o.metric,
                verdict: o.verdict,
                value: o
                    .value
                    .map_or_else(|| "no value".to_owned(), |v| with_unit(v, o.metric)),
                bound: bound(o),
                interval: interval(o),
                stage: o.stage,
                concern,
                role,
            }
        })
        .collect();
    let act = actions(packs, &findings);
    let headline = headline(call, &findings, &picked, &rollback, outcomes);
    Brief {
        call,
        headline,
        findings,
        act,
        rollback,
    }
}

fn actions(packs: &[LoadedPack], findings: &[Finding]) -> Vec<Action> {
    let mut act: Vec<Action> = Vec::new();
    for f in findings {
        let Some(pack) = packs.iter().find(|p| p.file.name == f.pack) else {
            continue;
        };
        let (role, routed_by) = route(pack, f.concern);
        let on = format!("{} {}", f.slice, f.metric);
        match act.iter_mut().find(|a| a.pack == f.pack && a.role == role) {
            Some(a) => {
                if !a.concerns.contains(&f.concern) {
                    a.concerns.push(f.concern);
                    a.titles.push(f.concern.owner_title().to_owned());
                    a.routed_by.push_str(&format!("; {routed_by}"));
                }
                if !a.on.contains(&on) {
                    a.on.push(on);
                }
            }
            None => act.push(Action {
                pack: f.pack.clone(),
                holders: pack
                    .file
                    .owners
                    .iter()
                    .filter(|o| o.role == role)
                    .map(|o| format!("{} <{}>", o.name, o.email))
                    .collect(),
                role,
                concerns: vec![f.concern],
                titles: vec![f.concern.owner_title().to_owned()],
                routed_by,
                on: vec![on],
            }),
        }
    }
    act
}

fn headline(
    call: Call,
    findings: &[Finding],
    picked: &[&GuardrailOutcome],
    rollback: &[RollbackState],
    outcomes: &[GuardrailOutcome],
) -> String {
    let fired: Vec<&RollbackState> = rollback
        .iter()
        .filter(|r| r.state == TriggerState::Fired)
        .collect();
    let undecided: Vec<&RollbackState> = rollback
        .iter()
        .filter(|r| r.state == TriggerState::Undecided)
        .collect();
    let more = |n: usize, what: &str| match n {
        0 | 1 => String::new(),
        n => format!(" ({} more {what})", n - 1),
    };
    match call {
        Call::DoNotShip => {
            if let Some(r) = fired.first() {
                format!(
                    "Do not ship: the rollback trigger of {} fired ({}){}.",
                    r.pack,
                    r.description.trim_end_matches('.'),
                    more(fired.len(), "triggers fired")
                )
            } else if let Some(o) = picked.first() {
                format!(
                    "Do not ship: {}{}.",
                    outcome_sentence(o),
                    more(findings.len(), "blocking guardrails failed")
                )
            } else {
                "Do not ship: a blocking guardrail failed.".to_owned()
            }
        }
        Call::NotEnoughEvidence => {
            if let Some(o) = picked.first().filter(|o| o.severity == Severity::Block) {
                format!(
                    "Not enough evidence to ship: {} is undecided{}; to decide it: {}.",
                    outcome_sentence(o),
                    more(findings.len(), "undecided"),
                    super::text::what_would_decide(o)
                )
            } else if let Some(r) = undecided.first() {
                format!(
                    "Not enough evidence to ship: the rollback trigger of {} cannot be ruled out ({}).",
                    r.pack,
                    r.description.trim_end_matches('.')
                )
            } else {
                "Not enough evidence to ship: a blocking guardrail is undecided.".to_owned()
            }
        }
        Call::Ship => {
            let blocking = outcomes.iter().filter(|o| o.severity == Severity::Block).count();
            let advisory = outcomes
                .iter()
                .filter(|o| o.severity == Severity::Warn && o.verdict != Verdict::Pass)
                .count();
            let plural = |n: usize| if n == 1 { "" } else { "s" };
            let mut s = format!(
                "Ship: all {blocking} blocking guardrail{} passed",
                plural(blocking)
            );
            // Not checked: free text (no `when`), or needing slices `--slice` left out.
            let unchecked = |expression: bool| -> Vec<&str> {
                rollback
                    .iter()
                    .filter(|r| r.state == TriggerState::Unchecked && r.when.is_some() == expression)
                    .map(|r| r.pack.as_str())
                    .collect()
            };
            let (free_text, left_out) = (unchecked(false), unchecked(true));
            if free_text.len() + left_out.len() < rollback.len() {
                s.push_str(" and no rollback trigger fired");
            }
            if advisory > 0 {
                s.push_str(&format!(
                    "; {advisory} advisory guardrail{} did not pass (advisory guardrails never block)",
                    plural(advisory)
                ));
            }
            if !free_text.is_empty() {
                s.push_str(&format!(
                    "; the rollback trigger of {} is free text and was not checked",
                    free_text.join(", ")
                ));
            }
            if !left_out.is_empty() {
                s.push_str(&format!(
                    "; the rollback trigger of {} needs slices outside --slice and was not checked here",
                    left_out.join(", ")
                ));
            }
            s.push('.');
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingress::{Rule, parse_pack};
    use crate::release::decide;
    use crate::validate::Assessment;

    const PACK: &str = "
schema_version: 1
name: p
owners:
  - {name: Ada, email: ada@example.com, role: owner}
  - {name: Grace, email: grace@example.com, role: accelerator}
  - {name: Linus, email: linus@example.com, role: compiler-team}
rollback:
  trigger: the 2:4 layer is no faster than 1.2x, or it falls back
  when: speedup or no-fallback
routing:
  lowering: compiler-team
guardrails:
  - {id: no-fallback, metric: fallback_rate, at_most: 0}
slices:
  - id: s
    workload: {ops: [{gemm: {name: g, m: 8, n: 8, k: 8}}]}
    sparsity: [\"2:4\"]
    guardrails:
      - {id: speedup, metric: effective_speedup, at_least: 1.2, severity: warn}
";

    fn pack(text: &str) -> LoadedPack {
        parse_pack(std::path::Path::new("p.yaml"), text.to_owned()).unwrap()
    }

    /// An outcome of guardrail `id` with the evidence's finding `finding`, softened to
    /// `warn` when advisory.
    fn outcome(id: &str, metric: Metric, finding: Verdict, severity: Severity) -> GuardrailOutcome {
        let verdict = match (finding, severity) {
            (Verdict::Pass, _) | (_, Severity::Block) => finding,
            _ => Verdict::Warn,
        };
        GuardrailOutcome {
            pack: "p".into(),
            slice: "s-2of4-fp32".into(),
            guardrail: Some(id.into()),
            metric,
            rule: Rule::AtLeast { bound: 1.2 },
            verdict,
            finding,
            severity,
            value: Some(1.05),
            baseline: None,
            ci_low: Some(1.0),
            ci_high: Some(1.1),
            p_value: None,
            confidence: 0.95,
            samples: 30,
            bottleneck: None,
            stage: if metric == Metric::FallbackRate {
                Stage::Lowering
            } else {
                Stage::Validation
            },
            detail: String::new(),
            location: None,
            yardstick: None,
            undecided_by: None,
        }
    }

    /// [`PACK`] decided on its two guardrails' findings.
    fn decide_pack(fallback: Verdict, speedup: Verdict) -> crate::release::Decision {
        decide_on(PACK, two(fallback, speedup))
    }

    /// The blocking `no-fallback` and the advisory `speedup` with these findings.
    fn two(fallback: Verdict, speedup: Verdict) -> Vec<GuardrailOutcome> {
        vec![
            outcome("no-fallback", Metric::FallbackRate, fallback, Severity::Block),
            outcome("speedup", Metric::EffectiveSpeedup, speedup, Severity::Warn),
        ]
    }

    fn decide_on(text: &str, outcomes: Vec<GuardrailOutcome>) -> crate::release::Decision {
        decide_loaded(pack(text), outcomes)
    }

    /// `p` decided on `outcomes` alone.
    fn decide_loaded(p: LoadedPack, outcomes: Vec<GuardrailOutcome>) -> crate::release::Decision {
        let assessment = Assessment {
            outcomes,
            diagnoses: vec![],
            contradictions: vec![],
            quality: vec![],
            under_burst: vec![],
        };
        decide(&[p], &assessment, vec![])
    }

    /// Issue 24: a trigger over an advisory guardrail that failed fires and fails the gate,
    /// though the guardrail alone would only warn; the kernel failure goes to the role named
    /// after its concern.
    #[test]
    fn issue_24_a_fired_trigger_fails_the_gate_even_over_an_advisory_guardrail() {
        let d = decide_pack(Verdict::Pass, Verdict::Fail);
        assert_eq!(d.verdict, Verdict::Fail);
        assert_eq!(d.first_failing_stage, Some(Stage::Validation));
        let b = &d.brief;
        assert_eq!(b.call, Call::DoNotShip);
        assert_eq!(b.rollback[0].state, TriggerState::Fired);
        assert!(
            b.rollback[0].why.starts_with(
                "speedup failed (p/s-2of4-fp32 effective_speedup 1.05x against ≥ 1.2x, [1x, 1.1x] @ 95%)"
            ),
            "{}",
            b.rollback[0].why
        );
        assert!(
            b.headline
                .starts_with("Do not ship: the rollback trigger of p fired (the 2:4 layer"),
            "{}",
            b.headline
        );
        assert_eq!(b.findings.len(), 1);
        assert_eq!(
            (b.act[0].role.as_str(), b.act[0].concerns.as_slice()),
            ("accelerator", &[Concern::Kernel][..])
        );
        assert_eq!(b.act[0].holders, ["Grace <grace@example.com>"]);
    }

    /// Issue 24: a fallback failure is routed by the pack's `routing:` entry, and the
    /// trigger that names it fires too.
    #[test]
    fn issue_24_failures_are_routed_by_the_packs_routing() {
        let d = decide_pack(Verdict::Fail, Verdict::Pass);
        assert_eq!(d.verdict, Verdict::Fail);
        assert_eq!(d.first_failing_stage, Some(Stage::Lowering));
        assert_eq!(d.brief.rollback[0].state, TriggerState::Fired);
        let a = &d.brief.act[0];
        assert_eq!(
            (a.role.as_str(), a.routed_by.as_str()),
            ("compiler-team", "routing.lowering")
        );
        assert_eq!(a.titles, ["compiler sparsity pass owner"]);
    }

    /// Issue 24: an undecided guardrail the trigger names keeps the gate from passing, and
    /// the memo says the trigger cannot be ruled out rather than that it fired.
    #[test]
    fn issue_24_an_undecided_trigger_is_not_enough_evidence() {
        let d = decide_pack(Verdict::Pass, Verdict::Inconclusive);
        assert_eq!(d.verdict, Verdict::Inconclusive);
        assert_eq!(d.brief.call, Call::NotEnoughEvidence);
        assert_eq!(d.brief.rollback[0].state, TriggerState::Undecided);
        assert!(
            d.brief.headline.contains("cannot be ruled out"),
            "{}",
            d.brief.headline
        );
        assert_eq!(d.brief.findings[0].guardrail.as_deref(), Some("speedup"));
    }

    /// Issue 24: when everything held the call is "ship", and a free-text trigger is named
    /// as unchecked rather than silently counted as not fired.
    #[test]
    fn issue_24_ship_says_whether_the_trigger_was_checked() {
        let held = two(Verdict::Pass, Verdict::Pass);
        let d = decide_on(PACK, held.clone());
        assert_eq!(d.verdict, Verdict::Pass);
        assert_eq!(d.brief.rollback[0].state, TriggerState::NotFired);
        assert_eq!(
            d.brief.headline,
            "Ship: all 1 blocking guardrail passed and no rollback trigger fired."
        );
        let free_text = PACK.replace("  when: speedup or no-fallback\n", "");
        let d = decide_on(&free_text, held);
        assert_eq!(d.brief.rollback[0].state, TriggerState::Unchecked);
        assert!(
            d.brief
                .headline
                .ends_with("the rollback trigger of p is free text and was not checked."),
            "{}",
            d.brief.headline
        );
        assert!(d.brief.act.is_empty());
    }

    /// Issue 22: `gate --slice` left out the only slice of a guardrail the trigger names. The
    /// narrowed gate does not hold the trigger undecided for it (the full gate checks it) and
    /// says so; what ran still fires it, and an open guardrail that ran still leaves it open.
    #[test]
    fn a_trigger_needing_slices_outside_the_focus_is_not_checked_there() {
        let narrowed = |outcomes: Vec<GuardrailOutcome>| {
            let mut p = pack(PACK);
            p.left_out.insert("speedup".into());
            decide_loaded(p, outcomes)
        };
        let fallback = |finding| {
            vec![outcome(
                "no-fallback",
                Metric::FallbackRate,
                finding,
                Severity::Block,
            )]
        };
        let d = narrowed(fallback(Verdict::Pass));
        assert_eq!(d.verdict, Verdict::Pass);
        assert_eq!(d.brief.rollback[0].state, TriggerState::Unchecked);
        assert!(
            d.brief.rollback[0]
                .why
                .contains("speedup was not run here (its slices are outside --slice)"),
            "{}",
            d.brief.rollback[0].why
        );
        assert!(
            d.brief.headline.ends_with(
                "the rollback trigger of p needs slices outside --slice and was not checked here."
            ),
            "{}",
            d.brief.headline
        );
        assert_eq!(
            narrowed(fallback(Verdict::Fail)).brief.rollback[0].state,
            TriggerState::Fired
        );
        let open = narrowed(fallback(Verdict::Inconclusive));
        assert_eq!(open.brief.rollback[0].state, TriggerState::Undecided);
        // Unnarrowed, a guardrail no slice judged still leaves the trigger undecided.
        let d = decide_on(PACK, fallback(Verdict::Pass));
        assert_eq!(d.verdict, Verdict::Inconclusive);
        assert_eq!(d.brief.rollback[0].state, TriggerState::Undecided);
    }

    /// Issue 24: with nobody holding the concern's conventional role, the pack owner acts.
    #[test]
    fn issue_24_an_unrouted_concern_goes_to_the_pack_owner() {
        let mut o = outcome("no-fallback", Metric::Accuracy, Verdict::Fail, Severity::Block);
        o.guardrail = None;
        let d = decide_on(PACK, vec![o]);
        let a = &d.brief.act[0];
        assert_eq!(a.concerns, [Concern::Quality]);
        assert_eq!(a.role, "owner");
        assert!(
            a.routed_by.contains("nobody holds role `model-optimization`"),
            "{}",
            a.routed_by
        );
    }

    /// Issue 22: an undecided blocking latency guardrail says what would decide it: more
    /// samples when its interval straddles the margin, a baseline build when the golden
    /// baseline's session drift or a different CPU contention left it undecided.
    #[test]
    fn issue_22_the_headline_says_what_would_decide_an_undecided_guardrail() {
        let headline = |by| {
            let mut o = outcome("speedup", Metric::Latency, Verdict::Inconclusive, Severity::Block);
            o.rule = Rule::RegressAtMost { margin: 0.05 };
            o.undecided_by = by;
            let d = decide_on(&PACK.replace("  when: speedup or no-fallback\n", ""), vec![o]);
            assert_eq!(d.brief.call, Call::NotEnoughEvidence);
            d.brief.headline
        };
        let spread = headline(None);
        assert!(spread.contains("to decide it: take more samples"), "{spread}");
        let drift = headline(Some(crate::validate::Undecided::SessionDrift));
        assert!(
            drift.contains("to decide it: session drift since the golden baseline"),
            "{drift}"
        );
        assert!(
            drift.contains("--baseline-bin") && !drift.contains("more samples"),
            "{drift}"
        );
        let contended = headline(Some(crate::validate::Undecided::Contention));
        assert!(contended.contains("gate on a quiet runner"), "{contended}");
        assert!(!contended.contains("more samples"), "{contended}");
    }
}
