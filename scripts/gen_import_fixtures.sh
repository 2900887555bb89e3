#!/bin/sh
# Regenerates the import fixtures under tests/data/import/ with the real tools (see its
# README.md for the versions used). Needs: hyperfine, g++ with libbenchmark-dev, python3
# with pytest-benchmark; the criterion fixture comes from scripts/criterion-fixture/.
set -eu
cd "$(dirname "$0")/.."
out=tests/data/import
hyperfine --runs 20 --warmup 3 --export-json "$out/hyperfine.json" \
	-n busy-2000 'sh scenarios/examples/busy.sh 2000' \
	-n busy-8000 'sh scenarios/examples/busy.sh 8000'
g++ -O2 -o /tmp/gbench_fixture "$out/src/gbench_fixture.cc" -lbenchmark -lpthread
/tmp/gbench_fixture --benchmark_repetitions=12 --benchmark_min_time=0.01 \
	--benchmark_format=json >"$out/google_benchmark.json"
(cd "$out/src" && python3 -m pytest -q -p no:cacheprovider test_pytest_fixture.py \
	--benchmark-json=../pytest_benchmark.json --benchmark-save-data)
# criterion: a tiny bench of its own (not part of sparsegate's build), `new/` kept.
CARGO_TARGET_DIR=/tmp/critfix cargo bench --manifest-path scripts/criterion-fixture/Cargo.toml --bench fixture
for b in dense sparse; do
	mkdir -p "$out/criterion/sum/$b/new"
	cp /tmp/critfix/criterion/sum/$b/new/*.json "$out/criterion/sum/$b/new/"
done
