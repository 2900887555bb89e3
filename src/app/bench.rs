//! `bench`: micro-benchmark one built-in kernel against its dense comparator.

use crate::error::{Error, Result};
use crate::execute::bench::{BenchReport, BenchRequest, bench_gemm};

/// Run the benchmark `request` describes; a kernel that cannot run is bad input.
pub fn bench(request: &BenchRequest) -> Result<BenchReport> {
    bench_gemm(request).map_err(|e| Error::Usage {
        message: e.to_string(),
        hint:
            "check the shape fits in memory; a sparse pattern that does not fit the shape falls back to dense"
                .into(),
    })
}
