//! Stage 3, tile/dataflow scheduling: how an op is blocked for the CPU caches and split
//! over threads. It knows nothing of guardrails.
//!
//! The cache-budget heuristic itself lives in the kernels crate
//! ([`sparsegate_kernels::schedule`]), beside the inner loop it is derived from; this stage
//! applies it to an op.

use crate::domain::GemmOp;

pub use sparsegate_kernels::schedule::{
    CpuSchedule, L1_OUTPUT_BUDGET, L1_TILE_BUDGET, L2_WEIGHT_BUDGET, MAX_STRIP,
};

/// Block `op` for a CPU with `threads` workers.
pub fn schedule_cpu(op: &GemmOp, threads: usize) -> CpuSchedule {
    sparsegate_kernels::schedule::schedule_cpu(op.m, op.n, op.k, threads)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The op's M, N and K reach the heuristic in that order: every dimension here is
    /// distinct and each changes the schedule, so a swap would show.
    #[test]
    fn an_op_is_scheduled_by_its_own_dimensions() {
        let op = GemmOp {
            name: "t".into(),
            m: 4,
            n: 3072,
            k: 768,
        };
        let s = schedule_cpu(&op, 2);
        assert_eq!(s, sparsegate_kernels::schedule::schedule_cpu(4, 3072, 768, 2));
        assert_eq!((s.strip_width, s.k_block, s.rows_per_task), (8, 1024, 170));
        assert_ne!(s, sparsegate_kernels::schedule::schedule_cpu(768, 3072, 4, 2));
        assert_ne!(s, sparsegate_kernels::schedule::schedule_cpu(4, 768, 3072, 2));
    }
}
