//! A checkpoint slice's artifact evidence (issue 21): every selected tensor verified against
//! the slice's pattern, the counters the guardrails read, and the digests of the files.

/// Verify every tensor of `slice`'s checkpoint against its sparsity, and the tensors its
/// config's claim covers against the claimed `sparsity_structure`, and record, in
/// `evidence`: the per-tensor structure, `pattern_violations` (over the tensors the slice
/// runs sparse: groups breaking the slice's pattern, plus those breaking the config's claim
/// where that is another pattern), `sparse_coverage` (the share of the checkpoint's selected GEMM FLOPs whose
/// weights hold the pattern and whose op the plan put on a sparse kernel) and the digests
/// of the files read. A tensor that cannot be read fails the slice at execution.
pub(crate) fn record(
    w: &crate::ingress::checkpoint::CheckpointWorkload,
    slice: &crate::ingress::Slice,
    plan: &crate::lower::Plan,
    evidence: &mut super::SliceEvidence,
) {
    use crate::domain::Metric;
    use crate::lower::KernelPath;
    evidence.artifacts = w
        .checkpoint
        .files
        .iter()
        .map(|f| super::evidence::ArtifactRecord {
            name: f.name.clone(),
            bytes: f.bytes,
            digest: f.digest.clone(),
        })
        .collect();
    let tokens: f64 = w.tokens.iter().map(|&t| t as f64).sum();
    let flops =
        |t: &crate::ingress::checkpoint::TensorEntry| 2.0 * tokens * t.shape[0] as f64 * t.shape[1] as f64;
    let (mut violations, mut covered, mut total) = (0u64, 0.0, 0.0);
    let claimed = w
        .checkpoint
        .config
        .as_ref()
        .and_then(|c| c.sparsity.as_ref())
        .and_then(|c| c.structure.as_ref());
    let layers = w.layers.iter().map(|n| (n, None));
    let dense = w.left_dense.iter().map(|(n, why)| (n, Some(why.clone())));
    for (name, left_dense) in layers.chain(dense) {
        let Some(tensor) = w.checkpoint.tensor(name) else {
            continue;
        };
        let data = match w.checkpoint.read_tensor(tensor) {
            Ok(d) => d,
            Err(e) => {
                evidence.failure = Some(super::SliceFailure {
                    stage: crate::domain::Stage::Execution,
                    message: format!("checkpoint tensor `{name}`: {e}"),
                });
                return;
            }
        };
        let Some(mut s) = super::structure::verify(tensor, &data, slice.sparsity) else {
            continue;
        };
        total += flops(tensor);
        // Every op of the tensor (one per token count) on a sparse kernel.
        let mut paths = plan
            .ops
            .iter()
            .filter(|p| crate::ingress::checkpoint::tensor_of(&p.op.name) == name)
            .map(|p| p.path)
            .peekable();
        let sparse_path = paths.peek().is_some() && paths.all(|p| p == KernelPath::Sparse);
        if left_dense.is_none()
            && let Some(claimed) = claimed
        {
            let check = claim_check(tensor, &data, &s, slice.sparsity, claimed);
            // Counted once where the claim is the slice's own pattern.
            if claimed.structure.pattern() != Some(slice.sparsity) {
                violations += check.violations;
            }
            s.claim = Some(check);
        }
        if left_dense.is_none() {
            violations += s.violations;
            if s.violations == 0 && sparse_path {
                covered += flops(tensor);
            }
            if s.violations > 0 && sparse_path {
                timed_after_pruning(&mut evidence.plan, name, slice.sparsity, s.violations);
            }
        }
        s.stacks = super::eligibility::judge(
            tensor.shape[0],
            tensor.shape[1],
            slice.precision,
            slice.sparsity,
            s.violations,
        );
        s.left_dense = left_dense;
        evidence.structure.push(s);
    }
    evidence
        .counters
        .insert(Metric::PatternViolations, violations as f64);
    evidence.counters.insert(
        Metric::SparseCoverage,
        if total > 0.0 { covered / total } else { 0.0 },
    );
}

/// A CPU kernel cannot run a tensor that breaks its pattern as shipped: the slice prunes
/// the breaking groups by magnitude and times that, so the matrix says so beside the kernel
/// (issue 21: it had read as if the shipped tensor ran sparse). A simulated slice models
/// such a tensor dense and its plan already lists it as a fallback.
fn timed_after_pruning(
    plan: &mut crate::lower::Plan,
    tensor: &str,
    pattern: crate::domain::Sparsity,
    violations: u64,
) {
    let ops = plan.ops.iter_mut().filter(|p| {
        p.path == crate::lower::KernelPath::Sparse
            && crate::ingress::checkpoint::tensor_of(&p.op.name) == tensor
    });
    for op in ops {
        op.reason = format!(
            "{}; the shipped tensor breaks {pattern} in {violations} group{}, so it was timed after \
             magnitude-pruning {} to the pattern",
            op.reason,
            if violations == 1 { "" } else { "s" },
            if violations == 1 { "it" } else { "them" }
        );
    }
}

/// `tensor` (bytes `data`, already verified against the slice's `pattern` as `verified`)
/// checked against the config's `claimed` structure.
fn claim_check(
    tensor: &crate::ingress::checkpoint::TensorEntry,
    data: &[u8],
    verified: &super::structure::TensorStructure,
    pattern: crate::domain::Sparsity,
    claimed: &crate::ingress::checkpoint::Claimed,
) -> super::structure::ClaimCheck {
    let (groups, violations, first_violations) = match claimed.structure.pattern() {
        Some(p) if p == pattern => (
            verified.groups,
            verified.violations,
            verified.first_violations.clone(),
        ),
        Some(p) => super::structure::verify(tensor, data, p).map_or((0, 0, Vec::new()), |c| {
            (c.groups, c.violations, c.first_violations)
        }),
        None => (0, 0, Vec::new()),
    };
    super::structure::ClaimCheck {
        structure: claimed.structure.to_string(),
        at: claimed.at.clone(),
        groups,
        violations,
        first_violations,
    }
}
