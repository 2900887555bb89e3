//! The counter vocabulary: properties of a run that are not samples (how many FLOPs the
//! plan does, how many bytes its metadata takes, how many requests a load test sent, the
//! simulator's exact figures). Names are stable because evidence and baselines store them;
//! a counter map serializes in name order, as the string-keyed maps it replaced did, so
//! files and their digests do not change.

use super::by_name::by_name;
use super::metric::Metric;
use super::verdict::Bottleneck;

macro_rules! counters {
    ($($variant:ident => $name:literal, $doc:literal;)*) => {
        /// A counter key: a metric recorded as one exact value (the simulator's figures, a
        /// model's accuracy), the simulated time spent in one bottleneck class, or one of
        /// the run's own counts.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Counter {
            /// A metric's value, exact rather than sampled.
            Metric(Metric),
            /// Simulated seconds attributed to one bottleneck class.
            SimTime(Bottleneck),
            $(#[doc = $doc] $variant,)*
        }

        impl Counter {
            /// The counters that are neither metrics nor simulated times.
            const OWN: &'static [Counter] = &[$(Counter::$variant,)*];

            /// The stable name stored in evidence and baselines.
            pub fn name(self) -> &'static str {
                match self {
                    Counter::Metric(m) => m.name(),
                    Counter::SimTime(b) => b.sim_time_counter(),
                    $(Counter::$variant => $name,)*
                }
            }
        }
    };
}

counters! {
    DenseFlops => "dense_flops", "FLOPs of the plan's ops done dense, per iteration.";
    UsefulFlops => "useful_flops", "FLOPs on kept weights only, per iteration.";
    ValueBytes => "value_bytes", "Bytes of the kept weight values.";
    MetadataBytes => "metadata_bytes", "Bytes of the sparse format's index metadata.";
    WeightBytes => "weight_bytes", "Bytes of the weights as the dense kernel stores them.";
    BytesMoved => "bytes_moved", "Bytes the simulated accelerator moved, per iteration.";
    ComparatorLatency => "comparator_latency", "The simulated dense comparator's latency, in seconds.";
    RoofPeakGflops => "roof_peak_gflops", "The simulated machine's compute roof, GFLOP/s.";
    RoofBandwidthGbps => "roof_bandwidth_gbps", "The simulated machine's memory roof, GB/s.";
    Samples => "samples", "Timed samples taken.";
    Runs => "runs", "Runs (processes or blocks) the samples came from.";
    Invocations => "invocations", "Times a command backend's program was started.";
    Requests => "requests", "Requests a load test generated.";
    Served => "served", "Requests a load test served.";
    Dropped => "dropped", "Requests dropped because the queue was full.";
    Queued => "queued", "Requests that waited behind another.";
    MaxInSystem => "max_in_system", "The most requests in the system at once.";
    ServiceS => "service_s", "Seconds spent serving, summed over requests.";
    QueueCapacity => "queue_capacity", "The load test's queue bound.";
    P99MinRequests => "p99_min_requests", "Requests an early-stopping p99 estimate needs.";
    SparseGpuShare => "sparse_gpu_share", "GPU trace: sparse GEMM kernel time / all kernel time.";
    DenseGemmCountShare => "dense_gemm_count_share", "GPU trace: dense GEMM kernels / GEMM kernels, by count (fallback_rate is by time).";
    SparseKernels => "sparse_kernels", "GPU trace: sparse GEMM kernels launched.";
    DenseKernels => "dense_kernels", "GPU trace: dense GEMM kernels launched.";
    OtherKernels => "other_kernels", "GPU trace: other kernels launched.";
    SparseGpuS => "sparse_gpu_s", "GPU trace: seconds of sparse GEMM kernels.";
    DenseGpuS => "dense_gpu_s", "GPU trace: seconds of dense GEMM kernels.";
    KernelGpuS => "kernel_gpu_s", "GPU trace: seconds of all kernels, summed.";
    CpuShare => "cpu_share", "Median over runs of the share of its cores a run's threads got while sampling (CPU time ÷ wall time × threads): about 1 on a quiet machine, lower when other processes took cores.";
    CalibrationStreamBytes => "calibration_stream_bytes", "Bytes the calibration probe reads per sample: 0 for the in-cache FMA probe (a 48³ GEMM), else a read past the last-level cache, for a slice that streams from memory.";
}

impl Counter {
    /// Every counter, for parsing.
    pub fn all() -> impl Iterator<Item = Counter> {
        let metrics = Metric::ALL.iter().map(|&m| Counter::Metric(m));
        let classes = Bottleneck::ALL.iter().map(|&b| Counter::SimTime(b));
        metrics.chain(classes).chain(Counter::OWN.iter().copied())
    }
}

impl Counter {
    /// The metric this counter records exactly, if it is one.
    pub fn metric(self) -> Option<Metric> {
        match self {
            Counter::Metric(m) => Some(m),
            _ => None,
        }
    }
}

impl From<Metric> for Counter {
    fn from(m: Metric) -> Self {
        Counter::Metric(m)
    }
}

by_name!(Counter, "counter");

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    #[test]
    fn every_counter_name_is_unique_and_round_trips() {
        let names: BTreeSet<&str> = Counter::all().map(Counter::name).collect();
        assert_eq!(names.len(), Counter::all().count());
        for c in Counter::all() {
            assert_eq!(c.name().parse::<Counter>().unwrap(), c);
        }
        assert!("latency_p42".parse::<Counter>().is_err());
    }

    #[test]
    fn counter_maps_serialize_in_name_order_like_string_maps() {
        let typed: BTreeMap<Counter, f64> = Counter::all().enumerate().map(|(i, c)| (c, i as f64)).collect();
        let strings: BTreeMap<&str, f64> = typed.iter().map(|(c, v)| (c.name(), *v)).collect();
        assert_eq!(
            serde_json::to_string(&typed).unwrap(),
            serde_json::to_string(&strings).unwrap()
        );
    }
}
