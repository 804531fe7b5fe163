#!/usr/bin/env python3
"""What the router's HTTP front end costs against its gRPC API (not run in CI): the same load
through both, against one kvserve-router (--http_port) in front of kvserve-workers on the
default model, on loopback. HTTP is driven by the official `openai` SDK (AsyncOpenAI, streamed
completions), gRPC by grpcio's asyncio stubs; both send the same prompts (token ids, so no
tokenizer difference), greedy, ignore_eos, the same max_tokens and concurrency. Runs are paired
and alternated (gRPC, HTTP, gRPC, HTTP, ...) so drift on a noisy machine hits both; reports per
run and the medians: output tokens/s, TTFT p50/p99, and the ratios HTTP / gRPC.

  python3 bench/http_vs_grpc.py --build=build --pairs=3 --concurrency=8 --requests=48 \\
      --prompt_len=64 --max_tokens=32
"""

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
import kvserve_e2e  # noqa: E402
import router_e2e_lib as lib  # noqa: E402

import grpc  # noqa: E402
import openai  # noqa: E402


def prompts(count, length):
    return [[100 + i] + [(i * 131 + j * 7) % 40000 + 100 for j in range(length - 1)]
            for i in range(count)]


async def drive(concurrency, items, one):
    """Runs `one(prompt)` over items with `concurrency` at a time; (elapsed, results)."""
    queue = list(items)
    results = []

    async def lane():
        while queue:
            results.append(await one(queue.pop()))

    start = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return time.perf_counter() - start, results


async def grpc_run(address, model_pb, items, concurrency, max_tokens):
    async with grpc.aio.insecure_channel(address) as channel:
        stub = model_pb["generation_pb2_grpc"].GenerationStub(channel)

        async def one(ids):
            request = model_pb["generation_pb2"].GenerateRequest(
                prompt_token_ids=model_pb["generation_pb2"].TokenIds(ids=ids),
                sampling=model_pb["sampling_pb2"].SamplingParams(
                    max_tokens=max_tokens, temperature=0, ignore_eos=True))
            start, ttft, tokens = time.perf_counter(), None, 0
            async for response in stub.Generate(request, timeout=600):
                for delta in response.choices:
                    if delta.token_ids and ttft is None:
                        ttft = time.perf_counter() - start
                    tokens += len(delta.token_ids)
            return ttft, tokens

        return await drive(concurrency, items, one)


async def http_run(port, model, items, concurrency, max_tokens):
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused",
                                max_retries=0, timeout=600)

    async def one(ids):
        start, ttft, tokens = time.perf_counter(), None, 0
        stream = await client.completions.create(
            model=model, prompt=ids, max_tokens=max_tokens, temperature=0, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
        async for chunk in stream:
            if chunk.choices and ttft is None:
                ttft = time.perf_counter() - start
            if chunk.usage is not None:
                tokens = chunk.usage.completion_tokens
        return ttft, tokens

    try:
        return await drive(concurrency, items, one)
    finally:
        await client.close()


def summary(elapsed, results):
    ttfts = sorted(r[0] for r in results)
    tokens = sum(r[1] for r in results)
    return {"tok_s": tokens / elapsed, "ttft_p50_ms": 1e3 * statistics.median(ttfts),
            "ttft_p99_ms": 1e3 * ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))],
            "tokens": tokens}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--model", default=None)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--worker_threads", type=int, default=1)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--prompt_len", type=int, default=64)
    parser.add_argument("--max_tokens", type=int, default=32)
    args = parser.parse_args()
    options = {"worker": os.path.join(args.build, "worker", "kvserve-worker"),
               "router": os.path.join(args.build, "router", "kvserve-router"),
               "proto-root": os.path.join(HERE, "..", "proto")}
    if args.model:
        options["model"] = args.model
    pb = lib.setup(options)
    try:
        workers = lib.start_workers(options, args.workers,
                                    [f"--num_threads={args.worker_threads}"])
        router = lib.start_router(options, workers, ["--http_port=0"])
        model = __import__("json").loads(__import__("urllib.request").request.urlopen(
            f"http://127.0.0.1:{router.http_port}/v1/models").read())["data"][0]["id"]
        # Warm-up through both (connections, pools, the prefix cache is keyed by prompt: each
        # run below uses prompts no earlier run used, so no run hits a cache the other filled).
        asyncio.run(grpc_run(router.address, pb, prompts(4, args.prompt_len), 4, 4))
        asyncio.run(http_run(router.http_port, model, prompts(4, args.prompt_len), 4, 4))
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                    if line.startswith("model name")), "unknown CPU")
        print(f"# {cpu}, {os.cpu_count()} CPUs; {args.workers} worker(s) x "
              f"{args.worker_threads} thread(s); concurrency {args.concurrency}, "
              f"{args.requests} requests of {args.prompt_len} prompt + {args.max_tokens} output "
              f"tokens per run")
        runs = {"grpc": [], "http": []}
        offset = 10000
        for pair in range(args.pairs):
            for kind in ("grpc", "http"):
                items = [[(t + offset) % 40000 + 100 for t in p]
                         for p in prompts(args.requests, args.prompt_len)]
                offset += 997
                if kind == "grpc":
                    elapsed, results = asyncio.run(grpc_run(router.address, pb, items,
                                                            args.concurrency, args.max_tokens))
                else:
                    elapsed, results = asyncio.run(http_run(router.http_port, model, items,
                                                            args.concurrency, args.max_tokens))
                s = summary(elapsed, results)
                runs[kind].append(s)
                print(f"pair {pair + 1} {kind:4s}: {s['tok_s']:7.1f} output tok/s, TTFT p50 "
                      f"{s['ttft_p50_ms']:7.1f} ms, p99 {s['ttft_p99_ms']:7.1f} ms "
                      f"({s['tokens']} tokens)", flush=True)
        med = {kind: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
               for kind, rs in runs.items()}
        print(f"median grpc: {med['grpc']['tok_s']:.1f} tok/s, TTFT p50 "
              f"{med['grpc']['ttft_p50_ms']:.1f} ms; http: {med['http']['tok_s']:.1f} tok/s, "
              f"TTFT p50 {med['http']['ttft_p50_ms']:.1f} ms")
        print(f"http / grpc throughput {med['http']['tok_s'] / med['grpc']['tok_s']:.3f}; "
              f"TTFT p50 difference {med['http']['ttft_p50_ms'] - med['grpc']['ttft_p50_ms']:+.1f}"
              f" ms")
    finally:
        kvserve_e2e.cleanup()


if __name__ == "__main__":
    main()
