#!/usr/bin/env python3
"""Calibrates the step-time model of simulated workers (kvserve-worker --runner=simulated
--step_time_model=FILE.json) from engine steps a real worker logged with --step_log=FILE.csv.

The model (one engine step, in milliseconds):
  step_ms = fixed_ms + prefill_token_ms * prefill_tokens + decode_token_ms * decode_tokens
            + prefill_attention_ms_per_mtoken * prefill_attended_tokens / 1e6
            + decode_attention_ms_per_mtoken * decode_context_tokens / 1e6
where prefill_attended_tokens sums, over the step's prefill chunks, tokens computed x context
length at the end of the step (attention as compute), and decode_context_tokens sums the
decodes' context lengths (attention as a read of the cache). The step log's lines are
  duration_ms,prefill_tokens,decode_tokens,seqs,prefill_attended_tokens,decode_context_tokens
(one header line, repeated where a file was appended to; repeats are skipped).

  fit     Fits the five coefficients to one or more step logs by non-negative least squares
          (Lawson-Hanson, numpy only: a negative time per token means nothing), prints them with
          R^2 and the RMS error, and writes the JSON (--out; "source" names the logs and fit).
            python3 bench/calibrate_step_time.py fit steps.csv [more.csv] --out model.json
  record  Runs a real worker with --step_log under a mixed load and then fits what it logged:
          prefills alone (prompts of 32-2048 tokens, 1 output token), decode batches (1-32
          concurrent streams of 64-token prompts, 1-8 of 1024-token ones) and staggered mixes
          of both (prefill chunks beside running decodes). Prompts are random token ids, so
          none hits the prefix cache. On a GPU, pass --worker_flags="--device=cuda --model=..."
            python3 bench/calibrate_step_time.py record --csv /tmp/steps.csv --out model.json \\
                [--worker=build/worker/kvserve-worker] [--worker_flags="--num_threads=1"]
"""

import argparse
import csv
import json
import os
import shlex
import subprocess
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
import kvserve_e2e  # noqa: E402
import router_e2e_lib as lib  # noqa: E402

COLUMNS = ["duration_ms", "prefill_tokens", "decode_tokens", "seqs", "prefill_attended_tokens",
           "decode_context_tokens"]
TERMS = ["fixed_ms", "prefill_token_ms", "decode_token_ms", "prefill_attention_ms_per_mtoken",
         "decode_attention_ms_per_mtoken"]


# ---------------------------------------------------------------------------------------------
# Fit.

def read_steps(paths):
    """Every step of every log as a float array [steps, len(COLUMNS)]."""
    rows = []
    for path in paths:
        with open(path, newline="") as f:
            for line_number, row in enumerate(csv.reader(f), 1):
                if not row or row == COLUMNS:
                    continue
                if len(row) != len(COLUMNS):
                    raise SystemExit(f"{path}:{line_number}: want {len(COLUMNS)} fields: {row}")
                rows.append([float(value) for value in row])
    if not rows:
        raise SystemExit("no steps in " + ", ".join(paths))
    return np.array(rows)


def design(steps):
    """(a, b): one row per step, one column per TERMS entry; b is the measured step time."""
    column = {name: steps[:, i] for i, name in enumerate(COLUMNS)}
    a = np.column_stack([np.ones(len(steps)), column["prefill_tokens"],
                         column["decode_tokens"], column["prefill_attended_tokens"] / 1e6,
                         column["decode_context_tokens"] / 1e6])
    return a, column["duration_ms"]


def nnls(a, b, tolerance=1e-10):
    """x >= 0 minimising |a x - b| (Lawson and Hanson's active-set method). Columns are scaled
    to unit norm first, so one tolerance suits terms of very different magnitudes."""
    norms = np.linalg.norm(a, axis=0)
    norms[norms == 0] = 1.0
    scaled = a / norms
    n = scaled.shape[1]
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)  # the variables free to be positive
    for _ in range(10 * n):
        gradient = scaled.T @ (b - scaled @ x)
        candidates = np.where(~passive & (gradient > tolerance))[0]
        if not len(candidates):
            break
        passive[candidates[np.argmax(gradient[candidates])]] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(scaled[:, passive], b, rcond=None)[0]
            if np.all(z[passive] > 0):
                x = z
                break
            # Move from x toward z until the first passive variable reaches zero; drop it.
            blocking = passive & (z <= 0)
            step = np.min(x[blocking] / (x[blocking] - z[blocking]))
            x = x + step * (z - x)
            passive &= x > tolerance
            x[~passive] = 0.0
    return x / norms


def fit(paths):
    """({term: coefficient}, R^2, RMS error in ms, number of steps)."""
    a, b = design(read_steps(paths))
    x = nnls(a, b)
    residual = b - a @ x
    total = np.sum((b - b.mean()) ** 2)
    r_squared = 1.0 - np.sum(residual ** 2) / total if total > 0 else 1.0
    return dict(zip(TERMS, map(float, x))), float(r_squared), float(np.sqrt(np.mean(
        residual ** 2))), len(b)


def fit_and_write(paths, out):
    model, r_squared, rms_ms, steps = fit(paths)
    for term in TERMS:
        print(f"{term:>24} = {model[term]:.6g}")
    print(f"R^2 = {r_squared:.4f}, RMS error {rms_ms:.3f} ms over {steps} steps")
    if out:
        model["source"] = (f"non-negative least-squares fit of {steps} engine steps from "
                           f"{', '.join(os.path.basename(p) for p in paths)} by "
                           f"bench/calibrate_step_time.py: R^2 {r_squared:.4f}, RMS error "
                           f"{rms_ms:.3f} ms")
        with open(out, "w") as f:
            json.dump(model, f, indent=2)
            f.write("\n")
        print(f"wrote {out}")


# ---------------------------------------------------------------------------------------------
# Record: a worker with --step_log under a mixed load.

def random_prompts(rng, lengths, vocab_size):
    return [rng.integers(100, vocab_size, int(length)).tolist() for length in lengths]


def run_streams(stub, pb, prompts, max_tokens, stagger_s=0.0):
    """Greedy streams of exactly max_tokens tokens, the i-th started i x stagger_s late."""
    gen = pb["generation_pb2"]
    errors = []

    def one(index, ids):
        time.sleep(index * stagger_s)
        request = gen.GenerateRequest(
            prompt_token_ids=gen.TokenIds(ids=ids),
            sampling=pb["sampling_pb2"].SamplingParams(temperature=0, max_tokens=max_tokens,
                                                       ignore_eos=True))
        try:
            for _ in stub.Generate(request, timeout=600):
                pass
        except Exception as error:  # reported after the batch
            errors.append(error)

    threads = [threading.Thread(target=one, args=(i, p)) for i, p in enumerate(prompts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"{len(errors)} stream(s) failed, e.g. {errors[0]}")


def mixed_load(stub, pb, vocab_size, seed):
    """~30k prompt tokens in all (about a minute of one CPU core for SmolLM2-135M)."""
    rng = np.random.default_rng(seed)
    for length in (32, 128, 512, 1024, 2048):  # prefill alone, every chunk size
        run_streams(stub, pb, random_prompts(rng, [length], vocab_size), max_tokens=1)
    for length, batches in ((64, (1, 4, 16, 32)), (1024, (1, 4, 8))):  # decode batches
        for batch in batches:
            run_streams(stub, pb, random_prompts(rng, [length] * batch, vocab_size),
                        max_tokens=48)
    for batch in (4, 8):  # prefills of every size arriving beside running decodes
        lengths = rng.integers(32, 1536, batch)
        run_streams(stub, pb, random_prompts(rng, lengths, vocab_size), max_tokens=64,
                    stagger_s=0.3)


def record(args):
    binary_help = subprocess.run([args.worker, "--help"], capture_output=True, text=True).stdout
    if "--step_log " not in binary_help:
        raise SystemExit(f"{args.worker} has no --step_log")
    if os.path.exists(args.csv):
        os.remove(args.csv)
    pb = lib.setup({"proto-root": args.proto_root})
    worker = kvserve_e2e.Worker(args.worker, [f"--step_log={args.csv}"]
                                + shlex.split(args.worker_flags))
    try:
        worker.start()
        stub = lib.generation_stub(worker.address)
        info = stub.GetModelInfo(pb["generation_pb2"].GetModelInfoRequest(), timeout=60)
        print(f"recording steps of {info.name} into {args.csv}", flush=True)
        mixed_load(stub, pb, info.vocab_size, args.seed)
        worker.terminate()
    finally:
        kvserve_e2e.cleanup()
    fit_and_write([args.csv], args.out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    fit_parser = commands.add_parser("fit", help="fit step logs")
    fit_parser.add_argument("logs", nargs="+", help="step-log CSV files")
    fit_parser.add_argument("--out", help="model JSON to write")
    record_parser = commands.add_parser("record", help="log a real worker's steps, then fit")
    record_parser.add_argument("--csv", required=True, help="step log to write")
    record_parser.add_argument("--out", help="model JSON to write")
    record_parser.add_argument("--worker",
                               default=os.path.join(REPO, "build", "worker", "kvserve-worker"))
    record_parser.add_argument("--worker_flags", default="--num_threads=1",
                               help="more kvserve-worker flags (model, device, threads)")
    record_parser.add_argument("--proto-root", dest="proto_root",
                               default=os.path.join(REPO, "proto"))
    record_parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.command == "fit":
        fit_and_write(args.logs, args.out)
    else:
        record(args)


if __name__ == "__main__":
    main()
