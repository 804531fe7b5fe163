#!/usr/bin/env python3
"""Migration of a long request by KV block transfer against recompute: the time to the first
resumed token.

Two real workers (each with a host KV tier) behind a router. One request with a --prompt_tokens
prompt streams on one worker; after --cut_after tokens that worker is drained (SIGTERM,
--drain_timeout_s of grace), so the request is cut mid-stream and migrates to the other worker.
With the router's --kv_transfer=true the new worker fetches the request's blocks from the
draining worker (which serves them for --drain_kv_handoff_s); with --kv_transfer=false it
recomputes the whole context. The figure is the gap the client sees: the longest time between
two consecutive messages of the stream, which is the wait from the last token before the cut
to the first one after it (it includes the grace period's end, the router's re-admission, the
fetch or the prefill, and one decode step). Each round runs both modes on fresh processes, in
alternating order; the tokens of every run must equal the first run's.

  python3 bench/kv_transfer.py --prompt_tokens=2048 --rounds=3 --out=/tmp/kv_transfer.json
"""

import argparse
import json
import os
import signal
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
import kvserve_e2e  # noqa: E402
import router_e2e_lib as lib  # noqa: E402


def parse_args():
    build = os.path.join(REPO, "build")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add = parser.add_argument
    add("--worker", default=os.path.join(build, "worker", "kvserve-worker"))
    add("--router", default=os.path.join(build, "router", "kvserve-router"))
    add("--proto-root", dest="proto_root", default=os.path.join(REPO, "proto"))
    add("--model", default="", help="GGUF file (default: the binaries' default model)")
    add("--worker_threads", type=int, default=2)
    add("--prompt_tokens", type=int, default=2048)
    add("--max_tokens", type=int, default=192)
    add("--cut_after", type=int, default=8, help="tokens streamed before the drain")
    add("--drain_timeout_s", type=float, default=0.5)
    add("--rounds", type=int, default=3)
    add("--seed", type=int, default=7)
    add("--out", help="JSON results file")
    return parser.parse_args()


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def one_run(args, transfer, prompt_ids):
    """One migration; returns its record."""
    options = {"worker": args.worker, "router": args.router}
    if args.model:
        options["model"] = args.model
    worker_args = [f"--num_threads={args.worker_threads}", "--max_num_batched_tokens=512",
                   "--host_kv_bytes=268435456", f"--drain_timeout_s={args.drain_timeout_s}",
                   "--drain_kv_handoff_s=20"]
    workers = lib.start_workers(options, 2, worker_args)
    router = lib.start_router(options, workers,
                              ["--status_interval_ms=50", f"--kv_transfer={str(transfer).lower()}"])
    stub = lib.generation_stub(router.address)
    request = lib.request(ids=prompt_ids, temperature=0, max_tokens=args.max_tokens,
                          ignore_eos=True)
    tokens, stamps = [], []
    start = time.time()
    cut = None
    for response in stub.Generate(request, timeout=600):
        now = time.time()
        for delta in response.choices:
            if delta.token_ids:
                tokens.extend(delta.token_ids)
                stamps.append(now)
        if cut is None and len(tokens) >= args.cut_after:
            holder = max(workers, key=lambda w: lib.worker_metric_total(w, "kvserve_requests_running"))
            holder.process.send_signal(signal.SIGTERM)
            cut = now
    other = [w for w in workers if w is not holder][0]
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    record = {
        "transfer": transfer,
        "tokens": tokens,
        "ttft_s": stamps[0] - start,
        "resume_gap_s": max(gaps),
        "median_itl_s": statistics.median(gaps),
        "fetched_blocks": lib.worker_metric_total(
            other, 'kvserve_kv_transfer_blocks_total{direction="received"}'),
        "host_hit_tokens": lib.worker_metric_total(
            other, "kvserve_prefix_cache_host_hit_tokens_total"),
        "fetch_seconds_sum": lib.worker_metric_total(other, "kvserve_kv_fetch_duration_seconds_sum"),
    }
    kvserve_e2e.cleanup()
    return record


def main():
    args = parse_args()
    lib.setup({"proto-root": args.proto_root})
    import random
    rng = random.Random(args.seed)
    prompt_ids = [rng.randrange(1000, 40000) for _ in range(args.prompt_tokens)]
    runs = []
    for r in range(args.rounds):
        for transfer in ((True, False) if r % 2 == 0 else (False, True)):
            run = one_run(args, transfer, prompt_ids)
            runs.append(run)
            same = run["tokens"] == runs[0]["tokens"]
            print(f"round {r} transfer={transfer}: resume gap {run['resume_gap_s'] * 1000:.0f} ms, "
                  f"TTFT {run['ttft_s'] * 1000:.0f} ms, fetched {run['fetched_blocks']:.0f} blocks, "
                  f"host hits {run['host_hit_tokens']:.0f} tokens, same tokens: {same}",
                  flush=True)
            if not same:
                raise SystemExit("a migration changed the tokens")
    summary = {}
    for transfer in (True, False):
        mine = [run for run in runs if run["transfer"] == transfer]
        summary["transfer" if transfer else "recompute"] = {
            "resume_gap_ms": statistics.median(run["resume_gap_s"] for run in mine) * 1000,
            "ttft_ms": statistics.median(run["ttft_s"] for run in mine) * 1000,
            "median_itl_ms": statistics.median(run["median_itl_s"] for run in mine) * 1000,
        }
    ratio = summary["recompute"]["resume_gap_ms"] / summary["transfer"]["resume_gap_ms"]
    print(f"CPU: {cpu_name()}, {args.worker_threads} threads per worker, "
          f"{args.prompt_tokens}-token prompt, cut after {args.cut_after} tokens")
    print("| migration | time to first resumed token (median) | first TTFT | median ITL |")
    print("| --- | --- | --- | --- |")
    for name, row in summary.items():
        print(f"| {name} | {row['resume_gap_ms']:.0f} ms | {row['ttft_ms']:.0f} ms | "
              f"{row['median_itl_ms']:.1f} ms |")
    print(f"transfer is {ratio:.1f}x faster to resume")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"cpu": cpu_name(), "args": vars(args), "summary": summary, "runs": runs},
                      f, indent=1)


if __name__ == "__main__":
    main()
