//! The gate decision: one verdict and one exit code from every guardrail outcome.

use super::ExitCode;
use super::brief::{Brief, TriggerState, brief, rollback_states};
use crate::domain::stage::Stage;
use crate::domain::verdict::Verdict;
use crate::ingress::{FieldDiff, LoadedPack, NotApplicable, Severity, Slice};
use crate::validate::{Assessment, GuardrailOutcome};
use serde::{Deserialize, Serialize};

/// Version of the `verdict.json` format.
pub const VERDICT_SCHEMA_VERSION: u32 = 1;

/// What the gate decided, as written to `verdict.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Decision {
    /// Format version.
    pub schema_version: u32,
    /// The overall verdict.
    pub verdict: Verdict,
    /// The process exit status that goes with it.
    pub exit_code: ExitCode,
    /// The earliest pipeline stage with a failing blocking guardrail.
    pub first_failing_stage: Option<Stage>,
    /// Guardrails per verdict.
    pub counts: VerdictCounts,
    /// Every guardrail outcome, in pack and slice order.
    pub guardrails: Vec<GuardrailOutcome>,
    /// Lock fields that differed from a baseline and were allowed with `--allow-env-drift`.
    pub environment_drift: Vec<DriftNote>,
    /// The first screen of the memo: the call, what failed, who must act, and whether each
    /// pack's rollback trigger fired (issue 24).
    pub brief: Brief,
    /// Guardrails left off a cell because they cannot mean anything there (a speedup bound
    /// on the `dense` cell of a matrix), each with its reason (issue 24). Not verdicts:
    /// they count in none of `counts`.
    #[serde(default)]
    pub not_applicable: Vec<NotApplicable>,
}

/// How many guardrails ended in each verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VerdictCounts {
    /// Passed.
    pub pass: usize,
    /// Advisory guardrails that did not pass.
    pub warn: usize,
    /// Undecided blocking guardrails.
    pub inconclusive: usize,
    /// Failed blocking guardrails.
    pub fail: usize,
}

/// An allowed environment mismatch against one baseline: the memo calls it out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DriftNote {
    /// The pack name.
    pub pack: String,
    /// The slice id.
    pub slice: String,
    /// The differing lock fields.
    pub fields: Vec<FieldDiff>,
}

/// Decide the gate: fail if any blocking guardrail failed or a pack's rollback trigger
/// (`rollback.when`) fired, else inconclusive if any blocking guardrail is undecided or a
/// trigger cannot be ruled out, else warn if any advisory one did not pass, else pass.
///
/// A trigger decides even over advisory guardrails: the pack's authors said that condition
/// means rolling back, so the gate must not pass while it holds or may hold.
pub fn decide(packs: &[LoadedPack], assessment: &Assessment, environment_drift: Vec<DriftNote>) -> Decision {
    let mut counts = VerdictCounts::default();
    for o in &assessment.outcomes {
        match o.verdict {
            Verdict::Pass => counts.pass += 1,
            Verdict::Warn => counts.warn += 1,
            Verdict::Inconclusive => counts.inconclusive += 1,
            Verdict::Fail => counts.fail += 1,
        }
    }
    let blocking = |v: Verdict| {
        assessment
            .outcomes
            .iter()
            .filter(move |o| o.severity == Severity::Block && o.verdict == v)
    };
    let rollback = rollback_states(packs, &assessment.outcomes);
    let trigger = |state: TriggerState| rollback.iter().any(|r| r.state == state);
    let verdict = if blocking(Verdict::Fail).next().is_some() || trigger(TriggerState::Fired) {
        Verdict::Fail
    } else if blocking(Verdict::Inconclusive).next().is_some() || trigger(TriggerState::Undecided) {
        Verdict::Inconclusive
    } else if counts.warn > 0 {
        Verdict::Warn
    } else {
        Verdict::Pass
    };
    let brief = brief(packs, verdict, &assessment.outcomes, rollback);
    // A failing gate's findings are its blocking failures and what a fired trigger names.
    let first_failing_stage = if verdict == Verdict::Fail {
        brief.findings.iter().map(|f| f.stage).min()
    } else {
        None
    };
    Decision {
        schema_version: VERDICT_SCHEMA_VERSION,
        verdict,
        exit_code: ExitCode::for_verdict(verdict),
        first_failing_stage,
        counts,
        guardrails: assessment.outcomes.clone(),
        environment_drift,
        brief,
        not_applicable: vec![],
    }
}

impl Decision {
    /// The decision with the not-applicable notes of `slices` (the gated ones), in slice
    /// order (issue 24).
    pub fn with_not_applicable(mut self, slices: &[Slice]) -> Decision {
        self.not_applicable = slices
            .iter()
            .flat_map(|s| s.not_applicable.iter().cloned())
            .collect();
        self
    }

    /// The blocking guardrails that failed, for summaries.
    pub fn failures(&self) -> impl Iterator<Item = &GuardrailOutcome> {
        self.guardrails
            .iter()
            .filter(|o| o.severity == Severity::Block && o.verdict == Verdict::Fail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::metric::Metric;
    use crate::ingress::Rule;

    fn outcome(verdict: Verdict, severity: Severity, stage: Stage) -> GuardrailOutcome {
        GuardrailOutcome {
            pack: "p".into(),
            slice: "s".into(),
            guardrail: None,
            metric: Metric::EffectiveSpeedup,
            rule: Rule::AtLeast { bound: 1.2 },
            verdict,
            finding: verdict,
            severity,
            value: Some(1.0),
            baseline: None,
            ci_low: None,
            ci_high: None,
            p_value: None,
            confidence: 0.95,
            samples: 10,
            bottleneck: None,
            stage,
            detail: String::new(),
            location: None,
            yardstick: None,
            undecided_by: None,
        }
    }

    fn decide_on(outcomes: Vec<GuardrailOutcome>) -> Decision {
        decide(
            &[],
            &Assessment {
                outcomes,
                diagnoses: vec![],
                contradictions: vec![],
                quality: vec![],
                under_burst: vec![],
            },
            vec![],
        )
    }

    #[test]
    fn verdict_precedence_and_exit_codes() {
        use Severity::Block;
        use Verdict::{Fail, Inconclusive, Pass};
        let v = Stage::Validation;
        let advisory = || outcome(Verdict::Warn, Severity::Warn, v);
        assert_eq!(decide_on(vec![outcome(Pass, Block, v)]).exit_code, ExitCode::Pass);
        let warn = decide_on(vec![outcome(Pass, Block, v), advisory()]);
        assert_eq!((warn.verdict, warn.exit_code), (Verdict::Warn, ExitCode::Pass));
        let inc = decide_on(vec![outcome(Inconclusive, Block, v), advisory()]);
        assert_eq!(inc.exit_code, ExitCode::Inconclusive);
        let fail = decide_on(vec![outcome(Inconclusive, Block, v), outcome(Fail, Block, v)]);
        assert_eq!((fail.verdict, fail.exit_code), (Verdict::Fail, ExitCode::Fail));
        assert_eq!(
            fail.counts,
            VerdictCounts {
                pass: 0,
                warn: 0,
                inconclusive: 1,
                fail: 1
            }
        );
    }

    #[test]
    fn first_failing_stage_is_the_earliest_in_the_pipeline() {
        use Verdict::Fail;
        let d = decide_on(vec![
            outcome(Fail, Severity::Block, Stage::Validation),
            outcome(Fail, Severity::Block, Stage::Lowering),
        ]);
        assert_eq!(d.first_failing_stage, Some(Stage::Lowering));
        assert_eq!(
            decide_on(vec![outcome(Verdict::Pass, Severity::Block, Stage::Validation)]).first_failing_stage,
            None
        );
    }
}
