"""End-to-end test of migration: 16 streams run through the router on two real workers, and one
worker is killed with SIGKILL while they run. Every stream must complete, and each stream's
tokens and text must equal those of an undisturbed run of the same requests: greedy ones,
sampled ones with a fixed seed, and sampled ones constrained to a JSON schema (the new worker
replays the generated tokens into its grammar matcher, so the constraint resumes where it was),
and streams that asked for prompt logprobs get them exactly once. A request without a seed also completes (the router fixed its
seed before the first dispatch), and when the last worker dies too, the stream ends with
UNAVAILABLE (the tokens already sent stand; never OK with FINISH_REASON_ABORT).

  python3 router_fault_e2e_test.py --worker=build/worker/kvserve-worker \
      --router=build/router/kvserve-router --proto-root=proto
"""

import signal
import sys
import time
import unittest

import grpc

import kvserve_e2e
import router_e2e_lib as lib

OPTIONS, UNITTEST_ARGV = kvserve_e2e.parse_args(sys.argv)
NUM_STREAMS = 16
OUTPUT_TOKENS = 32


setUpModule, tearDownModule = lib.module_fixtures(OPTIONS)


# Long enough that OUTPUT_TOKENS usually ends it first, so migration lands mid-document.
STORY_SCHEMA = ('{"type": "object", "properties": {"title": {"type": "string"}, '
                '"characters": {"type": "array", "items": {"type": "string"}}, '
                '"moral": {"type": "string"}}, "required": ["title", "characters", "moral"]}')


def constrained(i):
    """Streams 3, 7, 11 and 15 (seeded, sampled) are constrained to STORY_SCHEMA."""
    return i % 4 == 3


def requests():
    """8 greedy and 8 seeded sampled requests, each with its own prompt; 4 of the sampled ones
    constrained to a JSON schema (which may end them before OUTPUT_TOKENS: no ignore_eos)."""
    prompts = [f"Story number {i}: once upon a time, in a village by the sea,"
               for i in range(NUM_STREAMS)]
    result = lib.greedy_and_seeded_requests(prompts, OUTPUT_TOKENS, 1000, temperature=0.9,
                                            top_p=0.95)
    for i, request in enumerate(result):
        if i % 4 == 1:  # prompt logprobs reach the client once, also across the migration
            request.sampling.prompt_logprobs = 1
        if constrained(i):
            request.sampling.ignore_eos = False
            request.sampling.structured_output.json_schema = STORY_SCHEMA
    return result


class RouterFaultTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.workers = lib.start_workers(OPTIONS, 2)
        cls.router = lib.start_router(OPTIONS, cls.workers,
                                      ["--max_migrations=2", "--status_interval_ms=100"])
        cls.stub = lib.generation_stub(cls.router.address)

    def run_all(self, on_progress=None):
        """Runs every request at once; returns [(tokens, text)] in request order. on_progress
        gets the token counts so far after every message."""
        outputs, errors = lib.run_streams(self.stub, requests(), 600, on_progress)
        self.assertEqual(errors, [])
        return outputs

    def test_kill_one_worker_mid_stream_loses_nothing(self):
        undisturbed = self.run_all()
        for i, (tokens, text) in enumerate(undisturbed):
            if constrained(i):
                self.assertGreater(len(tokens), 0)
                self.assertLessEqual(len(tokens), OUTPUT_TOKENS)
                self.assertTrue(text.lstrip().startswith("{"), text)
                self.assertIn('"title"', text)
            else:
                self.assertEqual(len(tokens), OUTPUT_TOKENS)

        routed = self.router.series("kvserve_router_requests_routed_total")
        killed = []

        def kill_when_running(counts):
            # Once at least half the streams have output and none is near its end, kill the
            # worker that serves most of them (both serve some: the router spreads the load).
            # Not "every stream": with a fast decode the first streams can be well ahead of
            # the last ones admitted.
            started = sum(1 for count in counts if count >= 2)
            if killed or started < NUM_STREAMS // 2 or max(counts) >= OUTPUT_TOKENS - 4:
                return
            now = self.router.series("kvserve_router_requests_routed_total")
            load = [now.get(f'{{worker="{w.address}"}}', 0) -
                    routed.get(f'{{worker="{w.address}"}}', 0) for w in self.workers]
            victim = self.workers[load.index(max(load))]
            victim.process.send_signal(signal.SIGKILL)
            killed.append((victim, load))

        disturbed = self.run_all(kill_when_running)
        self.assertTrue(killed, "the worker was never killed: streams finished too fast")
        print(f"killed {killed[0][0].address}, routed before the kill: {killed[0][1]}",
              file=sys.stderr)
        lib.assert_same_streams(self, disturbed, undisturbed)
        migrations = self.router.series("kvserve_router_migrations_total").get("", 0)
        self.assertGreaterEqual(migrations, 1)

        # A request without a seed still completes on the surviving worker.
        tokens, _, _, usage = lib.collect(self.stub.Generate(
            lib.request("After the storm,", temperature=1.0, max_tokens=8, ignore_eos=True),
            timeout=120))
        self.assertEqual(len(tokens), 8)
        self.assertEqual(usage.completion_tokens, 8)

        # Kill the last worker mid-stream: nobody can continue, so the request cannot be completed
        # and ends with UNAVAILABLE; the tokens already sent stand, no choice says ABORT.
        survivor = next(w for w in self.workers if w is not killed[0][0])
        stream = self.stub.Generate(lib.request("A very long tale:", temperature=0,
                                                max_tokens=400, ignore_eos=True), timeout=300)
        first = next(stream)
        survivor.process.send_signal(signal.SIGKILL)
        responses = [first]
        with self.assertRaises(grpc.RpcError) as raised:
            for response in stream:
                responses.append(response)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAVAILABLE,
                         raised.exception.details())
        tokens, _, reasons, usage = lib.collect(responses)
        self.assertEqual(reasons, [])
        self.assertIsNone(usage)
        self.assertGreater(len(tokens), 0)
        self.assertLess(len(tokens), 400)


if __name__ == "__main__":
    unittest.main(argv=UNITTEST_ARGV, verbosity=2)
