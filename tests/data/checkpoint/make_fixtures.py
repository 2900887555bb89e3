#!/usr/bin/env python3
"""Checkpoint fixtures for issue 21, written by the real `safetensors` package (PyPI), so the
Rust reader is tested against the format as the reference implementation writes it.

    python3 -m venv /tmp/fx && /tmp/fx/bin/pip install safetensors==0.8.0 numpy
    /tmp/fx/bin/python tests/data/checkpoint/make_fixtures.py

Writes, beside this script (small, committed; the tests never run Python):
- tiny.safetensors (f32), tiny-bf16.safetensors, tiny-int8.safetensors: a one-layer
  transformer-shaped checkpoint. `mlp.up_proj` is 2:4 along in_features, `mlp.down_proj` is
  2:4 with planted violations, `self_attn.q_proj` is 50 % unstructured, `self_attn.o_proj`
  and `lm_head` are dense (the config leaves them dense), `norm` is 1-D;
- sharded/: the same f32 tensors in two shards with `model.safetensors.index.json`;
- config.json: sizes plus a compressed-tensors `sparsity_config` (2:4, ignore list);
- classifier.safetensors (16-32-4 head, fc1 pruned 2:4), classifier-dense.safetensors (the
  same head before pruning), eval.safetensors (400 held-out samples: x, y), for quality on the
  artifact, classifier-bf16.safetensors (the shipped head in bf16, evaluated) and
  classifier-int8.safetensors (in int8 without scales, refused), and bad/eval-*.safetensors (no labels; a label outside the classes);
- control-flow.onnx: a MatMul at the top level, then an If whose branches and a Loop whose
  body hold GEMMs (subgraphs the gate lists in the matrix but does not run);
- expected.json: where the violations were planted, and the eval's accuracies, quality_delta
  and Newcombe interval (the oracle of the tests);
- bad/: headers that lie (truncated, length past the end, 10 GB length, overlapping and
  out-of-range offsets, dtype/shape against byte size, not JSON).
"""

import json
import os
import struct

import numpy as np
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(21)
HIDDEN, INTER = 64, 128


def two_of_four(rows, cols):
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    for r in range(rows):
        for g in range(0, cols, 4):
            drop = rng.choice(4, size=2, replace=False)
            w[r, g + drop] = 0.0
    return w


up = two_of_four(INTER, HIDDEN)  # [out, in]
down = two_of_four(HIDDEN, INTER)
planted = []
for r, g in [(3, 8), (17, 40), (60, 124)]:
    # A third kept weight in the group at columns g..g+3 of row r.
    zeros = [c for c in range(g, g + 4) if down[r, c] == 0.0]
    down[r, zeros[0]] = 0.5
    planted.append([r, g])
q = rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32)
q[rng.random(q.shape) < 0.5] = 0.0
o = rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32)
head = rng.standard_normal((32, HIDDEN)).astype(np.float32)
norm = np.ones(HIDDEN, dtype=np.float32)

tensors = {
    "model.layers.0.mlp.up_proj.weight": up,
    "model.layers.0.mlp.down_proj.weight": down,
    "model.layers.0.self_attn.q_proj.weight": q,
    "model.layers.0.self_attn.o_proj.weight": o,
    "lm_head.weight": head,
    "model.norm.weight": norm,
}


def to_bf16(a):
    bits = a.astype(np.float32).view(np.uint32)
    # Round to nearest even, as torch does.
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return rounded


save_file(tensors, os.path.join(HERE, "tiny.safetensors"), metadata={"format": "pt"})
def save_bf16(tensors, path):
    # safetensors.numpy has no bfloat16: write the raw uint16 bits with the real library and
    # relabel the dtype in its header (same bytes, same header length).
    save_file({k: to_bf16(v) for k, v in tensors.items()}, path)
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + n])
    for k, v in header.items():
        if k != "__metadata__":
            v["dtype"] = "BF16"
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (n - len(text)) if len(text) <= n else b""
    assert len(text) == n, "relabelled header must keep its length"
    with open(path, "wb") as f:
        f.write(data[:8] + text + data[8 + n :])


save_bf16(tensors, os.path.join(HERE, "tiny-bf16.safetensors"))


def to_i8(a):
    scale = np.abs(a).max() / 127.0 if np.abs(a).max() > 0 else 1.0
    return np.clip(np.round(a / scale), -127, 127).astype(np.int8)


save_file({k: to_i8(v) for k, v in tensors.items()}, os.path.join(HERE, "tiny-int8.safetensors"))

os.makedirs(os.path.join(HERE, "sharded"), exist_ok=True)
names = sorted(tensors)
shards = {"model-00001-of-00002.safetensors": names[:3], "model-00002-of-00002.safetensors": names[3:]}
weight_map = {}
for shard, keys in shards.items():
    save_file({k: tensors[k] for k in keys}, os.path.join(HERE, "sharded", shard))
    weight_map.update({k: shard for k in keys})
with open(os.path.join(HERE, "sharded", "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=2)

config = {
    "model_type": "llama",
    "num_hidden_layers": 1,
    "hidden_size": HIDDEN,
    "intermediate_size": INTER,
    "num_attention_heads": 4,
    "compression_config": {
        "sparsity_config": {
            "format": "sparse-24-bitmask",
            "sparsity_structure": "2:4",
            "targets": ["Linear"],
            "ignore": ["lm_head", "re:.*o_proj"],
        }
    },
}
with open(os.path.join(HERE, "config.json"), "w") as f:
    json.dump(config, f, indent=2)

with open(os.path.join(HERE, "expected.json"), "w") as f:
    json.dump(
        {
            "violations": {"model.layers.0.mlp.down_proj.weight": planted},
            "density": {k: float((v != 0).mean()) for k, v in tensors.items()},
        },
        f,
        indent=2,
        sort_keys=True,
    )

# Malformed files, each from the good f32 file.
bad = os.path.join(HERE, "bad")
os.makedirs(bad, exist_ok=True)
with open(os.path.join(HERE, "tiny.safetensors"), "rb") as f:
    good = f.read()
n = struct.unpack("<Q", good[:8])[0]
header = json.loads(good[8 : 8 + n])
body = good[8 + n :]


def write(name, blob):
    with open(os.path.join(bad, name), "wb") as f:
        f.write(blob)


def with_header(h):
    t = json.dumps(h).encode()
    return struct.pack("<Q", len(t)) + t


write("truncated.safetensors", good[: len(good) - 100])
write("short.safetensors", good[:5])
write("length-past-end.safetensors", struct.pack("<Q", len(good)) + good[8:])
write("huge-header.safetensors", struct.pack("<Q", 10 * 10**9) + good[8:])
write("not-json.safetensors", struct.pack("<Q", 12) + b"{not json!!}" + body)
h = json.loads(json.dumps(header))
first, second = sorted((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][0])[:2]
h[second]["data_offsets"] = [h[first]["data_offsets"][0], h[first]["data_offsets"][0] + (h[second]["data_offsets"][1] - h[second]["data_offsets"][0])]
write("overlap.safetensors", with_header(h) + body)
h = json.loads(json.dumps(header))
h["model.norm.weight"]["shape"] = [HIDDEN + 1]
write("shape-vs-bytes.safetensors", with_header(h) + body)
h = json.loads(json.dumps(header))
last = max((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][1])
s, e = h[last]["data_offsets"]
h[last]["data_offsets"] = [s + 10**6, e + 10**6]
write("out-of-range.safetensors", with_header(h) + body)
print("fixtures written; planted violations:", planted)

# The example pack's copy (scenarios/examples/checkpoint/): packs may only read inside
# their own directory tree.
example = os.path.join(HERE, "..", "..", "..", "scenarios", "examples", "checkpoint")
os.makedirs(example, exist_ok=True)
for name in ["tiny.safetensors", "config.json"]:
    with open(os.path.join(HERE, name), "rb") as src, open(os.path.join(example, name), "wb") as dst:
        dst.write(src.read())

# ---------------------------------------------------------------------------------------
# ONNX graphs (issue 21), written by the real `onnx` package:
#
#     /tmp/fx/bin/pip install onnx numpy
#
# tiny.onnx: x [tokens, 64] → LayerNormalization → MatMul (up, 2:4 along K) → Relu →
# Gemm (down, transB=1, 2:4 with one planted violation) → MatMul (proj, through a
# QuantizeLinear/DequantizeLinear pair) → Softmax → com.example.FancyNorm (unknown) → y.
# bad/: truncated, a cycle, an initializer whose dims disagree with its bytes, an input
# declared with the wrong width (the MatMul's K is 64, `xn` is declared 65 wide), weights in external data. (The 10^6-node claim is written
# by the Rust test itself: 2 MB of wire bytes are not worth committing.)
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

orng = np.random.default_rng(2104)


def two_of_four_o(rows, cols):
    w = orng.standard_normal((rows, cols)).astype(np.float32)
    for r in range(rows):
        for g in range(0, cols, 4):
            w[r, g + orng.choice(4, size=2, replace=False)] = 0.0
    return w


o_up = two_of_four_o(INTER, HIDDEN)  # [out, in]; MatMul stores B = [in, out]
o_down = two_of_four_o(HIDDEN, INTER)  # Gemm transB=1 stores [out, in]
zeros = [c for c in range(16, 20) if o_down[5, c] == 0.0]
o_down[5, zeros[0]] = 0.25  # planted: row 5, group at column 16 keeps 3
o_proj = two_of_four_o(HIDDEN, HIDDEN)


def graph(nodes, inits, declared=()):
    return helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["tokens", HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["tokens", HIDDEN])],
        initializer=inits,
        value_info=[helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in declared],
    )


def tiny_nodes():
    return [
        helper.make_node("LayerNormalization", ["x", "ln.gamma", "ln.beta"], ["xn"], name="ln", axis=-1),
        helper.make_node("MatMul", ["xn", "mlp.up.weight"], ["up"], name="up"),
        helper.make_node("Relu", ["up"], ["act"], name="act"),
        helper.make_node("Gemm", ["act", "mlp.down.weight"], ["down"], name="down", transB=1),
        helper.make_node("QuantizeLinear", ["proj.weight", "proj.scale", "proj.zero"], ["proj.q"], name="proj_q"),
        helper.make_node("DequantizeLinear", ["proj.q", "proj.scale", "proj.zero"], ["proj.dq"], name="proj_dq"),
        helper.make_node("MatMul", ["down", "proj.dq"], ["p"], name="proj"),
        helper.make_node("Softmax", ["p"], ["probs"], name="softmax", axis=-1),
        helper.make_node("FancyNorm", ["probs"], ["y"], name="fancy", domain="com.example"),
    ]


def tiny_inits():
    return [
        numpy_helper.from_array(np.ones(HIDDEN, np.float32), "ln.gamma"),
        numpy_helper.from_array(np.zeros(HIDDEN, np.float32), "ln.beta"),
        numpy_helper.from_array(np.ascontiguousarray(o_up.T), "mlp.up.weight"),
        numpy_helper.from_array(o_down, "mlp.down.weight"),
        numpy_helper.from_array(np.ascontiguousarray(o_proj.T), "proj.weight"),
        numpy_helper.from_array(np.array(0.05, np.float32), "proj.scale"),
        numpy_helper.from_array(np.array(0, np.int8), "proj.zero"),
    ]


def model_of(g):
    m = helper.make_model(
        g,
        producer_name="sparsegate make_fixtures.py",
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)],
    )
    m.ir_version = 8
    return m


tiny_onnx = model_of(graph(tiny_nodes(), tiny_inits()))
onnx.save_model(tiny_onnx, os.path.join(HERE, "tiny.onnx"))
with open(os.path.join(HERE, "tiny.onnx"), "rb") as f:
    good_onnx = f.read()
with open(os.path.join(bad, "truncated.onnx"), "wb") as f:
    f.write(good_onnx[: len(good_onnx) - 100])
cycle = tiny_nodes()
cycle[0] = helper.make_node("LayerNormalization", ["act", "ln.gamma", "ln.beta"], ["xn"], name="ln", axis=-1)
onnx.save_model(model_of(graph(cycle, tiny_inits())), os.path.join(bad, "cycle.onnx"))
lying = tiny_inits()
lying[3].dims[:] = [HIDDEN, INTER + 4]  # data still holds 64 × 128
onnx.save_model(model_of(graph(tiny_nodes(), lying)), os.path.join(bad, "shape-vs-bytes.onnx"))
onnx.save_model(model_of(graph(tiny_nodes(), tiny_inits(), declared=[("xn", ["tokens", HIDDEN + 1])])), os.path.join(bad, "declared-width.onnx"))
external = model_of(graph(tiny_nodes(), tiny_inits()))
onnx.save_model(external, os.path.join(bad, "external.onnx"), save_as_external_data=True, all_tensors_to_one_file=True, location="external.onnx.data", size_threshold=1024)
# The gate refuses the reference before it would read the data file: no need to commit it.
os.remove(os.path.join(bad, "external.onnx.data"))
print("onnx fixtures written; planted in mlp.down.weight: [5, 16]")

# Control flow: GEMMs inside an If's branches and a Loop's body are subgraphs (attributes of
# the If/Loop node), which the gate lists but does not run. The top-level MatMul `up` is a
# GEMM as in tiny.onnx; `branch` (If) holds a MatMul in then_branch (its weight a subgraph
# initializer) and a Gemm in else_branch (reading the outer initializer mlp.down.weight);
# `repeat` (Loop) holds a MatMul in its body.
then_g = helper.make_graph(
    [helper.make_node("MatMul", ["up", "then.weight"], ["then_out"], name="then_mm")],
    "then_branch",
    [],
    [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, ["tokens", HIDDEN])],
    initializer=[numpy_helper.from_array(np.ascontiguousarray(o_down.T), "then.weight")],
)
else_g = helper.make_graph(
    [helper.make_node("Gemm", ["up", "mlp.down.weight"], ["else_out"], name="else_gemm", transB=1)],
    "else_branch",
    [],
    [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, ["tokens", HIDDEN])],
)
body_g = helper.make_graph(
    [
        helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
        helper.make_node("MatMul", ["h_in", "proj.weight"], ["h_out"], name="body_mm"),
    ],
    "body",
    [
        helper.make_tensor_value_info("i", TensorProto.INT64, []),
        helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
        helper.make_tensor_value_info("h_in", TensorProto.FLOAT, ["tokens", HIDDEN]),
    ],
    [
        helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
        helper.make_tensor_value_info("h_out", TensorProto.FLOAT, ["tokens", HIDDEN]),
    ],
)
cf = helper.make_graph(
    [
        helper.make_node("LayerNormalization", ["x", "ln.gamma", "ln.beta"], ["xn"], name="ln", axis=-1),
        helper.make_node("MatMul", ["xn", "mlp.up.weight"], ["up"], name="up"),
        helper.make_node("If", ["use_then"], ["branched"], name="branch", then_branch=then_g, else_branch=else_g),
        helper.make_node("Loop", ["trips", "", "branched"], ["y"], name="repeat", body=body_g),
    ],
    "control_flow",
    [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["tokens", HIDDEN]),
        helper.make_tensor_value_info("use_then", TensorProto.BOOL, []),
        helper.make_tensor_value_info("trips", TensorProto.INT64, []),
    ],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["tokens", HIDDEN])],
    initializer=[t for t in tiny_inits() if t.name in ("ln.gamma", "ln.beta", "mlp.up.weight", "mlp.down.weight", "proj.weight")],
)
cf_model = model_of(cf)
onnx.checker.check_model(cf_model)
onnx.save_model(cf_model, os.path.join(HERE, "control-flow.onnx"))
print("control-flow fixture written: If `branch` (then_mm, else_gemm), Loop `repeat` (keep_going, body_mm)")
for name in ["tiny.onnx"]:
    with open(os.path.join(HERE, name), "rb") as src, open(os.path.join(example, name), "wb") as dst:
        dst.write(src.read())

# Quality on the artifact: a tiny classifier (16 → 32 → ReLU → 4) trained here with numpy on
# synthetic Gaussian classes, its first layer then pruned 2:4 by magnitude along in_features
# (no fine-tuning, so it loses a little accuracy). classifier.safetensors is what ships;
# classifier-dense.safetensors holds the same head before pruning (the reference);
# eval.safetensors is the held-out set (x float32 [n, 16], y uint8 [n]). The expected
# accuracies, quality_delta and Newcombe's paired 95% interval (method 10, the gate's) go into
# expected.json under "eval".
ev = np.random.default_rng(2121)
FEATURES, WIDTH, CLASSES = 16, 32, 4
means = ev.standard_normal((CLASSES, FEATURES)) * 0.9


def draw(n):
    y = ev.integers(0, CLASSES, size=n)
    x = means[y] + ev.standard_normal((n, FEATURES))
    return x.astype(np.float32), y.astype(np.uint8)


x_train, y_train = draw(2000)
x_eval, y_eval = draw(400)
w1 = (ev.standard_normal((WIDTH, FEATURES)) * np.sqrt(2.0 / FEATURES)).astype(np.float32)
b1 = np.zeros(WIDTH, dtype=np.float32)
w2 = (ev.standard_normal((CLASSES, WIDTH)) * np.sqrt(2.0 / WIDTH)).astype(np.float32)
b2 = np.zeros(CLASSES, dtype=np.float32)
onehot = np.eye(CLASSES, dtype=np.float32)[y_train]
for _ in range(300):  # full-batch gradient descent on the cross-entropy
    h = np.maximum(x_train @ w1.T + b1, 0.0)
    z = h @ w2.T + b2
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    dz = (p - onehot) / len(x_train)
    dw2, db2 = dz.T @ h, dz.sum(axis=0)
    dh = (dz @ w2) * (h > 0)
    dw1, db1 = dh.T @ x_train, dh.sum(axis=0)
    for param, grad in [(w1, dw1), (b1, db1), (w2, dw2), (b2, db2)]:
        param -= 0.5 * grad.astype(np.float32)

w1_pruned = w1.copy()
for r in range(WIDTH):
    for g in range(0, FEATURES, 4):
        drop = np.argsort(np.abs(w1_pruned[r, g : g + 4]), kind="stable")[:2]
        w1_pruned[r, g + drop] = 0.0


def predict(first):
    h = np.maximum(x_eval @ first.T + b1, np.float32(0.0))
    return np.argmax(h @ w2.T + b2, axis=1)


def wilson(k, n, z=1.959963984540054):
    p = k / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return center - half, center + half


right_c = predict(w1_pruned) == y_eval
right_r = predict(w1) == y_eval
a = int(np.sum(right_c & right_r))
b = int(np.sum(right_c & ~right_r))
c = int(np.sum(~right_c & right_r))
d = int(np.sum(~right_c & ~right_r))
n = a + b + c + d
p1, p2 = (a + b) / n, (a + c) / n
(l1, u1), (l2, u2) = wilson(a + b, n), wilson(a + c, n)
margins = (a + b) * (c + d) * (a + c) * (b + d)
phi = (a * d - b * c) / np.sqrt(margins) if margins > 0 else 0.0
delta = p1 - p2
lower = max((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0.0)
upper = max((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2, 0.0)
head = {"classifier.fc2.weight": w2, "classifier.fc2.bias": b2, "classifier.fc1.bias": b1}
save_file({**head, "classifier.fc1.weight": w1_pruned}, os.path.join(HERE, "classifier.safetensors"))
save_file({**head, "classifier.fc1.weight": w1}, os.path.join(HERE, "classifier-dense.safetensors"))
save_file({"x": x_eval, "y": y_eval}, os.path.join(HERE, "eval.safetensors"))
# Malformed datasets: no labels; a label outside the head's four classes.
save_file({"x": x_eval}, os.path.join(bad, "eval-no-labels.safetensors"))
y_bad = y_eval.copy()
y_bad[7] = 9
save_file({"x": x_eval, "y": y_bad}, os.path.join(bad, "eval-bad-label.safetensors"))
for name in ["classifier.safetensors", "classifier-dense.safetensors", "eval.safetensors"]:
    with open(os.path.join(HERE, name), "rb") as src, open(os.path.join(example, name), "wb") as dst:
        dst.write(src.read())
# The same shipped head in bf16 (what a pruned LLM checkpoint usually holds): the gate
# widens it exactly to f32 and evaluates it; its expected accuracy is numpy's on the widened
# bf16 values. And in int8 without scales, which the gate refuses to evaluate (the integer
# values are not the weights).
shipped = {**head, "classifier.fc1.weight": w1_pruned}


def widened(a):
    return (to_bf16(a).astype(np.uint32) << 16).view(np.float32)


save_bf16(shipped, os.path.join(HERE, "classifier-bf16.safetensors"))
bw1, bb1, bw2, bb2 = (widened(shipped[f"classifier.{m}"]) for m in ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"])
right_bf16 = np.argmax(np.maximum(x_eval @ bw1.T + bb1, np.float32(0.0)) @ bw2.T + bb2, axis=1) == y_eval
save_file({k: to_i8(v) if k.endswith(".weight") else v for k, v in shipped.items()}, os.path.join(HERE, "classifier-int8.safetensors"))
print(f"bf16 head accuracy {np.mean(right_bf16):.4f}; int8 head written")
with open(os.path.join(HERE, "expected.json")) as f:
    expected = json.load(f)
expected["eval"] = {
    "samples": n,
    "table": {"both": a, "only_candidate": b, "only_reference": c, "neither": d},
    "accuracy": p1,
    "reference_accuracy": p2,
    "quality_delta": delta,
    "quality_delta_ci": [max(delta - np.sqrt(lower), -1.0), min(delta + np.sqrt(upper), 1.0)],
}
expected["eval_bf16"] = {
    "accuracy": float(np.mean(right_bf16)),
    "quality_delta": float(np.mean(right_bf16)) - p2,
}
with open(os.path.join(HERE, "expected.json"), "w") as f:
    json.dump(expected, f, indent=2, sort_keys=True)
print(f"eval fixtures written: accuracy {p1:.4f} vs dense {p2:.4f}, quality_delta {delta:.4f}, table {a}/{b}/{c}/{d}")
