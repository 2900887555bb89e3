//! CPU contention against a golden baseline (issue 22). A slice splits its work in equal
//! shares over its workers and waits for the last; when another process takes one of two
//! cores, the worker that shares it runs at half speed and the slice takes twice as long.
//! Neither the golden baseline's interval nor the calibration probe covers that: the
//! LLaMA-2-7B FFN slice gated right after `bless` with one busy core ran 1.97× slower,
//! its stream probe 1.45×, and every gate failed or was inconclusive by luck.
//!
//! Each run records the share of its cores it got (process CPU time ÷ wall time ×
//! threads; `cpu_share`): 0.97 on the quiet machine, 0.51 with the busy core. When the
//! two sessions' shares differ by more than [`CONTENTION_TOLERANCE`], the ratio is also
//! read with that difference taken out (a slowdown of `then ÷ now` is what the machine
//! alone explains): a `fail` that the contention could explain, or a `pass` that a
//! contended baseline could have flattered, becomes `inconclusive`, and the memo says
//! how much of its cores each session got. A change beyond what contention explains
//! still fails.

use super::describe::{num, range};
use super::rules::{Judgement, read_interval};
use crate::domain::Counter;
use crate::domain::metric::Better;
use crate::domain::verdict::Verdict;

/// Shares within this fraction of each other count as the same machine state (a quiet
/// machine reads 0.95–0.99 from one session to the next).
pub const CONTENTION_TOLERANCE: f64 = 0.1;

/// The share of their cores the two sessions' threads got.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Contention {
    /// This session's (the candidate's).
    pub now: f64,
    /// The golden baseline's.
    pub then: f64,
}

impl Contention {
    /// From both sides' counters; `None` where either did not measure it (commands,
    /// imports, baselines blessed before it was recorded) or it is not a share.
    pub fn of(now: &crate::domain::Counters, then: &crate::domain::Counters) -> Option<Contention> {
        let share = |c: &crate::domain::Counters| {
            c.get(Counter::CpuShare)
                .copied()
                .filter(|s| s.is_finite() && *s > 0.0 && *s <= 1.0)
        };
        Some(Contention {
            now: share(now)?,
            then: share(then)?,
        })
    }

    /// How much slower this session's machine state alone makes a timing: `then ÷ now`
    /// (above 1 when this session got less of its cores than the baseline's).
    pub fn factor(self) -> f64 {
        self.then / self.now
    }

    /// Whether the two states differ by more than [`CONTENTION_TOLERANCE`].
    pub fn differs(self) -> bool {
        (self.factor().ln()).abs() > (1.0 + CONTENTION_TOLERANCE).ln()
    }
}

/// Account for a difference in contention in a golden-baseline judgement of a timing
/// metric (see the module docs). `raw` is the interval of the raw ratio candidate ÷
/// baseline (not calibration-normalised: the probe has absorbed part of the contention,
/// and dividing it out twice would over-explain), read against `1 ± margin` in the
/// direction `better` says.
pub(crate) fn account_for_contention(
    j: &mut Judgement,
    raw: Option<(f64, f64)>,
    c: Contention,
    better: Better,
    margin: f64,
) {
    if !c.differs() {
        return;
    }
    let Some((lo, hi)) = raw.filter(|(lo, hi)| *lo > 0.0 && *hi > 0.0) else {
        return;
    };
    let lower_better = better == Better::Lower;
    let limit = if lower_better { 1.0 + margin } else { 1.0 - margin };
    // A time stretched by f, a rate shrunk by it.
    let f = if lower_better {
        c.factor()
    } else {
        1.0 / c.factor()
    };
    let explained = (lo / f, hi / f);
    j.detail.push_str(&format!(
        "; contention: this session's threads got {}% of their cores, the baseline's {}% (other processes \
         took the rest), which alone makes a timing ×{} {}; with it taken out the raw ratio CI is {}",
        num(c.now * 100.0),
        num(c.then * 100.0),
        num(c.factor().max(1.0 / c.factor())),
        if c.factor() > 1.0 {
            "slower today"
        } else {
            "slower in the baseline's session"
        },
        range(explained.0, explained.1)
    ));
    let unchanged = match j.verdict {
        Verdict::Fail => read_interval(explained, limit, lower_better) == Verdict::Fail,
        Verdict::Pass => read_interval(explained, limit, lower_better) == Verdict::Pass,
        _ => true,
    };
    if unchanged {
        if j.verdict == Verdict::Fail {
            j.detail
                .push_str(": beyond what contention explains, the failure stands");
        }
        return;
    }
    j.detail.push_str(if j.verdict == Verdict::Fail {
        ": contention could explain this change, so inconclusive rather than fail"
    } else {
        ": the baseline's contention could hide a regression, so inconclusive rather than pass"
    });
    j.detail.push_str(
        "; gate on a quiet runner, or pair the candidate with a baseline build in this session \
         (`gate --baseline-bin`, or `baseline:` on a command slice) to decide",
    );
    j.verdict = Verdict::Inconclusive;
    j.undecided_by = Some(crate::validate::Undecided::Contention);
    // No longer a rejected hypothesis: out of the Holm family.
    j.p_value = None;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A judgement `verdict` of the ratio interval `ci` (raw and as judged), after
    /// accounting for contention `c` with a 5% margin.
    fn read(c: Contention, verdict: Verdict, ci: (f64, f64), better: Better) -> Judgement {
        let mut j = Judgement {
            verdict,
            ci: Some(ci),
            p_value: Some(0.001),
            ..Judgement::inconclusive("ratio".into())
        };
        account_for_contention(&mut j, Some(ci), c, better, 0.05);
        j
    }

    fn counters(share: Option<f64>) -> crate::domain::Counters {
        share.into_iter().map(|s| (Counter::CpuShare, s)).collect()
    }

    #[test]
    fn issue_22_a_slowdown_one_busy_core_explains_is_inconclusive() {
        // The LLaMA FFN A/A: 1.97x slower while getting 51% of its cores against 97%.
        let c = Contention {
            now: 0.51,
            then: 0.97,
        };
        let j = read(c, Verdict::Fail, (1.9, 2.0), Better::Lower);
        assert_eq!(j.verdict, Verdict::Inconclusive, "{}", j.detail);
        assert_eq!(j.p_value, None);
        assert!(
            j.detail.contains("got 51% of their cores, the baseline's 97%"),
            "{}",
            j.detail
        );
        // Three times slower is more than contention explains.
        let j = read(c, Verdict::Fail, (2.9, 3.1), Better::Lower);
        assert_eq!(j.verdict, Verdict::Fail, "{}", j.detail);
        assert!(j.detail.contains("the failure stands"), "{}", j.detail);
        // Throughput falls by what latency rises.
        let j = read(c, Verdict::Fail, (0.5, 0.53), Better::Higher);
        assert_eq!(j.verdict, Verdict::Inconclusive, "{}", j.detail);
    }

    #[test]
    fn issue_22_a_pass_against_a_contended_baseline_is_inconclusive() {
        // Blessed with a busy core: today's 1.0 could be a 1.9x regression.
        let c = Contention {
            now: 0.97,
            then: 0.51,
        };
        let j = read(c, Verdict::Pass, (0.98, 1.02), Better::Lower);
        assert_eq!(j.verdict, Verdict::Inconclusive, "{}", j.detail);
        assert!(
            j.detail.contains("slower in the baseline's session"),
            "{}",
            j.detail
        );
        // Faster than even the contention explains: still a pass.
        let j = read(c, Verdict::Pass, (0.4, 0.45), Better::Lower);
        assert_eq!(j.verdict, Verdict::Pass, "{}", j.detail);
    }

    #[test]
    fn issue_22_sessions_alike_in_contention_are_read_as_measured() {
        let c = Contention {
            now: 0.95,
            then: 0.99,
        };
        assert!(!c.differs());
        let j = read(c, Verdict::Fail, (1.09, 1.11), Better::Lower);
        assert_eq!(j.verdict, Verdict::Fail);
        assert!(!j.detail.contains("contention"), "{}", j.detail);
    }

    #[test]
    fn issue_22_contention_is_read_only_where_both_sides_measured_it() {
        assert_eq!(Contention::of(&counters(Some(0.5)), &counters(None)), None);
        assert_eq!(Contention::of(&counters(Some(0.0)), &counters(Some(0.9))), None);
        assert_eq!(
            Contention::of(&counters(Some(0.5)), &counters(Some(0.9))),
            Some(Contention { now: 0.5, then: 0.9 })
        );
    }
}
