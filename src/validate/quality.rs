//! Quality evidence read statistically: accuracies with Wilson intervals, the paired
//! accuracy difference with Newcombe's interval, and McNemar's test on the paired
//! predictions. The guardrail rules and the memo both read these numbers.

use crate::execute::{ModelScore, QualityEvidence};
use crate::stats::{mcnemar, newcombe_paired, wilson};
use serde::{Deserialize, Serialize};

/// Outcomes of two classifiers on the same test samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PairedTable {
    /// Samples both classify correctly.
    pub both: u64,
    /// Samples only the candidate gets right.
    pub only_candidate: u64,
    /// Samples only the reference gets right.
    pub only_reference: u64,
    /// Samples both get wrong.
    pub neither: u64,
}

impl PairedTable {
    /// Count the table from predictions and labels (all the same length; extra entries of
    /// a longer slice are ignored).
    pub fn count(labels: &[u8], candidate: &[u8], reference: &[u8]) -> PairedTable {
        let mut t = PairedTable {
            both: 0,
            only_candidate: 0,
            only_reference: 0,
            neither: 0,
        };
        for ((&y, &c), &r) in labels.iter().zip(candidate).zip(reference) {
            match (c == y, r == y) {
                (true, true) => t.both += 1,
                (true, false) => t.only_candidate += 1,
                (false, true) => t.only_reference += 1,
                (false, false) => t.neither += 1,
            }
        }
        t
    }

    /// Samples in the table.
    pub fn total(&self) -> u64 {
        self.both + self.only_candidate + self.only_reference + self.neither
    }
}

/// A candidate model against a reference on the same test split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PairedQuality {
    /// Candidate accuracy.
    pub accuracy: f64,
    /// Its Wilson interval.
    pub accuracy_ci: (f64, f64),
    /// Reference accuracy.
    pub reference_accuracy: f64,
    /// Its Wilson interval.
    pub reference_ci: (f64, f64),
    /// Candidate − reference accuracy.
    pub delta: f64,
    /// Newcombe's paired interval of the difference.
    pub delta_ci: (f64, f64),
    /// Exact McNemar p-value (two-sided binomial test on the discordant pairs).
    pub mcnemar_p: f64,
    /// The paired outcome table.
    pub table: PairedTable,
    /// Interval confidence.
    pub confidence: f64,
}

/// Why quality evidence cannot be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QualityError {
    /// The predictions do not cover the labels.
    #[error("quality evidence is inconsistent: {labels} labels, {candidate} and {reference} predictions")]
    Inconsistent {
        /// Test labels.
        labels: usize,
        /// Candidate predictions.
        candidate: usize,
        /// Reference predictions.
        reference: usize,
    },
    /// An interval or test refused the counts.
    #[error("quality statistics: {0}")]
    Statistics(#[from] crate::stats::StatsError),
}

/// Read `candidate` against `reference` on the evidence's test labels at `confidence`.
pub fn paired_quality(
    labels: &[u8],
    candidate: &ModelScore,
    reference: &ModelScore,
    confidence: f64,
) -> Result<PairedQuality, QualityError> {
    if candidate.predictions.len() != labels.len() || reference.predictions.len() != labels.len() {
        return Err(QualityError::Inconsistent {
            labels: labels.len(),
            candidate: candidate.predictions.len(),
            reference: reference.predictions.len(),
        });
    }
    let t = PairedTable::count(labels, &candidate.predictions, &reference.predictions);
    let n = t.total();
    let (right_c, right_r) = (t.both + t.only_candidate, t.both + t.only_reference);
    let nf = n.max(1) as f64;
    Ok(PairedQuality {
        accuracy: right_c as f64 / nf,
        accuracy_ci: wilson(right_c, n, confidence)?,
        reference_accuracy: right_r as f64 / nf,
        reference_ci: wilson(right_r, n, confidence)?,
        delta: (right_c as f64 - right_r as f64) / nf,
        delta_ci: newcombe_paired(t.both, t.only_candidate, t.only_reference, t.neither, confidence)?,
        mcnemar_p: mcnemar(t.only_candidate, t.only_reference, true).p_value,
        table: t,
        confidence,
    })
}

/// The slice's model against its dense reference.
pub fn versus_dense(q: &QualityEvidence, confidence: f64) -> Result<PairedQuality, QualityError> {
    paired_quality(&q.labels, &q.candidate, &q.dense, confidence)
}

/// The slice's model against the dense model of equal latency, when there is one.
pub fn versus_equal_latency(
    q: &QualityEvidence,
    confidence: f64,
) -> Option<Result<PairedQuality, QualityError>> {
    q.equal_latency
        .as_ref()
        .map(|e| paired_quality(&q.labels, &q.candidate, &e.dense, confidence))
}

/// Confidence of the quality intervals the memo shows beside the guardrails (which carry
/// their own).
pub const QUALITY_CONFIDENCE: f64 = 0.95;

/// A quality slice's model against the dense model and against the dense model of equal
/// latency, at [`QUALITY_CONFIDENCE`]: judged here, shown by the memo.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QualityComparison {
    /// Pack name.
    pub pack: String,
    /// Slice id.
    pub slice: String,
    /// Against the dense model of the same width.
    pub versus_dense: Option<PairedQuality>,
    /// Against the dense model of equal latency, when one was found.
    pub versus_equal_latency: Option<PairedQuality>,
}

/// The comparisons of every slice that trained a model, in evidence order.
pub fn compare_all(slices: &[crate::execute::SliceEvidence]) -> Vec<QualityComparison> {
    slices
        .iter()
        .filter_map(|s| {
            let q = s.quality.as_ref()?;
            Some(QualityComparison {
                pack: s.pack.clone(),
                slice: s.slice.clone(),
                versus_dense: versus_dense(q, QUALITY_CONFIDENCE).ok(),
                versus_equal_latency: versus_equal_latency(q, QUALITY_CONFIDENCE).and_then(Result::ok),
            })
        })
        .collect()
}

crate::of_slice!(QualityComparison: pack, slice);

#[cfg(test)]
mod tests {
    use super::*;

    fn score(predictions: Vec<u8>) -> ModelScore {
        ModelScore {
            hidden: 8,
            weights_digest: "sha256:00".into(),
            sparsity: 0.0,
            correct: 0,
            total: predictions.len() as u64,
            predictions,
        }
    }

    /// Predictions laid out to give the paired table (both, only candidate, only
    /// reference, neither) = (340, 6, 12, 1); the expected numbers are the statsmodels
    /// fixture in `scripts/gen_paired_quality_fixtures.py`.
    #[test]
    fn issue_7_paired_quality_reads_the_table_from_predictions() {
        let (mut labels, mut cand, mut reference) = (vec![], vec![], vec![]);
        let mut push = |n: usize, c_right: bool, r_right: bool| {
            for _ in 0..n {
                labels.push(3u8);
                cand.push(if c_right { 3 } else { 5 });
                reference.push(if r_right { 3 } else { 7 });
            }
        };
        push(340, true, true);
        push(6, true, false);
        push(12, false, true);
        push(1, false, false);
        let q = paired_quality(&labels, &score(cand), &score(reference), 0.95).unwrap();
        assert_eq!(
            q.table,
            PairedTable {
                both: 340,
                only_candidate: 6,
                only_reference: 12,
                neither: 1
            }
        );
        assert!((q.delta - (6.0 - 12.0) / 359.0).abs() < 1e-15);
        assert!((q.delta_ci.0 + 0.042_656_382_120_971_45).abs() < 1e-12);
        assert!((q.delta_ci.1 - 0.007_416_394_991_161_434).abs() < 1e-12);
        assert!((q.mcnemar_p - 0.237_884_521_484_375).abs() < 1e-12);
        assert!((q.accuracy - 346.0 / 359.0).abs() < 1e-15);
        assert!(q.accuracy_ci.0 < q.accuracy && q.accuracy < q.accuracy_ci.1);
        assert!(paired_quality(&labels[1..], &score(vec![3; 359]), &score(vec![3; 359]), 0.95).is_err());
    }
}
