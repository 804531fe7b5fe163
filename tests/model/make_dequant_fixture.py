#!/usr/bin/env python3
"""Writes tests/model/fixtures/dequant_smollm2.json: reference fp32 values of a few tensors of
the default model, dequantized by the `gguf` package (gguf.quants.dequantize, gguf==0.19.0).

For each tensor: its type and ggml dims, the first 64 values, 64 values spread over the whole
tensor (index i * stride), and float64 sum / sum of |x| / sum of x^2 over all values, which
dequantize_test.cc compares against kvserve's Dequantize.

Also "blocks": for Q4_0, Q4_1, Q8_0, Q4_K, Q6_K and Q5_K (types the default model lacks or has only
some of), random blocks (fixed numpy seed, fp16 scales set to finite values) as hex bytes with
every value the package decodes them to.

Usage: python3 tests/model/make_dequant_fixture.py [model.gguf]
(default: $KVSERVE_MODEL or ~/.cache/kvserve/models/SmolLM2-135M-Instruct.Q4_1.gguf)
"""
import json
import os
import sys

import gguf
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

TENSORS = [
    "token_embd.weight",  # Q8_0
    "blk.0.attn_q.weight",  # Q4_1
    "blk.29.ffn_down.weight",  # Q4_1
    "blk.0.attn_norm.weight",  # F32
    "output_norm.weight",  # F32
]


# (type, bytes per block, byte offsets of fp16 scale fields)
BLOCK_TYPES = [
    ("Q4_0", 18, [0]),
    ("Q4_1", 20, [0, 2]),
    ("Q8_0", 34, [0]),
    ("Q4_K", 144, [0, 2]),
    ("Q6_K", 210, [208]),
    ("Q5_K", 176, [0, 2]),  # last, so the blocks drawn before it stay the same
]


def random_blocks():
    rng = np.random.default_rng(20261129)
    result = []
    for name, size, half_offsets in BLOCK_TYPES:
        qtype = gguf.GGMLQuantizationType[name]
        n_blocks = 4
        raw = rng.integers(0, 256, size=n_blocks * size, dtype=np.uint8)
        for b in range(n_blocks):
            for off in half_offsets:
                h = np.array([rng.uniform(-0.05, 0.05)], dtype=np.float16).view(np.uint8)
                raw[b * size + off: b * size + off + 2] = h
        values = dequantize(raw.reshape(1, -1), qtype).astype(np.float32).reshape(-1)
        result.append({"type": name, "hex": raw.tobytes().hex(),
                       "values": [float(x) for x in values]})
    return result


def main():
    default = os.path.expanduser("~/.cache/kvserve/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("KVSERVE_MODEL", default)
    reader = GGUFReader(path)
    by_name = {t.name: t for t in reader.tensors}
    out = {"model": os.path.basename(path), "tensors": []}
    for name in TENSORS:
        t = by_name[name]
        values = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        stride = max(1, values.size // 64)
        v64 = values.astype(np.float64)
        out["tensors"].append({
            "name": name,
            "type": t.tensor_type.name,
            "dims": [int(d) for d in t.shape],
            "first": [float(x) for x in values[:64]],
            "stride": stride,
            "strided": [float(values[i * stride]) for i in range(64)],
            "sum": float(v64.sum()),
            "sum_abs": float(np.abs(v64).sum()),
            "sum_sq": float((v64 * v64).sum()),
        })
    out["blocks"] = random_blocks()
    target = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures",
                          "dequant_smollm2.json")
    with open(target, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", target)


if __name__ == "__main__":
    main()
