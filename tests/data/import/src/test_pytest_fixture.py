"""pytest-benchmark suite behind tests/data/import/pytest_benchmark.json (see README.md)."""


def dense(n=20000):
    return sum(range(n))


def sparse(n=20000):
    return sum(range(0, n, 2))


def test_dense(benchmark):
    benchmark.pedantic(dense, rounds=12, iterations=5, warmup_rounds=2)


def test_sparse(benchmark):
    benchmark.pedantic(sparse, rounds=12, iterations=5, warmup_rounds=2)
