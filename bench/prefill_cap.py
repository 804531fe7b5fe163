#!/usr/bin/env python3
"""The per-step prefill cap against the inter-token tail: one worker per setting, the same load.

A step that prefills new prompts lasts longer than a decode-only step, and every decoding stream
waits for the whole step, so without a cap the inter-token latency (ITL) tail is the time of the
largest prefill step. `--max_prefill_tokens_per_step` bounds that in tokens,
`--step_time_target_ms` in estimated step time. This script serves the same closed-loop load
(kvserve-loadgen: N streams, fixed prompt and output lengths, greedy, ignore_eos) from a fresh
worker for each setting, alternating them inside each round, and reports the medians over rounds
of output tok/s, TTFT p50/p90/p99 and ITL p50/p99/p99.9, as a table, a JSON file and a plot of
ITL p99 and throughput against the setting.

    python3 bench/prefill_cap.py --build=build --caps=0,32,64,128,256 --targets=60,90 \\
        --rounds=3 --json=/tmp/prefill_cap.json --plot=docs/img/prefill_cap.png
    python3 bench/prefill_cap.py --replot=/tmp/prefill_cap.json --plot=docs/img/prefill_cap.png

Cap 0 is no cap (a step takes up to --max_num_batched_tokens of prompt). Caps and targets are
measured alone (the default policy's automatic target and queue-wait rule off; its majority and
prefix-join rules always on); --default adds the default policy as it ships.
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
import kvserve_e2e  # noqa: E402

FIELDS = ("output_tokens_per_s", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "itl_p50_ms",
          "itl_p99_ms", "itl_p999_ms")


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def loadgen(args, target, concurrency, requests, prompt_len, output_len, seed):
    command = [os.path.join(args.build, "bench", "kvserve-loadgen"), f"--target={target}",
               f"--concurrency={concurrency}", f"--num_requests={requests}",
               f"--prompt_len={prompt_len}:{prompt_len}", f"--output_len={output_len}:{output_len}",
               f"--seed={seed}"]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    summary = json.loads(out.strip().splitlines()[-1])
    if summary["failed"]:
        raise RuntimeError(f"{summary['failed']} requests failed:\n{out}")
    return summary


def configs(args):
    """(label, worker flags) of each configuration: the default policy (--default), then each
    cap and step-time target alone (the default policy's other rules off)."""
    alone = ["--step_time_target_ms=0", "--max_queue_wait_ms=0"]
    out = [("default", [])] if args.default else []
    out += [("none" if int(c) == 0 else c, [*alone, f"--max_prefill_tokens_per_step={int(c)}"])
            for c in args.caps.split(",") if c]
    out += [(f"{float(t):g} ms", ["--max_queue_wait_ms=0", f"--step_time_target_ms={float(t)}"])
            for t in args.targets.split(",") if t]
    return out


def measure(args, config_flags, seed):
    flags = [*config_flags, f"--num_threads={args.threads}",
             f"--kv_memory_bytes={args.kv_memory_bytes}",
             f"--max_num_batched_tokens={args.max_num_batched_tokens}", *shlex.split(args.flags)]
    worker = kvserve_e2e.Worker(os.path.join(args.build, "worker", "kvserve-worker"),
                                ([f"--model={args.model}"] if args.model else []) + flags)
    worker.start()
    try:
        loadgen(args, worker.address, 4, 4, 16, 8, seed + 1)  # warm-up: threads, pages
        return loadgen(args, worker.address, args.concurrency,
                       args.requests_per_stream * args.concurrency, args.prompt_len,
                       args.output_len, seed)
    finally:
        worker.terminate()


def run(args):
    all_configs = configs(args)
    runs = {label: [] for label, _ in all_configs}
    for round_index in range(args.rounds):
        order = all_configs if round_index % 2 == 0 else list(reversed(all_configs))
        for label, flag in order:
            # The same prompts for every configuration within a round; fresh prompts per round.
            summary = measure(args, flag, args.seed + 1000 * round_index)
            runs[label].append(summary)
            print(f"round {round_index + 1} {label}: "
                  + ", ".join(f"{k} {summary[k]:.1f}" for k in FIELDS), flush=True)
    labels = [label for label, _ in all_configs]
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpu": cpu_name(), "command": " ".join(shlex.quote(a) for a in sys.argv),
            "configs": labels, "runs": runs,
            "medians": {label: {k: statistics.median(r[k] for r in runs[label]) for k in FIELDS}
                        for label in labels}}


def labels_of(result):
    """The configurations of a result; a file from before --targets keyed them by cap."""
    if "configs" in result:
        return result["configs"]
    for cap in result["caps"]:
        result["medians"]["none" if cap == 0 else str(cap)] = result["medians"].pop(str(cap))
    result["configs"] = ["none" if cap == 0 else str(cap) for cap in result["caps"]]
    return result["configs"]


def table(result):
    lines = ["| prefill cap / step target | output tok/s | TTFT p50 | p90 | p99 (ms) | ITL p50 | p99 | p99.9 (ms) "
             "| ITL p99 / p50 |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for label in labels_of(result):
        m = result["medians"][label]
        lines.append(f"| {label} | {m['output_tokens_per_s']:.1f} | {m['ttft_p50_ms']:.0f} | "
                     f"{m['ttft_p90_ms']:.0f} | {m['ttft_p99_ms']:.0f} | {m['itl_p50_ms']:.1f} | "
                     f"{m['itl_p99_ms']:.1f} | {m['itl_p999_ms']:.1f} | "
                     f"{m['itl_p99_ms'] / m['itl_p50_ms']:.2f} |")
    return "\n".join(lines)


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = labels_of(result)
    med = [result["medians"][label] for label in labels]
    xs = range(len(labels))
    fig, left = plt.subplots(figsize=(7, 4.2))
    left.plot(xs, [m["itl_p99_ms"] for m in med], "o-", color="tab:red", label="ITL p99")
    left.plot(xs, [m["itl_p50_ms"] for m in med], "o--", color="tab:orange", label="ITL p50")
    left.plot(xs, [m["ttft_p50_ms"] for m in med], "s:", color="tab:purple", label="TTFT p50")
    left.set_ylabel("latency (ms)")
    left.set_xlabel("--max_prefill_tokens_per_step (prompt tokens in a step that decodes) "
                    "or --step_time_target_ms", fontsize=8)
    left.set_xticks(list(xs), labels)
    left.set_ylim(bottom=0)
    right = left.twinx()
    right.bar(xs, [m["output_tokens_per_s"] for m in med], width=0.35, alpha=0.25,
              color="tab:blue", label="output tok/s")
    right.set_ylabel("output tokens/s")
    right.set_ylim(bottom=0)
    handles = left.get_legend_handles_labels()
    more = right.get_legend_handles_labels()
    left.legend(handles[0] + more[0], handles[1] + more[1], loc="upper center", fontsize=8,
                bbox_to_anchor=(0.5, -0.16), ncol=4)
    left.set_zorder(right.get_zorder() + 1)
    left.patch.set_visible(False)
    fig.suptitle(f"Prefill cap and the inter-token tail ({result['cpu']}, {result['date'][:10]})",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--model", default=None, help="model file (default: the default model)")
    parser.add_argument("--caps", default="0,32,64,128,256")
    parser.add_argument("--targets", default="", help="--step_time_target_ms values (ms)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--requests_per_stream", type=int, default=4)
    parser.add_argument("--prompt_len", type=int, default=64)
    parser.add_argument("--output_len", type=int, default=128)
    parser.add_argument("--seed", type=int, default=332)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--kv_memory_bytes", type=int, default=1 << 30)
    parser.add_argument("--max_num_batched_tokens", type=int, default=2048)
    parser.add_argument("--default", action="store_true",
                        help="also measure the default policy (no cap or target flags)")
    parser.add_argument("--flags", default="", help="more kvserve-worker flags")
    parser.add_argument("--json", default=None, help="write the runs and medians here")
    parser.add_argument("--plot", default=None, help="write the plot here (PNG)")
    parser.add_argument("--replot", default=None, help="redraw a saved --json; measure nothing")
    args = parser.parse_args()
    if args.replot:
        with open(args.replot) as f:
            result = json.load(f)
    else:
        result = run(args)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
    print(f"{result['cpu']}, {result['date']}\n{result['command']}\n")
    print(table(result))
    if args.plot:
        plot(result, args.plot)


if __name__ == "__main__":
    main()
