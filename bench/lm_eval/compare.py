#!/usr/bin/env python3
"""Checks that lm-evaluation-harness scored a served kvserve model exactly as kvserve's own
offline computation scores the same texts.

lm-eval's `local-completions` model scores a loglikelihood request (context, continuation) with
one /v1/completions call (echo, logprobs, max_tokens 1) and sums the continuation tokens'
logprobs. This script reads the per-request log-likelihoods lm-eval logged (--log_samples),
scores the same (context, continuation) pairs offline with `kvserve-generate --score_jsonl`
(the serving engine in-process, no server: prompt logprobs of context + continuation), and
compares them: every log-likelihood within --tolerance and every is_greedy equal, else exit 1.

  python3 bench/lm_eval/compare.py --samples 'out/**/samples_kvserve_tiny_mc_*.jsonl' \
      --generate build/tools/kvserve-generate [--model PATH]

The exact lm-eval command and the figures it gave are in docs/api.md ("Evaluation harnesses").
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile


def requests_of(sample):
    """(context, continuation, loglikelihood, is_greedy) of each request of one logged sample."""
    arguments = sample["arguments"]
    if isinstance(arguments, dict):  # {"gen_args_0": {"arg_0": context, "arg_1": ...}, ...}
        arguments = [[args["arg_0"], args["arg_1"]] for args in arguments.values()]
    out = []
    for (context, continuation), response in zip(arguments, sample["resps"]):
        loglikelihood, is_greedy = response[0]  # logged as strings ("-0.25", "True")
        out.append((context, continuation, float(loglikelihood), str(is_greedy) == "True"))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", required=True, help="glob of lm-eval samples_*.jsonl files")
    parser.add_argument("--generate", required=True, help="the kvserve-generate binary")
    parser.add_argument("--model", default="", help="the model the server ran (default: its)")
    parser.add_argument("--tolerance", type=float, default=1e-3,
                        help="largest absolute difference of a log-likelihood (nats)")
    args = parser.parse_args()

    files = sorted(glob.glob(args.samples, recursive=True))
    if not files:
        sys.exit(f"no samples file matches {args.samples}")
    served = []
    for path in files:
        with open(path) as f:
            for line in f:
                if line.strip():
                    served.extend(requests_of(json.loads(line)))

    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as pairs:
        for context, continuation, _, _ in served:
            pairs.write(json.dumps({"context": context, "continuation": continuation}) + "\n")
    try:
        command = [args.generate, f"--score_jsonl={pairs.name}"]
        if args.model:
            command.append(f"--model={args.model}")
        run = subprocess.run(command, capture_output=True, text=True, check=False)
    finally:
        os.unlink(pairs.name)
    if run.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{run.stderr}")
    offline = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    if len(offline) != len(served):
        sys.exit(f"{len(served)} requests served but {len(offline)} scored offline")

    worst = 0.0
    failures = 0
    for (context, continuation, loglikelihood, is_greedy), mine in zip(served, offline):
        diff = abs(loglikelihood - mine["logprob"])
        worst = max(worst, diff)
        if diff > args.tolerance or is_greedy != mine["is_greedy"]:
            failures += 1
            print(f"MISMATCH {context!r} + {continuation!r}: lm-eval {loglikelihood:.6f} "
                  f"greedy={is_greedy}, offline {mine['logprob']:.6f} "
                  f"greedy={mine['is_greedy']}")
    total = sum(item[2] for item in served)
    print(f"{len(served)} requests from {len(files)} samples file(s): "
          f"max |lm-eval - offline| = {worst:.2e} nats (tolerance {args.tolerance:g}), "
          f"sum of log-likelihoods {total:.4f}, {failures} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
