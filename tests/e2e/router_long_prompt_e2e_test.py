"""End-to-end test of long prompts on a slow worker: a router with a short
--stream_progress_timeout_s in front of one worker with one CPU thread. Prefilling a
multi-thousand-token prompt there takes many times the timeout, and a second long prompt waits in
the worker's queue behind it, yet neither stream is silent: the worker sends a progress report
after each engine step in which a request has no output, and the router counts it as progress
without forwarding it. Both requests must complete on their first worker (no migration, nothing
refused) with every token asked for.

  python3 router_long_prompt_e2e_test.py --worker=build/worker/kvserve-worker \
      --router=build/router/kvserve-router --proto-root=proto
"""

import random
import sys
import time
import unittest

import kvserve_e2e
import router_e2e_lib as lib

OPTIONS, UNITTEST_ARGV = kvserve_e2e.parse_args(sys.argv)
PROGRESS_TIMEOUT_S = 1
# Prompt tokens per step on the one-thread worker: each step must take well under the timeout,
# the whole prefill many times it.
CHUNK_TOKENS = 32
LONG_PROMPT_TOKENS = 2500
QUEUED_PROMPT_TOKENS = 600
OUTPUT_TOKENS = 12

setUpModule, tearDownModule = lib.module_fixtures(OPTIONS)


def prompt_ids(count, seed):
    """`count` ordinary token ids (no special tokens), different for each seed."""
    rng = random.Random(seed)
    return [rng.randrange(1000, 40000) for _ in range(count)]


class RouterLongPromptTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # lib.WORKER_ARGS: --num_threads=1; the later --max_num_batched_tokens wins.
        cls.workers = lib.start_workers(OPTIONS, 1, [f"--max_num_batched_tokens={CHUNK_TOKENS}"])
        cls.router = lib.start_router(OPTIONS, cls.workers, [
            f"--stream_progress_timeout_s={PROGRESS_TIMEOUT_S}", "--status_interval_ms=100"])
        cls.stub = lib.generation_stub(cls.router.address)

    def counter(self, name):
        return sum(self.router.series(name).values())

    def test_long_prompts_on_a_one_thread_worker_complete_without_migrating(self):
        migrations = self.counter("kvserve_router_migrations_total")
        rejected = self.counter("kvserve_router_requests_rejected_total")
        lengths = [LONG_PROMPT_TOKENS, QUEUED_PROMPT_TOKENS]
        requests = [lib.request(ids=prompt_ids(n, seed), temperature=0, max_tokens=OUTPUT_TOKENS,
                                ignore_eos=True) for seed, n in enumerate(lengths)]
        started = time.time()
        outputs, errors = lib.run_streams(self.stub, requests, 600, with_usage=True)
        elapsed = time.time() - started
        self.assertEqual(errors, [], self.router.log())
        print(f"{lengths} prompt tokens took {elapsed:.1f} s", file=sys.stderr)
        # Otherwise the test proves nothing: the prefill must outlast the timeout many times.
        self.assertGreater(elapsed, 5 * PROGRESS_TIMEOUT_S)
        for (tokens, _, usage), prompt_tokens in zip(outputs, lengths):
            self.assertEqual(len(tokens), OUTPUT_TOKENS)
            self.assertEqual(usage.prompt_tokens, prompt_tokens)
            self.assertEqual(usage.completion_tokens, OUTPUT_TOKENS)
        self.assertEqual(self.counter("kvserve_router_migrations_total"), migrations,
                         self.router.log())
        self.assertEqual(self.counter("kvserve_router_requests_rejected_total"), rejected)


if __name__ == "__main__":
    unittest.main(argv=UNITTEST_ARGV, verbosity=2)
