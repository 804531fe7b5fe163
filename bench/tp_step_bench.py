"""Per-step time of a tensor-parallel worker group through the serving path, with the plan
broadcast and all-reduce shares, from the worker's own metrics (kvserve_step_duration_seconds,
kvserve_tp_plan_broadcast_seconds, kvserve_tp_allreduce_seconds; docs/metrics.md).

For each configuration it starts kvserve-worker (f32 weights, one CPU thread per rank), runs
a warm-up request, reads the metrics, runs `--streams` concurrent greedy requests of
`--max_tokens` tokens each (decode-dominated steps of `--streams` sequences) through the gRPC
API, reads the metrics again and prints the means over the measured steps.

  python3 bench/tp_step_bench.py --worker=build/worker/kvserve-worker --proto-root=proto \
      [--model=PATH] [--sizes=1,3] [--streams=4] [--max_tokens=64]
"""

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))

import kvserve_e2e  # noqa: E402
import router_e2e_lib as lib  # noqa: E402


def histogram(text, name):
    """(sum, count) of a histogram in the exposition text."""
    values = {}
    for suffix in ("sum", "count"):
        match = re.search(rf"^{name}_{suffix} (\S+)$", text, re.MULTILINE)
        values[suffix] = float(match.group(1)) if match else 0.0
    return values["sum"], values["count"]


def measure(options, size, streams, max_tokens):
    args = ["--dtype=float32", f"--tensor_parallel_size={size}", f"--num_threads={size}",
            "--max_num_seqs=16", "--max_num_batched_tokens=256"]
    if "model" in options:
        args.append("--model=" + options["model"])
    worker = kvserve_e2e.Worker(options["worker"], args).start()
    try:
        stub = lib.generation_stub(worker.address)
        warm = [lib.request("Warm-up:", temperature=0, max_tokens=8, ignore_eos=True)]
        _, errors = lib.run_streams(stub, warm, 600)
        assert not errors, errors
        names = ["kvserve_step_duration_seconds", "kvserve_tp_plan_broadcast_seconds",
                 "kvserve_tp_allreduce_seconds"]
        before = {n: histogram(worker.metrics_text(), n) for n in names}
        requests = [lib.request(f"Story {i}: in a small town by the river, there lived",
                                temperature=0, max_tokens=max_tokens, ignore_eos=True)
                    for i in range(streams)]
        _, errors = lib.run_streams(stub, requests, 1200)
        assert not errors, errors
        after = {n: histogram(worker.metrics_text(), n) for n in names}
    finally:
        worker.terminate()
    result = {}
    for name in names:
        total = after[name][0] - before[name][0]
        count = after[name][1] - before[name][1]
        result[name] = (total / count * 1000 if count else 0.0, int(count))
    return result


def main():
    options, _ = kvserve_e2e.parse_args(sys.argv)
    lib.setup(options)
    sizes = [int(s) for s in options.get("sizes", "1,3").split(",")]
    streams = int(options.get("streams", "4"))
    max_tokens = int(options.get("max_tokens", "64"))
    print(f"{streams} greedy streams x {max_tokens} tokens, f32 weights, 1 thread per rank")
    print("| TP | steps | step ms (mean) | plan broadcast ms | all-reduce ms | broadcast share |"
          " all-reduce share |")
    print("|---|---|---|---|---|---|---|")
    for size in sizes:
        r = measure(options, size, streams, max_tokens)
        step, steps = r["kvserve_step_duration_seconds"]
        broadcast, _ = r["kvserve_tp_plan_broadcast_seconds"]
        all_reduce, _ = r["kvserve_tp_allreduce_seconds"]
        print(f"| {size} | {steps} | {step:.2f} | {broadcast:.3f} | {all_reduce:.2f} | "
              f"{broadcast / step:.1%} | {all_reduce / step:.1%} |", flush=True)
    kvserve_e2e.cleanup()


if __name__ == "__main__":
    main()
