#!/usr/bin/env python3
"""Writes seed GGUF files for tests/model/gguf_fuzz.cc with the python `gguf` package
(gguf==0.19.0): a tiny llama (2 layers, hidden 32, 2 heads, 1 KV head, ffn 64, vocab 32) with
F32, F16, Q8_0, Q4_0 and Q4_1 tensors, a qwen2 variant with biases, and a metadata-only file.

Usage: python3 tests/model/gguf_make_fuzz_seeds.py OUT_DIR
"""
import os
import sys

import numpy as np
import gguf
from gguf.quants import quantize

HIDDEN, HEADS, KV_HEADS, FFN, VOCAB, LAYERS = 32, 2, 1, 64, 32, 2


def write(path, arch, qtype, bias):
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(path, arch)
    w.add_name("fuzz seed")
    w.add_block_count(LAYERS)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_token_list([f"t{i}" for i in range(VOCAB)])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def tensor(name, shape, kind):  # shape row-major (out, in), i.e. reversed ggml dims
        x = (rng.standard_normal(shape) * 0.1).astype(np.float32)
        if kind == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, x)
        elif kind == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, x.astype(np.float16))
        else:
            q = quantize(x, kind)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=kind)

    f32 = gguf.GGMLQuantizationType.F32
    tensor("token_embd.weight", (VOCAB, HIDDEN), gguf.GGMLQuantizationType.Q8_0)
    for i in range(LAYERS):
        p = f"blk.{i}."
        tensor(p + "attn_norm.weight", (HIDDEN,), f32)
        tensor(p + "attn_q.weight", (HIDDEN, HIDDEN), qtype)
        tensor(p + "attn_k.weight", (KV_HEADS * 16, HIDDEN), qtype)
        tensor(p + "attn_v.weight", (KV_HEADS * 16, HIDDEN), gguf.GGMLQuantizationType.F16)
        if bias:
            tensor(p + "attn_q.bias", (HIDDEN,), f32)
            tensor(p + "attn_k.bias", (KV_HEADS * 16,), f32)
            tensor(p + "attn_v.bias", (KV_HEADS * 16,), f32)
        tensor(p + "attn_output.weight", (HIDDEN, HIDDEN), qtype)
        tensor(p + "ffn_norm.weight", (HIDDEN,), f32)
        tensor(p + "ffn_gate.weight", (FFN, HIDDEN), qtype)
        tensor(p + "ffn_up.weight", (FFN, HIDDEN), qtype)
        tensor(p + "ffn_down.weight", (HIDDEN, FFN), qtype)
    tensor("output_norm.weight", (HIDDEN,), f32)
    if not bias:
        tensor("output.weight", (VOCAB, HIDDEN), f32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    write(os.path.join(out, "llama_q4_1.gguf"), "llama", gguf.GGMLQuantizationType.Q4_1, False)
    write(os.path.join(out, "llama_q4_0.gguf"), "llama", gguf.GGMLQuantizationType.Q4_0, False)
    write(os.path.join(out, "qwen2_q8_0.gguf"), "qwen2", gguf.GGMLQuantizationType.Q8_0, True)
    w = gguf.GGUFWriter(os.path.join(out, "metadata_only.gguf"), "llama")
    w.add_array("nested", [[1, 2], [3]])
    w.add_array("floats", [0.5, 1.5])
    w.add_bool("flag", True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    for name in sorted(os.listdir(out)):
        print(name, os.path.getsize(os.path.join(out, name)))


if __name__ == "__main__":
    main()
