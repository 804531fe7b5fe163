#!/usr/bin/env python3
"""The figures of docs/kv-cache.md, from kvserve's own binaries.

  python3 bench/kv_cache_figures.py BUILD_DIR [--parts a,b,c] [--plot-only]

Parts (each writes its numbers into bench/kv_cache_figures.json and its PNG into docs/img/):
  a  time per generated token vs context length, with the KV cache (one decode step at context
     ~C) and without it (the whole C+1 prefix computed as one prefill), from kvserve-generate
     (the serving engine, EngineCore) with a random C+1-token prompt: its prompt time and its
     decode time per token. (bench/model_bench's BM_NextToken_* measure the same pair at one
     context.)
  b  bytes read per decoded token as the context grows: the weights (as stored, and in fp32) vs
     the KV cache, 2 (K and V) x layers x kv_heads x head_dim x bytes per element x context.
     Computed from the model's shape, not measured; the weight bytes as stored are the ones
     kvserve-worker prints at start-up (read from the worker's log in part c when it ran).
  c  peak KV blocks in use vs concurrent requests, with and without a shared prompt prefix:
     a fresh kvserve-worker per point, driven by bench/kvserve-loadgen (peak from
     Worker.StreamStatus). With sharing, one request first puts the prefix in the cache (a
     system prompt that is already warm), then N requests run at once.

--plot-only redraws the PNGs from the JSON without running anything. matplotlib comes from
PyPI: python3 -m pip install matplotlib.
"""

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# SmolLM2-135M (the default model), from its GGUF header; model/ reads the same values.
SHAPE = {"layers": 30, "kv_heads": 3, "head_dim": 64, "hidden": 576, "heads": 9}
# Weight bytes as fp32 (134.5 M parameters x 4), bench/RESULTS.md "Model forward pass".
WEIGHT_BYTES_F32 = 538_000_000
BLOCK_SIZE = 16


def need_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        sys.exit("kv_cache_figures.py: matplotlib is not installed; "
                 "install it with: python3 -m pip install matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def machine():
    model = ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "loadavg": list(os.getloadavg())}


# ---- part a ---------------------------------------------------------------------------------

def run_part_a(build, contexts, decode_tokens, repeats):
    # kvserve-generate (the serving engine, EngineCore, without gRPC) with a random prompt of
    # C + 1 tokens: its prompt time is the next token without a cache (the whole C + 1 prefix
    # as one prefill), its decode time per token is the next token with the cache (one decode
    # step at context C + 1 .. C + decode_tokens). Median of `repeats` runs
    # (the fastest one kept too: the machine is shared).
    binary = os.path.join(build, "tools", "kvserve-generate")
    start = machine()
    points = []
    for c in contexts:
        cmd = [binary, "--prompt_tokens", str(c + 1), "--max_tokens", str(decode_tokens + 1),
               "--ignore_eos", "--num_threads", "0"]
        prefill, decode = [], []
        for _ in range(repeats):
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            p = re.search(r"prompt: (\d+) tokens in ([\d.]+) s", out)
            d = re.search(r"decode: (\d+) tokens in ([\d.]+) s", out)
            prefill.append(float(p.group(2)) * 1e3)
            decode.append(float(d.group(2)) * 1e3 / int(d.group(1)))
        point = {"context": c, "cached_ms": statistics.median(decode), "cached_ms_min": min(decode),
                 "recompute_ms": statistics.median(prefill), "cached_ms_runs": decode,
                 "recompute_ms_runs": prefill}
        point["ratio"] = point["recompute_ms"] / point["cached_ms"]
        print("part a: context %d: cached %.1f ms, recompute %.1f ms (%.0fx)" % (
            c, point["cached_ms"], point["recompute_ms"], point["ratio"]), flush=True)
        points.append(point)
    return {"command": " ".join(cmd).replace(str(contexts[-1] + 1), "C+1"),
            "decode_tokens": decode_tokens, "repeats": repeats,
            "machine_before": start, "machine_after": machine(), "points": points}


def plot_a(plt, data, path):
    pts = data["points"]
    ctx = [p["context"] for p in pts]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=90)
    ax.plot(ctx, [p["recompute_ms"] for p in pts], "o-", color="tab:red",
            label="no cache: recompute the C+1 prefix")
    ax.plot(ctx, [p["cached_ms"] for p in pts], "o-", color="tab:blue",
            label="KV cache: one decode step at context C")
    for p in pts:
        ax.annotate("%.0fx" % p["ratio"], (p["context"], p["recompute_ms"]),
                    textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ctx)
    ax.set_xticklabels([str(c) for c in ctx])
    ax.set_xlabel("context length C (tokens)")
    ax.set_ylabel("time for the next token (ms, wall)")
    ax.set_title("Next token with and without the KV cache (SmolLM2-135M, CPU)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ---- part b ---------------------------------------------------------------------------------

def kv_bytes_per_token(bytes_per_element):
    return 2 * SHAPE["layers"] * SHAPE["kv_heads"] * SHAPE["head_dim"] * bytes_per_element


def compute_part_b(weight_bytes_stored, weight_types):
    contexts = [2 ** k for k in range(6, 16)]
    rows = []
    for c in contexts:
        rows.append({"context": c, "kv_f32": kv_bytes_per_token(4) * c,
                     "kv_bf16": kv_bytes_per_token(2) * c})
    crossover = {}
    for name, weights in (("stored", weight_bytes_stored), ("f32", WEIGHT_BYTES_F32)):
        for kv, elt in (("kv_f32", 4), ("kv_bf16", 2)):
            crossover["%s_weights_vs_%s" % (name, kv)] = weights / kv_bytes_per_token(elt)
    return {"shape": SHAPE, "kv_bytes_per_token_f32": kv_bytes_per_token(4),
            "kv_bytes_per_token_bf16": kv_bytes_per_token(2),
            "weight_bytes_stored": weight_bytes_stored, "weight_types_stored": weight_types,
            "weight_bytes_f32": WEIGHT_BYTES_F32,
            "crossover_context_tokens": crossover, "points": rows,
            "note": "computed from the model shape; the model's own limit is 8192 tokens"}


def plot_b(plt, data, path):
    pts = data["points"]
    ctx = [p["context"] for p in pts]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=90)
    ax.plot(ctx, [p["kv_f32"] / 1e6 for p in pts], "o-", color="tab:blue", label="KV, f32")
    ax.plot(ctx, [p["kv_bf16"] / 1e6 for p in pts], "s-", color="tab:cyan", label="KV, bf16")
    ax.axhline(data["weight_bytes_f32"] / 1e6, color="tab:red", ls="--",
               label="weights, fp32 (%.0f MB)" % (data["weight_bytes_f32"] / 1e6))
    ax.axhline(data["weight_bytes_stored"] / 1e6, color="tab:orange", ls="--",
               label="weights as stored, %s (%.0f MB)" % (
                   data["weight_types_stored"], data["weight_bytes_stored"] / 1e6))
    ax.axvline(8192, color="gray", ls=":", lw=1)
    ax.text(8192, 1.2, " model limit 8192", fontsize=7, color="gray")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("MB read per decoded token (one sequence)")
    ax.set_title("Bytes read per decode step: weights vs KV (computed, SmolLM2-135M)",
                 fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ---- part c ---------------------------------------------------------------------------------

def start_worker(build, model, log_path):
    cmd = [os.path.join(build, "worker", "kvserve-worker"), "--listen=127.0.0.1:0",
           "--metrics_listen=127.0.0.1:0", "--max_num_seqs=64", "--max_num_batched_tokens=512"]
    if model:
        cmd.append("--model=" + model)
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        time.sleep(0.2)
        text = open(log_path).read()
        if "kvserve-worker ready" in text:
            info = dict(re.findall(r"kvserve-worker (\w+)=(\S+)", text))
            m = re.search(r"weights=(\S+) \((\d+) bytes\)", text)
            if m:
                info["weight_types"], info["weight_bytes"] = m.group(1), int(m.group(2))
            return proc, info, cmd
        if proc.poll() is not None:
            sys.exit("kvserve-worker exited:\n" + text)
    proc.kill()
    sys.exit("kvserve-worker not ready after 120 s:\n" + open(log_path).read())


def stop_worker(proc):
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def loadgen(build, port, concurrency, num_requests, prompt_len, output_len, shared, seed):
    cmd = [os.path.join(build, "bench", "kvserve-loadgen"), "--target=127.0.0.1:%s" % port,
           "--concurrency=%d" % concurrency, "--num_requests=%d" % num_requests,
           "--prompt_len=%d:%d" % (prompt_len, prompt_len),
           "--output_len=%d:%d" % (output_len, output_len),
           "--shared_prefix_len=%d" % shared, "--seed=%d" % seed]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    m = re.search(r"peak KV usage\s+\S+\s+\((\d+) of (\d+) blocks\)", out)
    summary = json.loads(out.strip().splitlines()[-1])
    if summary["failed"]:
        sys.exit("loadgen: %d requests failed:\n%s" % (summary["failed"], out))
    return int(m.group(1)), int(m.group(2)), cmd


def run_part_c(build, model, concurrencies, prompt_len, output_len, shared, log_dir):
    points = []
    commands = {}
    worker_info = {}
    start = machine()
    for n in concurrencies:
        point = {"concurrency": n}
        for mode in ("independent", "shared"):
            log_path = os.path.join(log_dir, "kv_cache_figures_worker.log")
            proc, info, wcmd = start_worker(build, model, log_path)
            worker_info = info
            try:
                seed = 1000 + n
                if mode == "shared":
                    # Warm the prefix: one request with the same seed (the same prefix).
                    loadgen(build, info["grpc_port"], 1, 1, prompt_len, output_len, shared, seed)
                used, total, cmd = loadgen(build, info["grpc_port"], n, n, prompt_len,
                                           output_len, shared if mode == "shared" else 0, seed)
            finally:
                stop_worker(proc)
            point[mode + "_blocks"] = used
            point["total_blocks"] = total
            commands[mode] = " ".join(cmd)
            print("part c: %d requests, %s: peak %d of %d blocks" % (n, mode, used, total),
                  flush=True)
        per_request = -(-(prompt_len + output_len) // BLOCK_SIZE)
        shared_full = shared // BLOCK_SIZE
        point["expected_independent"] = n * per_request
        point["expected_shared"] = shared_full + n * (per_request - shared_full)
        points.append(point)
    return {"worker_command": " ".join(wcmd), "loadgen_commands": commands,
            "prompt_len": prompt_len, "output_len": output_len, "shared_prefix_len": shared,
            "block_size": BLOCK_SIZE, "worker": worker_info, "machine_before": start,
            "machine_after": machine(), "points": points}


def plot_c(plt, data, path):
    pts = data["points"]
    n = [p["concurrency"] for p in pts]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=90)
    ax.plot(n, [p["independent_blocks"] for p in pts], "o-", color="tab:red",
            label="independent prompts (measured)")
    ax.plot(n, [p["shared_blocks"] for p in pts], "o-", color="tab:green",
            label="%d-token shared prefix (measured)" % data["shared_prefix_len"])
    ax.plot(n, [p["expected_independent"] for p in pts], ":", color="tab:red", lw=1,
            label="N x blocks per request")
    ax.plot(n, [p["expected_shared"] for p in pts], ":", color="tab:green", lw=1,
            label="shared blocks once + N x private")
    ax.axhline(pts[0]["total_blocks"], color="gray", ls="--", lw=1,
               label="pool capacity (%d blocks)" % pts[0]["total_blocks"])
    ax.set_xlabel("concurrent requests N")
    ax.set_ylabel("peak KV blocks in use (block = 16 tokens)")
    ax.set_title("KV blocks held vs concurrent requests (kvserve-worker, %d+%d tokens each)"
                 % (data["prompt_len"], data["output_len"]), fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ---- main -----------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build", nargs="?", default="build", help="kvserve build directory")
    ap.add_argument("--parts", default="a,b,c")
    ap.add_argument("--plot-only", action="store_true")
    ap.add_argument("--json", default=os.path.join(ROOT, "bench", "kv_cache_figures.json"))
    ap.add_argument("--img", default=os.path.join(ROOT, "docs", "img"))
    ap.add_argument("--contexts", default="64,128,256,512,1024")
    ap.add_argument("--decode_tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--model", default="", help="worker --model (default: the default model)")
    ap.add_argument("--concurrency", default="1,2,4,8,16")
    ap.add_argument("--prompt_len", type=int, default=128)
    ap.add_argument("--output_len", type=int, default=16)
    ap.add_argument("--shared_prefix_len", type=int, default=96)
    args = ap.parse_args()
    plt = need_matplotlib()
    parts = set(args.parts.split(","))
    data = {}
    if os.path.exists(args.json):
        data = json.load(open(args.json))
    if not args.plot_only:
        if "a" in parts:
            data["a_time_per_token"] = run_part_a(
                args.build, [int(c) for c in args.contexts.split(",")], args.decode_tokens,
                args.repeats)
        if "c" in parts:
            data["c_blocks_vs_requests"] = run_part_c(
                args.build, args.model, [int(n) for n in args.concurrency.split(",")],
                args.prompt_len, args.output_len, args.shared_prefix_len, "/tmp")
        if "b" in parts:
            worker = data.get("c_blocks_vs_requests", {}).get("worker", {})
            stored = worker.get("weight_bytes")
            source = "kvserve-worker start-up line"
            if not stored:  # no worker ran: the GGUF file's size (weights + a small header)
                stored = os.path.getsize(os.path.expanduser(
                    "~/.cache/kvserve/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
                source = "size of the GGUF file (weights + tokenizer header)"
            data["b_bytes_per_token"] = compute_part_b(stored, worker.get("weight_types", "Q4_1"))
            data["b_bytes_per_token"]["weight_bytes_stored_source"] = source
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
    os.makedirs(args.img, exist_ok=True)
    for key, fn, name in (("a_time_per_token", plot_a, "kv_time_per_token.png"),
                          ("b_bytes_per_token", plot_b, "kv_bytes_per_token.png"),
                          ("c_blocks_vs_requests", plot_c, "kv_blocks_vs_requests.png")):
        if key in data:
            fn(plt, data[key], os.path.join(args.img, name))
            print("wrote", os.path.join(args.img, name))


if __name__ == "__main__":
    main()
