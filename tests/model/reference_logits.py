#!/usr/bin/env python3
"""Independent float64 reference of the Llama forward pass, and the fixtures it writes.

This is the yardstick for kvserve's C++ forward (tests/model/reference_test.cc). It shares no
code with it: it reads the GGUF with the `gguf` Python package, dequantizes every tensor with
gguf.quants.dequantize, and runs the whole decoder in float64 numpy with NO KV cache: every
forward recomputes the full prefix, so nothing here can hide a cache bug.

Model facts it relies on (checked at load time where possible):
  * llama architecture: RMSNorm -> attention (GQA) -> residual, RMSNorm -> SwiGLU MLP -> residual.
  * GGUF "llama" files store Q and K rows permuted so that RoPE rotates the INTERLEAVED pairs
    (x[2i], x[2i+1]) of each head, with frequency theta^(-2i/head_dim). (Using the half-split
    pairing on these weights gives gibberish continuations: try --rope-style half.)
  * Tied embeddings when the file has no output.weight: the logits are h @ token_embd^T.

Prompts are written as text and tokenized HERE with a small byte-level BPE over the GGUF
vocabulary and merges (ASCII prompts only), so the fixture stores token ids and does not depend
on kvserve's tokenizer.

Fixture format (tests/model/fixtures/reference_<name>.json), all logits float64 from this script:
  prompt_text, prompt_ids            the prompt
  sampled_ids                        a fixed set of vocabulary ids (same for every position)
  positions: [{position, top_ids, top_logits, sampled_logits}]
                                     logits of the prompt prefix ending at `position`
                                     (top-20 ids by logit, their logits, the logits of sampled_ids)
  greedy_ids                         32 greedy tokens after the prompt (full recompute each step)
  greedy_margins                     top-1 minus top-2 logit at each greedy step
  greedy_text                        the decoded continuation (for humans)

Regenerate (about a minute per prompt on two cores):
  python3 tests/model/reference_logits.py                       # default model, writes fixtures
  python3 tests/model/reference_logits.py --model X.gguf --out DIR --greedy 32
"""

import argparse
import importlib.metadata
import json
import os
import re
import sys
import time

import numpy as np
import gguf
from gguf.quants import dequantize

DEFAULT_MODEL = os.path.join(
    os.environ.get("KVSERVE_CACHE_DIR", os.path.expanduser("~/.cache/kvserve")),
    "models", "SmolLM2-135M-Instruct.Q4_1.gguf")

CHATML_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

# name -> prompt text. The chat prompt is ChatML rendered by hand (special tokens are matched
# literally by the tokenizer below). The story prompt is long enough (> 64 tokens) to cross
# several KV blocks of every supported block size.
PROMPTS = {
    "capital": "The capital of France is",
    "chat": ("<|im_start|>system\n" + CHATML_SYSTEM + "<|im_end|>\n"
             "<|im_start|>user\nWhat is the tallest mountain in the world?<|im_end|>\n"
             "<|im_start|>assistant\n"),
    "story": ("Once upon a time, in a small village nestled between rolling green hills, there "
              "lived a young girl named Lily. Every morning she walked to the river with her "
              "grandmother to collect water, and every evening she listened to the old stories "
              "about the mountains. One day, while she was"),
    "code": "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
}


# ---------------------------------------------------------------------------------------------
# GGUF reading
# ---------------------------------------------------------------------------------------------

def field_value(reader, key):
    field = reader.fields[key]
    if len(field.data) == 1 and field.types and field.types[0] != gguf.GGUFValueType.ARRAY:
        part = field.parts[field.data[0]]
        if field.types[0] == gguf.GGUFValueType.STRING:
            return bytes(part).decode("utf-8")
        return part.tolist()[0]
    if field.types[-1] == gguf.GGUFValueType.STRING:
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]
    return [field.parts[i].tolist()[0] for i in field.data]


class Model:
    """Config + float64 weights, matrices row-major [out, in] like the C++ ModelWeights."""

    def __init__(self, path):
        reader = gguf.GGUFReader(path)
        arch = field_value(reader, "general.architecture")
        if arch != "llama":
            raise SystemExit(f"reference_logits: only llama GGUFs are supported, got {arch}")
        self.num_layers = field_value(reader, "llama.block_count")
        self.hidden = field_value(reader, "llama.embedding_length")
        self.num_heads = field_value(reader, "llama.attention.head_count")
        self.num_kv_heads = field_value(reader, "llama.attention.head_count_kv")
        self.head_dim = self.hidden // self.num_heads
        self.theta = float(field_value(reader, "llama.rope.freq_base"))
        self.eps = float(field_value(reader, "llama.attention.layer_norm_rms_epsilon"))
        self.tokens = field_value(reader, "tokenizer.ggml.tokens")
        self.merges = field_value(reader, "tokenizer.ggml.merges")
        tensors = {}
        for t in reader.tensors:
            w = dequantize(t.data, t.tensor_type).astype(np.float64)
            # gguf lists dims innermost first; dequantize already returns [out, in].
            tensors[t.name] = w.reshape([int(d) for d in reversed(t.shape)])
        self.embedding = tensors["token_embd.weight"]                  # [vocab, hidden]
        self.output = tensors.get("output.weight", self.embedding)   # [vocab, hidden]
        self.final_norm = tensors["output_norm.weight"]               # [hidden]
        self.layers = []
        for i in range(self.num_layers):
            p = f"blk.{i}."
            self.layers.append({k: tensors[p + k + ".weight"] for k in (
                "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")})
        self.vocab = self.embedding.shape[0]
        assert self.layers[0]["attn_k"].shape == (self.num_kv_heads * self.head_dim, self.hidden)


# ---------------------------------------------------------------------------------------------
# Byte-level BPE (GPT-2 style) over the GGUF vocabulary, for ASCII prompts
# ---------------------------------------------------------------------------------------------

def byte_to_unicode():
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


PRETOKEN = re.compile(
    r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


class Bpe:
    def __init__(self, tokens, merges):
        self.ids = {t: i for i, t in enumerate(tokens)}
        self.rank = {tuple(m.split(" ")): r for r, m in enumerate(merges)}
        self.specials = [t for t in tokens[:17] if t.startswith("<")]
        self.bytes = byte_to_unicode()
        self.unbytes = {v: k for k, v in self.bytes.items()}

    def _word(self, word):
        parts = [self.bytes[b] for b in word.encode("utf-8")]
        while len(parts) > 1:
            best = min(range(len(parts) - 1),
                       key=lambda i: self.rank.get((parts[i], parts[i + 1]), 1 << 30))
            if (parts[best], parts[best + 1]) not in self.rank:
                break
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        return [self.ids[p] for p in parts]

    def encode(self, text):
        assert text.isascii(), "reference tokenizer handles ASCII prompts only"
        pattern = "(" + "|".join(re.escape(s) for s in self.specials) + ")"
        out = []
        for chunk in re.split(pattern, text):
            if chunk in self.specials:
                out.append(self.ids[chunk])
            elif chunk:
                for word in PRETOKEN.findall(chunk):
                    out.extend(self._word(word))
        return out

    def decode(self, ids, tokens):
        text = "".join(tokens[i] for i in ids)
        return bytes(self.unbytes.get(c, ord("?")) for c in text).decode("utf-8", "replace")


# ---------------------------------------------------------------------------------------------
# The forward pass: float64, full recompute, no cache
# ---------------------------------------------------------------------------------------------

def rms_norm(x, weight, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rope(x, positions, theta, style):
    """x: [T, heads, head_dim], rotated in place of a copy."""
    head_dim = x.shape[-1]
    half = head_dim // 2
    freqs = theta ** (-np.arange(half, dtype=np.float64) * 2.0 / head_dim)   # [half]
    angles = positions[:, None].astype(np.float64) * freqs[None, :]          # [T, half]
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    out = x.copy()
    if style == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
    else:
        a, b = x[..., :half], x[..., half:]
        out[..., :half] = a * cos - b * sin
        out[..., half:] = a * sin + b * cos
    return out


def forward(model, ids, rope_style="interleaved"):
    """Logits [T, vocab] of every position of `ids` (causal), float64."""
    T = len(ids)
    positions = np.arange(T)
    nh, nkv, hd = model.num_heads, model.num_kv_heads, model.head_dim
    group = nh // nkv
    mask = np.triu(np.full((T, T), -np.inf), k=1)                             # [T, T]
    x = model.embedding[np.asarray(ids)]                                      # [T, hidden]
    for layer in model.layers:
        h = rms_norm(x, layer["attn_norm"], model.eps)
        q = (h @ layer["attn_q"].T).reshape(T, nh, hd)
        k = (h @ layer["attn_k"].T).reshape(T, nkv, hd)
        v = (h @ layer["attn_v"].T).reshape(T, nkv, hd)
        q = rope(q, positions, model.theta, rope_style)
        k = rope(k, positions, model.theta, rope_style)
        attn = np.empty((T, nh, hd))
        for head in range(nh):
            kv = head // group
            scores = q[:, head, :] @ k[:, kv, :].T / np.sqrt(hd) + mask       # [T, T]
            scores -= scores.max(axis=-1, keepdims=True)
            p = np.exp(scores)
            p /= p.sum(axis=-1, keepdims=True)
            attn[:, head, :] = p @ v[:, kv, :]
        x = x + attn.reshape(T, nh * hd) @ layer["attn_output"].T
        h = rms_norm(x, layer["ffn_norm"], model.eps)
        gate = h @ layer["ffn_gate"].T
        up = h @ layer["ffn_up"].T
        x = x + (gate / (1.0 + np.exp(-gate)) * up) @ layer["ffn_down"].T
    return rms_norm(x, model.final_norm, model.eps) @ model.output.T


def fixture_for(model, bpe, name, text, num_greedy, rope_style, sampled_ids):
    ids = bpe.encode(text)
    start = time.time()
    logits = forward(model, ids, rope_style)                                  # [T, vocab]
    T = len(ids)
    # Every 4th position, plus the last: covers early positions, block edges of size 8/16/32
    # (7, 15, 31, ...) are not special here, the C++ test feeds the same prefix in any case.
    chosen = sorted(set(list(range(0, T, 4)) + [T - 1]))
    positions = []
    for pos in chosen:
        row = logits[pos]
        top = np.argsort(-row, kind="stable")[:20]
        positions.append({"position": pos,
                          "top_ids": [int(i) for i in top],
                          "top_logits": [float(row[i]) for i in top],
                          "sampled_logits": [float(row[i]) for i in sampled_ids]})
    greedy, margins = [], []
    seq = list(ids)
    row = logits[-1]
    for step in range(num_greedy):
        if step > 0:
            row = forward(model, seq, rope_style)[-1]
        order = np.argsort(-row, kind="stable")[:2]
        greedy.append(int(order[0]))
        margins.append(float(row[order[0]] - row[order[1]]))
        seq.append(int(order[0]))
    text_out = bpe.decode(greedy, model.tokens)
    print(f"[{name}] {T} prompt tokens, {time.time() - start:.1f}s, min greedy margin "
          f"{min(margins) if margins else float('nan'):.4f}\n  prompt: {text!r}\n"
          f"  greedy: {text_out!r}", file=sys.stderr)
    return {"name": name, "prompt_text": text, "prompt_ids": ids,
            "sampled_ids": [int(i) for i in sampled_ids], "positions": positions,
            "greedy_ids": greedy, "greedy_margins": margins, "greedy_text": text_out}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=os.environ.get("KVSERVE_MODEL", DEFAULT_MODEL))
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "fixtures"))
    parser.add_argument("--greedy", type=int, default=32)
    parser.add_argument("--prompts", default=",".join(PROMPTS), help="comma-separated names")
    parser.add_argument("--rope-style", choices=["interleaved", "half"], default="interleaved")
    parser.add_argument("--dry-run", action="store_true", help="print, write nothing")
    args = parser.parse_args()

    model = Model(args.model)
    bpe = Bpe(model.tokens, model.merges)
    sampled_ids = np.sort(np.random.default_rng(20261129).choice(model.vocab, 256, replace=False))
    os.makedirs(args.out, exist_ok=True)
    for name in args.prompts.split(","):
        fixture = fixture_for(model, bpe, name, PROMPTS[name], args.greedy, args.rope_style,
                              sampled_ids)
        fixture["model_file"] = os.path.basename(args.model)
        fixture["generated_by"] = ("python3 tests/model/reference_logits.py (float64 numpy "
                                   f"{np.__version__}, gguf {importlib.metadata.version('gguf')})")
        if not args.dry_run:
            with open(os.path.join(args.out, f"reference_{name}.json"), "w") as f:
                json.dump(fixture, f, separators=(",", ":"))
                f.write("\n")


if __name__ == "__main__":
    main()
