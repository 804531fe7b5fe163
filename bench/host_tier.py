#!/usr/bin/env python3
"""The host KV tier (kvserve-worker --host_kv_bytes) against none, on a multi-turn workload whose
working set is several times the worker's device KV pool.

One real worker (behind a router, as clients reach it) serves routing_ab.py's multi_turn
workload: --users users in --groups groups sharing --system_words-word system prompts, each
holding a real conversation (every turn resends the whole history), Poisson arrivals at --rate.
The device pool (--kv_memory_bytes) holds about a quarter of the working set, so without a tier
most prefixes are evicted before their next turn and recomputed; with one they are copied back
from host memory. For every repeat, every --host_mib size runs on a fresh worker (cold caches)
in turn, so drift on a noisy machine hits all sizes alike; the same seeded schedule is replayed
each time.

Outputs, per host-tier size (medians over repeats): cache hit rate (cached / prompt tokens, from
each request's Usage), TTFT p50/p90/p99, output tokens/s, and each size's p90 TTFT as a ratio of
no tier's; --out writes JSON (every request), --plot a PNG of hit rate and TTFT against size.

  python3 bench/host_tier.py --host_mib=0,64,128,256 --repeats=2 \\
      --out=/tmp/host_tier.json --plot=docs/img/host_tier.png
"""

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import routing_ab as ab  # noqa: E402


def parse_args():
    build = os.path.join(ab.REPO, "build")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add = parser.add_argument
    add("--worker", default=os.path.join(build, "worker", "kvserve-worker"))
    add("--router", default=os.path.join(build, "router", "kvserve-router"))
    add("--proto-root", dest="proto_root", default=os.path.join(ab.REPO, "proto"))
    add("--model", default="", help="GGUF file (default: the binaries' default model)")
    add("--worker_threads", type=int, default=2, help="--num_threads of the worker")
    add("--kv_memory_bytes", type=int, default=48 << 20, help="the worker's device KV pool")
    add("--kv_bytes_per_token", type=int, default=23040,
        help="KV bytes per token of the model (SmolLM2-135M, float16 KV: 30 x 2 x 3 x 64 x 2)")
    add("--host_mib", default="0,256", help="host-tier sizes to compare, MiB (0: no tier)")
    add("--repeats", type=int, default=2, help="rounds over the sizes")
    add("--worker_flags", default="", help="more kvserve-worker flags")
    add("--router_flags", default="", help="more kvserve-router flags")
    add("--rate", type=float, default=0.5, help="arrivals per second")
    add("--requests", type=int, default=80)
    add("--seed", type=int, default=1)
    add("--max_tokens", type=int, default=32)
    add("--request_timeout_s", type=float, default=600.0)
    add("--users", type=int, default=8)
    add("--groups", type=int, default=4)
    add("--system_words", type=int, default=400)
    add("--user_words", type=int, default=40)
    add("--max_turns", type=int, default=10)
    add("--think_s", type=float, default=2.0)
    add("--out", help="JSON results file")
    add("--plot", help="PNG file")
    add("--replot", help="a --out JSON file: only draw its --plot, run nothing")
    args = parser.parse_args()
    args.sizes = [int(x) for x in args.host_mib.split(",")]
    # What routing_ab's Cluster and workload builder read.
    args.cluster, args.workers, args.step_time_model = "real", 1, ""
    return args


def run(args):
    pb = ab.lib.setup({"proto-root": args.proto_root})
    chains = ab.build_workload(args, "multi_turn", args.rate)
    base_flags = args.worker_flags
    runs = []
    for repeat in range(args.repeats):
        for mib in args.sizes:
            args.worker_flags = f"{base_flags} --host_kv_bytes={mib << 20}"
            with ab.Cluster(args, "kv_aware") as running:
                results = asyncio.run(ab.run_load(running.address, pb, args, chains))
            summary = ab.summarize(results)
            runs.append({"host_mib": mib, "repeat": repeat, "summary": summary,
                         "requests": results})
            print(f"repeat {repeat} host {mib} MiB: p90 TTFT {ab.fmt(summary['ttft_p90_ms'])} ms, "
                  f"hit {summary['cache_hit_rate']:.1%}, {summary['output_tok_s']:.1f} tok/s, "
                  f"errors {summary['errors'] or 0}", flush=True)
    args.worker_flags = base_flags
    return runs


KEYS = ("cache_hit_rate", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "output_tok_s",
        "mean_prompt_tokens")


def medians(runs):
    """Per size: the median of each figure over the repeats, and the failed requests."""
    out = []
    for mib in dict.fromkeys(r["host_mib"] for r in runs):
        mine = [r["summary"] for r in runs if r["host_mib"] == mib]
        row = {"host_mib": mib, "failed": sum(s["failed"] for s in mine)}
        for key in KEYS:
            values = [s[key] for s in mine if s[key] is not None]
            row[key] = statistics.median(values) if values else None
        out.append(row)
    return out


def working_set_tokens(runs):
    """The KV the workload would keep: each conversation's longest prompt, summed over the
    conversations (a group's shared system prompt counted once per user: an upper bound)."""
    longest = {}
    for r in runs[0]["requests"]:
        longest[r["chain"]] = max(longest.get(r["chain"], 0), r["prompt_tokens"])
    return sum(longest.values())


def table(rows):
    base = next((r for r in rows if r["host_mib"] == 0), None)
    lines = ["| host tier | cache hit | TTFT p50 | p90 | p99 (ms) | out tok/s | p90 vs none "
             "| failed |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ratio = (base["ttft_p90_ms"] / r["ttft_p90_ms"]
                 if base and r["ttft_p90_ms"] and base["ttft_p90_ms"] else None)
        lines.append(f"| {r['host_mib']} MiB | {r['cache_hit_rate']:.1%} | "
                     f"{ab.fmt(r['ttft_p50_ms'])} | {ab.fmt(r['ttft_p90_ms'])} | "
                     f"{ab.fmt(r['ttft_p99_ms'])} | {ab.fmt(r['output_tok_s'], 1)} | "
                     f"{ab.fmt(ratio, 2)}x better | {r['failed']} |")
    return "\n".join(lines)


def plot(rows, kv_mib, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r["host_mib"] for r in rows]
    figure, (hits, ttft) = plt.subplots(1, 2, figsize=(10, 4))
    hits.plot(sizes, [100 * r["cache_hit_rate"] for r in rows], "o-")
    hits.set_ylabel("prefix-cache hit rate (%)")
    hits.set_ylim(0, 100)
    for key, label in (("ttft_p50_ms", "p50"), ("ttft_p90_ms", "p90")):
        ttft.plot(sizes, [r[key] for r in rows], "o-", label=label)
    ttft.set_ylabel("TTFT (ms)")
    ttft.set_ylim(bottom=0)
    ttft.legend()
    for axis in (hits, ttft):
        axis.set_xlabel(f"host KV tier (MiB), device pool {kv_mib} MiB")
        axis.grid(True, alpha=0.3)
    figure.suptitle("Multi-turn chat, working set ~4x the device pool (SmolLM2-135M, CPU)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main():
    args = parse_args()
    if args.replot:
        with open(args.replot) as f:
            saved = json.load(f)
        plot(saved["medians"], saved["kv_memory_bytes"] >> 20, args.plot)
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    print(f"# 1 worker, device KV {args.kv_memory_bytes >> 20} MiB, {args.worker_threads} "
          f"threads; multi_turn {args.users} users / {args.groups} groups, "
          f"{args.requests} requests at {args.rate:g}/s; seed {args.seed}", flush=True)
    try:
        runs = run(args)
    finally:
        ab.kvserve_e2e.cleanup()
    rows = medians(runs)
    pool_tokens = args.kv_memory_bytes // args.kv_bytes_per_token
    working_set = working_set_tokens(runs)
    print()
    print(f"working set ~{working_set} tokens (longest prompt per conversation, summed); device "
          f"pool {pool_tokens} tokens: {working_set / pool_tokens:.1f}x")
    print(table(rows))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"kv_memory_bytes": args.kv_memory_bytes, "pool_tokens": pool_tokens,
                       "working_set_tokens": working_set, "medians": rows, "runs": runs},
                      f, indent=1)
    if args.plot:
        plot(rows, args.kv_memory_bytes >> 20, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
