#!/bin/sh
# Gate this checkout against its merge base, paired in one session (issue 22).
#
#   scripts/gate-against-base.sh [BASE_REF] [GATE ARGS...]
#   e.g. scripts/gate-against-base.sh origin/main scenarios/quickstart.yaml --out out
#
# Builds sparsegate at `git merge-base HEAD BASE_REF` (default origin/main) in a git
# worktree with its own target directory, builds this checkout, then runs
# `sparsegate gate --baseline-bin <merge-base build> GATE ARGS...`: the merge base's runs
# of the built-in kernels' slices are interleaved with this build's, and latency
# guardrails are decided on the per-pair ratios. (`backend: command` slices name their
# own baseline command in the pack.) A merge base older than the child-run protocol
# handshake is refused with exit 2. Both builds are incremental on later calls.
set -eu
cargo=${CARGO:-cargo}
base_ref=${1:-origin/main}
[ $# -gt 0 ] && shift
root=$(git rev-parse --show-toplevel)
base=$(git merge-base HEAD "$base_ref")
tree=$root/target/merge-base/src
if [ -d "$tree" ]; then
	git -C "$tree" checkout --quiet --detach "$base"
else
	git worktree add --quiet --detach "$tree" "$base"
fi
echo "gate-against-base: baseline build is $(git -C "$tree" log -1 --format='%h %s' "$base")" >&2
"$cargo" build --release --quiet --manifest-path "$tree/Cargo.toml" \
	--target-dir "$root/target/merge-base/build" --bin sparsegate
"$cargo" build --release --quiet --manifest-path "$root/Cargo.toml" --bin sparsegate
exec "$root/target/release/sparsegate" gate \
	--baseline-bin "$root/target/merge-base/build/release/sparsegate" "$@"
