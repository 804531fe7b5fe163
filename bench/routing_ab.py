#!/usr/bin/env python3
"""A/B of the router's routing policies (kvserve-router --routing_policy) under open-loop load.

For every workload, every rate in --rates and every policy in --policies (alternated inside each
rate, so drift on a noisy machine hits all policies alike) it starts a fresh cluster (a router
and --workers workers on loopback, so every policy starts with cold caches), replays the same
seeded schedule of --requests arrivals through the gRPC streaming API (the same requests at
every rate, only closer together), stops the cluster and moves on. Only the routing choice
differs between policies; admission, queueing and migration are shared by the router.

Workloads (text built from a fixed word list, about one SmolLM2 token per word, so the router
tokenizes and hashes them like real text; every draw comes from --seed):
  multi_turn  --users users in --groups groups. Each group shares a system prompt of
              --system_words words; each user holds a real conversation: its turn k is sent as
              chat messages (system + every earlier user message and the model's actual reply +
              a new user message of ~--user_words words), so consecutive turns share everything
              but the newest messages. Arrivals form one Poisson process of rate R over all
              users (users take turns in shuffled rounds); a user's turn also waits for its
              previous answer plus an exponential think time (mean --think_s), as a person
              would. After --max_turns turns a user starts a new conversation.
  shared_doc  Q&A over --docs documents of --doc_words words: each Poisson arrival is the raw
              prompt "document + a question of ~--question_words words", on a document drawn
              uniformly.
  no_sharing  The control: unique raw prompts of doc_words + question_words words, nothing
              shared, so prefix-aware routing can only lose (to least_loaded) or tie.
Every request is greedy with ignore_eos and --max_tokens output tokens, so each policy generates
the same number of tokens.

Why these sizes. llm-d's published prefix-cache routing benchmark serves 150 customers, each
with a ~6k-token shared context, from 8 vLLM replicas at 3-60 QPS: contexts are long beside the
new text of a turn, and all of them together fit the cluster's KV caches but not every
replica's. The defaults keep those proportions at what 2 CPU cores running SmolLM2-135M can
serve (an 800-token prefill takes ~2 s on one core): 12 users in 6 groups with 800-token
contexts, 40-word turns and 32-token answers, 5 turns each (60 requests), 3 workers with
96 MiB KV pools (~4.3k tokens each: two groups' contexts and histories fit, all six contexts
do not) against a working set of ~10k tokens, and 0.25-1 requests/s; shared_doc's 6 documents
of 800 words likewise. On --cluster=simulated (workers that sleep a calibrated step time
instead of computing; bench/step_time_h200_8b.json models an 8B model on an H200) the published
scale is in reach, within SmolLM2's 8k context: ~340k tokens of working set against 8 pools of
~52k tokens (SmolLM2's 23 KB of KV per token):
  --cluster=simulated --workers=8 --users=150 --groups=30 --system_words=3000
  --user_words=200 --max_tokens=128 --max_turns=5 --requests=750 --rates=3,10,30,60
  --kv_memory_bytes=1200000000
(at the top rates this Python client itself may lag: the JSON's per-request lag_s shows it).

Outputs: per (workload, rate, policy) TTFT p50/p90/p99, inter-token gap p50/p99 (gaps between
streamed messages that carry tokens), output tokens/s (all output tokens / first send to last
answer), cache hit rate (sum of Usage.cached_prompt_tokens / sum of prompt_tokens), mean prompt
tokens and failed requests (by gRPC status) as a Markdown table; then kv_aware / round_robin
ratios (p90 TTFT, throughput) per workload and rate, and kv_aware / least_loaded on no_sharing.
--out writes everything as JSON (each request included), --plot a PNG (p90 TTFT and throughput
against rate, one line per policy, one column per workload; bars of p50 and p90 TTFT and of
throughput per policy for a workload run at one rate); --replot JSON --plot PNG redraws a run.

  python3 bench/routing_ab.py --cluster=real --workloads=multi_turn,shared_doc,no_sharing \\
      --rates=0.25,0.5,1 --requests=60 --out=/tmp/routing_ab.json --plot=/tmp/routing_ab.png
  python3 bench/routing_ab.py --smoke     # a ctest: kv_aware must beat round_robin's hit rate

--smoke runs 3 simulated workers (--step_time_model), a small multi_turn only, kv_aware against
round_robin, and exits 1 unless kv_aware's cache hit rate is higher and every request
succeeded; it asserts nothing about time.
"""

import argparse
import asyncio
import dataclasses
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time

import grpc
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
import kvserve_e2e  # noqa: E402
import router_e2e_lib as lib  # noqa: E402

POLICIES = ("kv_aware", "round_robin", "least_loaded", "random")
WORKLOAD_NAMES = ("multi_turn", "shared_doc", "no_sharing")

# Distinct common words, about one SmolLM2 token each with its leading space.
WORDS = """
able about above across action active actual added after again against agent almost along
already also always amount angle animal answer apple area around arrive artist autumn average
back balance basket battery beach become before begin behind below better between beyond bicycle
bottle bridge bright broad brother budget build button cabin camera candle canyon capital carbon
careful carpet castle center chapter cheese chosen circle citizen classic clever climate clock
cloud coast coffee collect colour comfort common copper corner cotton county courage cousin
credit crystal culture current custom daily dancer danger debate decade decide deep defend degree
desert design detail device dinner direct doctor double dragon drawer driver early earth easily
editor effect effort eight either elbow eleven empire energy engine enough entire equal escape
evening event exact expert fabric factor family famous farmer father feather fellow fence field
figure finger finish flower follow forest formal forward fourth frame friend future galaxy garden
gather gentle giant ginger global golden govern grain gravity ground growth guitar habit hammer
handle harbor health heavy height hidden history holiday honest horizon hunger island jacket
journey jungle kettle kitchen ladder lantern large later launch leader lemon lesson letter level
library light limit liquid little lively local lumber magnet manner marble market master meadow
medium memory method middle minute mirror modern moment monkey morning motion mountain museum
narrow nation nature needle network noble normal notice number object ocean office orange orbit
order output owner oxygen packet palace paper parade parent pencil people pepper period pillow
planet pocket poetry policy potato powder praise prefer pretty prince profit proper public purple
puzzle quarter quick rabbit radio random rapid reason record region remote repair result ribbon
river rocket rubber saddle safety salad sample school screen season second secret select signal
silver simple singer sister smooth socket soldier spirit spring square stable station steady
stone story stream street strong studio summer sunset supply surface switch symbol system table
talent target temple tender theory thread ticket timber tomato tower travel triple tunnel turtle
twelve unique united useful valley velvet vessel village violet visual volume wagon wallet winter
wisdom wonder wooden yellow young zebra
""".split()

# What --smoke sets, whatever the command line says.
SMOKE = dict(workloads=["multi_turn"], policies=["kv_aware", "round_robin"], rates=[4.0],
             requests=18, workers=3, users=6, groups=2, system_words=600, user_words=20,
             max_turns=3, think_s=0.2, max_tokens=8, kv_memory_bytes=64 << 20,
             cluster="simulated")


# ---------------------------------------------------------------------------------------------
# Workloads: a list of chains. A chain's turns run one after another (a user's conversation);
# chains run concurrently. A turn is sent at max(its arrival, previous answer + its think time).

@dataclasses.dataclass(frozen=True)
class Turn:
    arrival_s: float  # scheduled send time, from the run's start
    think_s: float  # least time after the chain's previous answer
    prefix: str  # the shared part: a system prompt or a document ("" when none)
    text: str  # the user's message or the rest of the raw prompt
    new_conversation: bool = False  # chat: drop the history before this turn


@dataclasses.dataclass(frozen=True)
class Chain:
    chat: bool  # chat messages (prefix = system prompt) or a raw prompt (prefix + text)
    turns: list


def poisson_arrivals(rng, rate, count):
    """The first `count` arrival times of a Poisson process of `rate` per second."""
    return np.cumsum(rng.exponential(1.0 / rate, count))


def random_words(rng, count):
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), int(count)))


def about(rng, mean_words):
    """A length drawn uniformly from [mean / 2, 3 mean / 2]."""
    return rng.integers(max(1, mean_words // 2), mean_words * 3 // 2 + 1)


def multi_turn(args, rng, arrivals):
    systems = [f"You are the assistant of customer {g}. " + random_words(rng, args.system_words)
               for g in range(args.groups)]
    turns = [[] for _ in range(args.users)]
    order = []
    for arrival in arrivals:
        if not order:  # a new round: every user once, in a fresh order
            order = list(rng.permutation(args.users))
        user = order.pop()
        turns[user].append(Turn(
            arrival_s=float(arrival), think_s=float(rng.exponential(args.think_s)),
            prefix=systems[user % args.groups], text=random_words(rng, about(rng, args.user_words)),
            new_conversation=len(turns[user]) % args.max_turns == 0))
    return [Chain(chat=True, turns=t) for t in turns if t]


def shared_doc(args, rng, arrivals):
    docs = [f"Document {d}.\n" + random_words(rng, args.doc_words) for d in range(args.docs)]
    return [Chain(chat=False, turns=[Turn(
        arrival_s=float(arrival), think_s=0.0, prefix=docs[rng.integers(args.docs)],
        text="\n\nQuestion: " + random_words(rng, about(rng, args.question_words)) + "?\nAnswer:")])
        for arrival in arrivals]


def no_sharing(args, rng, arrivals):
    length = args.doc_words + args.question_words
    return [Chain(chat=False, turns=[Turn(arrival_s=float(arrival), think_s=0.0, prefix="",
                                          text=random_words(rng, length))])
            for arrival in arrivals]


WORKLOADS = {"multi_turn": multi_turn, "shared_doc": shared_doc, "no_sharing": no_sharing}


def build_workload(args, name, rate):
    """The chains of `name` at `rate`: the same for every policy (seeded by seed, name, rate)."""
    rng = np.random.default_rng([args.seed, WORKLOAD_NAMES.index(name), round(rate * 1000)])
    return WORKLOADS[name](args, rng, poisson_arrivals(rng, rate, args.requests))


# ---------------------------------------------------------------------------------------------
# Cluster: a router and K workers on loopback (ports 0, read from their output by kvserve_e2e).

def worker_args(args):
    flags = [f"--kv_memory_bytes={args.kv_memory_bytes}", "--drain_timeout_s=5"]
    if args.cluster == "simulated":
        flags += ["--runner=simulated", f"--step_time_model={args.step_time_model}"]
    else:
        flags += [f"--num_threads={args.worker_threads}"]
    if args.model:
        flags.append(f"--model={args.model}")
    return flags + shlex.split(args.worker_flags)


def router_args(args, policy):
    flags = [f"--routing_policy={policy}", "--drain_timeout_s=5"]
    if args.model:
        flags.append(f"--model={args.model}")
    return flags + shlex.split(args.router_flags)


def stop_processes(processes, timeout_s=15):
    """SIGTERM to each (in order: the router first, so it drains before its workers), then
    SIGKILL to any still running after timeout_s."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for process in processes:
        try:
            process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Cluster:
    """A router in front of --workers fresh workers; a context manager that stops them all."""

    def __init__(self, args, policy):
        self.workers = [kvserve_e2e.Worker(args.worker, worker_args(args))
                        for _ in range(args.workers)]
        self.router = None
        self.router_flags = router_args(args, policy)
        self.router_binary = args.router

    def __enter__(self):
        try:
            threads = [threading.Thread(target=w.start) for w in self.workers]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            for worker in self.workers:
                if worker.grpc_port is None:
                    raise RuntimeError("a worker did not start:\n" + worker.log())
            workers_flag = "--workers=" + ",".join(w.address for w in self.workers)
            self.router = lib.Router(self.router_binary, workers_flag, self.router_flags)
            self.router.start()
            self.router.wait_workers_healthy(self.workers)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        members = ([self.router] if self.router else []) + self.workers
        stop_processes([m.process for m in members if m.process is not None])

    @property
    def address(self):
        return self.router.address


# ---------------------------------------------------------------------------------------------
# Driver: one asyncio task per chain, one gRPC stream per turn.

def generate_request(pb, args, chain, turn, history):
    gen = pb["generation_pb2"]
    sampling = pb["sampling_pb2"].SamplingParams(temperature=0, max_tokens=args.max_tokens,
                                                 ignore_eos=True)
    if not chain.chat:
        return gen.GenerateRequest(prompt=turn.prefix + turn.text, sampling=sampling)
    messages = [("system", turn.prefix)] + history + [("user", turn.text)]
    conversation = gen.ChatConversation(
        messages=[gen.ChatMessage(role=role, content=content) for role, content in messages])
    return gen.GenerateRequest(chat=conversation, sampling=sampling)


async def stream(stub, request, timeout_s):
    """One Generate stream: TTFT, gaps between token-carrying messages, text, usage, or the
    gRPC status that ended it."""
    start = time.perf_counter()
    stamps, text, tokens, usage, error = [], "", 0, None, None
    try:
        async for response in stub.Generate(request, timeout=timeout_s):
            count = sum(len(delta.token_ids) for delta in response.choices)
            if count:
                stamps.append(time.perf_counter())
                tokens += count
            text += "".join(delta.text for delta in response.choices)
            if response.HasField("usage"):
                usage = response.usage
    except grpc.aio.AioRpcError as rpc_error:
        error = rpc_error.code().name
    return {"ttft_s": stamps[0] - start if stamps else None,
            "gaps_s": np.diff(stamps).tolist(), "output_tokens": tokens, "text": text,
            "prompt_tokens": usage.prompt_tokens if usage else 0,
            "cached_tokens": usage.cached_prompt_tokens if usage else 0,
            "error": error or (None if usage else "NO_USAGE")}


async def run_chain(stub, pb, args, chain, start, results, index=0):
    history, last_answer_s = [], 0.0
    for turn in chain.turns:
        send_s = max(turn.arrival_s, last_answer_s + turn.think_s)
        await asyncio.sleep(max(0.0, start + send_s - time.perf_counter()))
        if turn.new_conversation:
            history = []
        sent_s = time.perf_counter() - start
        result = await stream(stub, generate_request(pb, args, chain, turn, history),
                              args.request_timeout_s)
        last_answer_s = time.perf_counter() - start
        result.update(sent_s=sent_s, lag_s=sent_s - turn.arrival_s, done_s=last_answer_s,
                      chain=index)
        results.append(result)
        if chain.chat and result["error"] is None:
            history = history + [("user", turn.text), ("assistant", result["text"])]


async def run_load(address, pb, args, chains):
    """Every chain at once; returns the per-request results."""
    results = []
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb["generation_pb2_grpc"].GenerationStub(channel)
        start = time.perf_counter()
        await asyncio.gather(*(run_chain(stub, pb, args, c, start, results, i)
                               for i, c in enumerate(chains)))
    return results


# ---------------------------------------------------------------------------------------------
# Report.

def percentile_ms(values, p):
    return float(np.percentile(values, p) * 1e3) if len(values) else None


def summarize(results):
    ok = [r for r in results if r["error"] is None]
    ttfts = [r["ttft_s"] for r in ok if r["ttft_s"] is not None]
    gaps = [g for r in ok for g in r["gaps_s"]]
    elapsed = (max(r["done_s"] for r in results) - min(r["sent_s"] for r in results)
               if results else 0.0)
    prompt_tokens = sum(r["prompt_tokens"] for r in ok)
    errors = {}
    for r in results:
        if r["error"] is not None:
            errors[r["error"]] = errors.get(r["error"], 0) + 1
    return {"requests": len(results), "failed": len(results) - len(ok), "errors": errors,
            "ttft_p50_ms": percentile_ms(ttfts, 50), "ttft_p90_ms": percentile_ms(ttfts, 90),
            "ttft_p99_ms": percentile_ms(ttfts, 99), "itl_p50_ms": percentile_ms(gaps, 50),
            "itl_p99_ms": percentile_ms(gaps, 99),
            "output_tok_s": sum(r["output_tokens"] for r in ok) / elapsed if elapsed else 0.0,
            "cache_hit_rate": (sum(r["cached_tokens"] for r in ok) / prompt_tokens
                               if prompt_tokens else 0.0),
            "mean_prompt_tokens": prompt_tokens / len(ok) if ok else 0.0,
            "elapsed_s": elapsed}


def fmt(value, digits=0):
    return "-" if value is None else f"{value:.{digits}f}"


def markdown_table(points):
    lines = ["| workload | rate/s | policy | requests | failed | TTFT p50 | p90 | p99 (ms) "
             "| ITL p50 | p99 (ms) | out tok/s | cache hit | prompt tok |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in points:
        s = p["summary"]
        lines.append(
            f"| {p['workload']} | {p['rate']:g} | {p['policy']} | {s['requests']} | "
            f"{s['failed']} | {fmt(s['ttft_p50_ms'])} | {fmt(s['ttft_p90_ms'])} | "
            f"{fmt(s['ttft_p99_ms'])} | {fmt(s['itl_p50_ms'], 1)} | {fmt(s['itl_p99_ms'], 1)} | "
            f"{fmt(s['output_tok_s'], 1)} | {s['cache_hit_rate']:.1%} | "
            f"{fmt(s['mean_prompt_tokens'])} |")
    return "\n".join(lines)


def ratio_lines(points):
    """kv_aware / round_robin everywhere both ran, kv_aware / least_loaded on no_sharing."""
    by_key = {(p["workload"], p["rate"], p["policy"]): p["summary"] for p in points}
    lines = []
    for (workload, rate, policy), kv in by_key.items():
        if policy != "kv_aware":
            continue
        for other in ("round_robin", "least_loaded"):
            base = by_key.get((workload, rate, other))
            if base is None or (other == "least_loaded" and workload != "no_sharing"):
                continue
            ttft = (kv["ttft_p90_ms"] / base["ttft_p90_ms"]
                    if kv["ttft_p90_ms"] and base["ttft_p90_ms"] else None)
            tput = kv["output_tok_s"] / base["output_tok_s"] if base["output_tok_s"] else None
            lines.append(f"{workload} @ {rate:g}/s: kv_aware / {other}: p90 TTFT x{fmt(ttft, 2)}"
                         f", throughput x{fmt(tput, 2)}, cache hit {kv['cache_hit_rate']:.1%} "
                         f"vs {base['cache_hit_rate']:.1%}")
    return lines


def plot(points, path):
    """Per workload: p90 TTFT and output tokens/s against the arrival rate, a line per policy;
    a workload run at one rate gets bars instead (TTFT p50 and p90 side by side)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(dict.fromkeys(p["workload"] for p in points))
    policies = list(dict.fromkeys(p["policy"] for p in points))
    figure, axes = plt.subplots(2, len(workloads), figsize=(5 * len(workloads), 7),
                                squeeze=False)
    for column, workload in enumerate(workloads):
        ttft, tput = axes[0][column], axes[1][column]
        mine = [p for p in points if p["workload"] == workload]
        rates = sorted({p["rate"] for p in mine})
        if len(rates) == 1:
            summaries = [next(p["summary"] for p in mine if p["policy"] == policy)
                         for policy in policies]
            x = np.arange(len(policies))
            ttft.bar(x - 0.2, [s["ttft_p50_ms"] for s in summaries], 0.4, label="p50")
            ttft.bar(x + 0.2, [s["ttft_p90_ms"] for s in summaries], 0.4, label="p90")
            tput.bar(x, [s["output_tok_s"] for s in summaries], 0.6)
            for axis in (ttft, tput):
                axis.set_xticks(x, policies)
            ttft.set_title(f"{workload} at {rates[0]:g} requests/s")
            ttft.set_ylabel("TTFT (ms)")
            ttft.legend()
        else:
            for policy in policies:
                line = sorted((p for p in mine if p["policy"] == policy), key=lambda p: p["rate"])
                ttft.plot([p["rate"] for p in line], [p["summary"]["ttft_p90_ms"] for p in line],
                          "o-", label=policy)
                tput.plot([p["rate"] for p in line], [p["summary"]["output_tok_s"] for p in line],
                          "o-", label=policy)
            ttft.set_title(workload)
            ttft.set_ylabel("p90 TTFT (ms)")
            tput.set_xlabel("arrival rate (requests/s)")
            ttft.legend()
            tput.legend()
        ttft.set_ylim(bottom=0)
        tput.set_ylim(bottom=0)
        tput.set_ylabel("output tokens/s")
        for axis in (ttft, tput):
            axis.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def smoke_verdict(points):
    """(passed, message): kv_aware's hit rate above round_robin's, and no request failed."""
    rates = {p["policy"]: p["summary"]["cache_hit_rate"] for p in points}
    failed = sum(p["summary"]["failed"] for p in points)
    passed = rates["kv_aware"] > rates["round_robin"] and failed == 0
    return passed, (f"smoke: multi_turn cache hit rate kv_aware {rates['kv_aware']:.1%} vs "
                    f"round_robin {rates['round_robin']:.1%}, {failed} failed request(s): "
                    + ("PASS" if passed else "FAIL"))


# ---------------------------------------------------------------------------------------------

def parse_args():
    def floats(text):
        return [float(x) for x in text.split(",")]

    def names(allowed):
        def parse(text):
            values = text.split(",")
            for value in values:
                if value not in allowed:
                    raise argparse.ArgumentTypeError(f"{value}: not one of {', '.join(allowed)}")
            return values
        return parse

    build = os.path.join(REPO, "build")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add = parser.add_argument
    add("--smoke", action="store_true", help="the short ctest run (overrides most flags)")
    add("--cluster", choices=("real", "simulated"), default="real")
    add("--worker", default=os.path.join(build, "worker", "kvserve-worker"))
    add("--router", default=os.path.join(build, "router", "kvserve-router"))
    add("--proto-root", dest="proto_root", default=os.path.join(REPO, "proto"))
    add("--model", default="", help="GGUF file (default: the binaries' default model)")
    add("--step_time_model", default=os.path.join(HERE, "step_time_h200_8b.json"),
        help="step-time JSON of simulated workers (bench/calibrate_step_time.py)")
    add("--workers", type=int, default=3)
    add("--worker_threads", type=int, default=1, help="--num_threads of each real worker")
    add("--kv_memory_bytes", type=int, default=96 << 20, help="each worker's KV pool")
    add("--worker_flags", default="", help="more kvserve-worker flags")
    add("--router_flags", default="", help="more kvserve-router flags")
    add("--policies", type=names(POLICIES), default=list(POLICIES))
    add("--workloads", type=names(WORKLOAD_NAMES), default=list(WORKLOAD_NAMES))
    add("--rates", type=floats, default=[0.25, 0.5, 1.0], help="arrivals per second")
    add("--requests", type=int, default=60, help="arrivals per run (at every rate)")
    add("--seed", type=int, default=1)
    add("--max_tokens", type=int, default=32, help="output tokens of every request")
    add("--request_timeout_s", type=float, default=600.0)
    add("--users", type=int, default=12)
    add("--groups", type=int, default=6)
    add("--system_words", type=int, default=800)
    add("--user_words", type=int, default=40)
    add("--max_turns", type=int, default=6)
    add("--think_s", type=float, default=2.0, help="mean think time between a user's turns")
    add("--docs", type=int, default=6)
    add("--doc_words", type=int, default=800)
    add("--question_words", type=int, default=30)
    add("--out", help="JSON results file")
    add("--plot", help="PNG file")
    add("--replot", help="a --out JSON file: only draw its --plot, run nothing")
    args = parser.parse_args()
    if args.smoke:
        for key, value in SMOKE.items():
            setattr(args, key, value)
    return args


def run(args):
    pb = lib.setup({"proto-root": args.proto_root})
    print(f"# {args.cluster} cluster: {args.workers} workers, KV {args.kv_memory_bytes >> 20} MiB "
          f"each; {os.cpu_count()} CPUs; seed {args.seed}", flush=True)
    points = []
    for workload in args.workloads:
        for rate in args.rates:
            chains = build_workload(args, workload, rate)
            for policy in args.policies:
                with Cluster(args, policy) as running:
                    results = asyncio.run(run_load(running.address, pb, args, chains))
                summary = summarize(results)
                points.append({"workload": workload, "rate": rate, "policy": policy,
                               "summary": summary, "requests": results})
                print(f"{workload} @ {rate:g}/s {policy}: {summary['requests']} requests, "
                      f"p90 TTFT {fmt(summary['ttft_p90_ms'])} ms, "
                      f"{summary['output_tok_s']:.1f} tok/s, "
                      f"hit {summary['cache_hit_rate']:.1%}, errors {summary['errors'] or 0}",
                      flush=True)
    return points


def main():
    args = parse_args()
    if args.replot:
        with open(args.replot) as f:
            plot(json.load(f)["points"], args.plot)
        return 0
    # A SIGTERM (ctest's timeout, a Ctrl-C'd shell) unwinds through the clusters' __exit__.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        points = run(args)
    finally:
        kvserve_e2e.cleanup()
    print()
    print(markdown_table(points))
    print()
    for line in ratio_lines(points):
        print(line)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"config": vars(args), "points": points}, f, indent=1)
    if args.plot:
        plot(points, args.plot)
    if args.smoke:
        passed, message = smoke_verdict(points)
        print(message)
        return 0 if passed else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
