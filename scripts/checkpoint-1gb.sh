#!/bin/sh
# Issue 21's timing: reading and verifying a 1 GB checkpoint must take under 10 s.
#
#   scripts/checkpoint-1gb.sh [SPARSEGATE] [DIR]
#
# Writes, with PyPI's numpy and safetensors (`pip install numpy safetensors`), a 2:4-pruned
# fp16 checkpoint of three LLaMA-2-7B blocks (hidden 4096, intermediate 11008: q/k/v/o and
# gate/up/down per block, 21 GEMM weights, 1.21 GB in one safetensors file) with its
# config.json (compressed-tensors `sparsity_config`, `sparsity_structure: 2:4`) into DIR
# (default: a fresh temporary directory, removed at the end), one group planted in the last
# down_proj so the verification has something to find. Then, each under `/usr/bin/time -v`:
#   validate — every header checked against the file, the files digested (sha256);
#   gate     — validate again, then every weight read (bounded by its declared size) and
#              verified, on a `backend: sim` slice (h100, fp16, 16 tokens), against the
#              slice's 2:4 and the config's claim; it must exit 1 (the planted group) with
#              `pattern_violations` = 1 located at [7, 100].
# Prints the wall seconds and peak RSS of each, and the CPU model. Not run in CI (it writes
# 1.2 GB and needs Python); the numbers go in the session note.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../target/release/sparsegate}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
python=${PYTHON:-python3}
if [ -n "${2:-}" ]; then
  dir=$2
  mkdir -p "$dir"
else
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
fi
[ -x "$bin" ] || { echo "no sparsegate at $bin (cargo build --release)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "needs GNU time at /usr/bin/time" >&2; exit 2; }

mkdir -p "$dir/ckpt"
"$python" - "$dir/ckpt" <<'EOF'
import json, sys
import numpy as np
from safetensors.numpy import save_file

out = sys.argv[1]
hidden, inter, layers = 4096, 11008, 3
rng = np.random.default_rng(21)
# The six ways to keep 2 of 4.
keep = np.array([[1,1,0,0],[1,0,1,0],[1,0,0,1],[0,1,1,0],[0,1,0,1],[0,0,1,1]], dtype=np.float16)
def pruned(rows, cols):
    w = rng.standard_normal((rows * cols // 4, 4), dtype=np.float32).astype(np.float16)
    # No kept weight may round to zero, or a tensor would hold less than 2 of 4.
    w[w == 0] = np.float16(0.5)
    w *= keep[rng.integers(0, 6, size=w.shape[0])]
    return w.reshape(rows, cols)
tensors = {}
for i in range(layers):
    p = f"model.layers.{i}."
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        tensors[p + f"self_attn.{name}.weight"] = pruned(hidden, hidden)
    tensors[p + "mlp.gate_proj.weight"] = pruned(inter, hidden)
    tensors[p + "mlp.up_proj.weight"] = pruned(inter, hidden)
    tensors[p + "mlp.down_proj.weight"] = pruned(hidden, inter)
# One planted third weight: row 7, the group at column 100 keeps three.
tensors[f"model.layers.{layers - 1}.mlp.down_proj.weight"][7, 100:104] = [1.0, 1.0, 1.0, 0.0]
save_file(tensors, f"{out}/model.safetensors")
json.dump({
    "model_type": "llama", "num_hidden_layers": layers, "hidden_size": hidden,
    "intermediate_size": inter, "num_attention_heads": 32, "num_key_value_heads": 32,
    "compression_config": {"sparsity_config": {
        "format": "dense", "sparsity_structure": "2:4", "targets": ["Linear"], "ignore": ["lm_head"]}},
}, open(f"{out}/config.json", "w"), indent=2)
EOF

cat >"$dir/pack.yaml" <<'EOF'
schema_version: 1
name: ckpt-1gb
owners: [{name: Ada, email: ada@example.com, role: owner}]
rollback: {trigger: any tensor breaks the 2:4 the config claims}
guardrails:
  - {metric: pattern_violations, at_most: 0}
slices:
  - id: llama-blocks
    backend: sim
    preset: h100
    precision: [fp16]
    workload:
      checkpoint: {weights: ckpt/model.safetensors, config: ckpt/config.json, tokens: 16}
    sparsity: ["2:4"]
EOF

bytes=$(wc -c <"$dir/ckpt/model.safetensors")
echo "checkpoint: $dir/ckpt/model.safetensors, $bytes bytes"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) logical CPUs"
# Drop nothing from the page cache (that needs root): the file was just written, so these
# are warm-cache numbers; `cat` it first to be sure.
cat "$dir/ckpt/model.safetensors" >/dev/null

measure() {
  label=$1
  want=$2
  shift 2
  set +e
  (cd "$dir" && /usr/bin/time -v -o "$dir/time-$label.txt" "$bin" "$@" >"$dir/out-$label.txt" 2>&1)
  rc=$?
  set -e
  wall=$(sed -n 's/^.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$dir/time-$label.txt")
  rss=$(sed -n 's/^.*Maximum resident set size (kbytes): //p' "$dir/time-$label.txt")
  echo "$label: exit $rc (want $want), wall $wall, peak RSS $rss KiB"
  if [ "$rc" != "$want" ]; then
    cat "$dir/out-$label.txt" >&2
    exit 1
  fi
}

measure validate 0 validate pack.yaml
measure gate 1 gate pack.yaml --out out -q
"$python" - "$dir/out/evidence.json" <<'EOF'
import json, sys
e = json.load(open(sys.argv[1]))
s = e["slices"][0] if isinstance(e.get("slices"), list) else next(iter(e["slices"].values()))
broken = [(t["tensor"], t["violations"], t.get("first_violations")) for t in s["structure"] if t["violations"]]
print("tensors verified:", len(s["structure"]), "pattern_violations:", s["counters"]["pattern_violations"], "found:", broken)
assert s["counters"]["pattern_violations"] == 1 and broken[0][2] == [[7, 100]], broken
EOF
