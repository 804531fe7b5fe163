#!/usr/bin/env python3
"""Structured output's cost on a served model: the same chat requests with and without a
10-field JSON schema (the one bench/grammar_bench.cc measures), at 1 and 32 concurrent streams,
through a worker's OpenAI API with the official client. Rounds alternate free and constrained, so
both see the same machine. Per mode: output tokens/s over the round's wall time, and each
request's time per output token (its decode rate). Streams are pinned to the same seeds.

  python3 bench/structured_output.py [--worker build/worker/kvserve-worker] [--rounds 3]
"""
import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import time

import openai

# bench/ten_field_schema.json, which bench/grammar_bench.cc measures too.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "ten_field_schema.json")) as f:
    SCHEMA = json.load(f)


def start_worker(path, port):
    worker = subprocess.Popen(
        [path, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0", f"--http_port={port}",
         "--kv_memory_bytes=268435456",
         "--max_num_seqs=32", "--num_threads=2"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in worker.stdout:
        if "ready" in line:
            return worker
    raise SystemExit("worker did not start")


def one(client, model, seed, constrained, max_tokens):
    extra = {}
    if constrained:
        extra["response_format"] = {"type": "json_schema",
                                    "json_schema": {"name": "record", "schema": SCHEMA}}
    start = time.time()
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Write a staff record as JSON."}],
        temperature=0.8, seed=seed, max_tokens=max_tokens, **extra)
    seconds = time.time() - start
    if constrained and r.choices[0].finish_reason == "stop":
        json.loads(r.choices[0].message.content)  # the form held
    return r.usage.completion_tokens, seconds


def run(client, model, streams, constrained, max_tokens):
    start = time.time()
    with concurrent.futures.ThreadPoolExecutor(streams) as pool:
        results = list(pool.map(lambda s: one(client, model, s, constrained, max_tokens),
                                range(streams * 2)))
    wall = time.time() - start
    tokens = sum(t for t, _ in results)
    per_token_ms = statistics.median(1e3 * s / max(t, 1) for t, s in results)
    return tokens / wall, per_token_ms, tokens


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", default="build/worker/kvserve-worker")
    parser.add_argument("--port", type=int, default=18321)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max_tokens", type=int, default=160)
    args = parser.parse_args()
    worker = start_worker(args.worker, args.port)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{args.port}/v1", api_key="x",
                               max_retries=0, timeout=600)
        model = client.models.list().data[0].id
        one(client, model, 0, True, 8)  # compile the schema once, outside the timing
        for streams in (1, 32):
            rates = {False: [], True: []}
            for _ in range(args.rounds):
                for constrained in (False, True):
                    rates[constrained].append(run(client, model, streams, constrained,
                                                  args.max_tokens))
            free = statistics.median(r[0] for r in rates[False])
            bound = statistics.median(r[0] for r in rates[True])
            free_ms = statistics.median(r[1] for r in rates[False])
            bound_ms = statistics.median(r[1] for r in rates[True])
            print(f"streams {streams:2d}: free {free:7.1f} tok/s ({free_ms:.2f} ms/token), "
                  f"constrained {bound:7.1f} tok/s ({bound_ms:.2f} ms/token): "
                  f"{bound / free:.3f}x tok/s, {free_ms / bound_ms:.3f}x per-token rate")
            sys.stdout.flush()
    finally:
        worker.terminate()
        worker.wait()


if __name__ == "__main__":
    main()
