//! `bench`: micro-benchmark one built-in kernel against its dense comparator.

use crate::error::{Error, Result};
use crate::execute::bench::{BenchError, BenchReport, BenchRequest, SweepReport, bench_gemm, sweep_tokens};

/// Run the benchmark `request` describes; a kernel that cannot run is bad input.
pub fn bench(request: &BenchRequest) -> Result<BenchReport> {
    bench_gemm(request).map_err(usage)
}

/// `bench --sweep-tokens`: the request's weights at each token count, and the break-even.
pub fn bench_sweep(request: &BenchRequest, tokens: &[usize]) -> Result<SweepReport> {
    sweep_tokens(request, tokens).map_err(usage)
}

fn usage(e: BenchError) -> Error {
    Error::Usage {
        message: e.to_string(),
        hint:
            "check the shape fits in memory; a sparse pattern that does not fit the shape falls back to dense"
                .into(),
    }
}
