// Google Benchmark program behind tests/data/import/google_benchmark.json (see README.md).
#include <benchmark/benchmark.h>
#include <vector>

// A strided sum over a "dense" buffer and over half of it ("sparse"): two entries a
// pack can gate against each other.
static void sum(benchmark::State& state, std::size_t stride) {
  std::vector<float> v(static_cast<std::size_t>(state.range(0)), 1.0f);
  for (auto _ : state) {
    float s = 0;
    for (std::size_t i = 0; i < v.size(); i += stride) s += v[i];
    benchmark::DoNotOptimize(s);
  }
}
static void BM_Dense(benchmark::State& state) { sum(state, 1); }
static void BM_Sparse(benchmark::State& state) { sum(state, 2); }
BENCHMARK(BM_Dense)->Arg(1 << 16);
BENCHMARK(BM_Sparse)->Arg(1 << 16);
BENCHMARK_MAIN();
