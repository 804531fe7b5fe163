"""End-to-end test of capacity-aware routing: two real workers with tiny KV pools behind one
router whose admission queue holds one request. A request that fills one worker's pool sends
the next to the other worker; with both full the next waits in the queue and is served when a
worker frees its blocks; one more is refused with RESOURCE_EXHAUSTED; a waiter whose deadline
passes leaves the queue with DEADLINE_EXCEEDED; and a request larger than any pool is refused at
once.

  python3 router_capacity_e2e_test.py --worker=build/worker/kvserve-worker \
      --router=build/router/kvserve-router --proto-root=proto
"""

import sys
import threading
import time
import unittest

import grpc

import kvserve_e2e
import router_e2e_lib as lib

OPTIONS, UNITTEST_ARGV = kvserve_e2e.parse_args(sys.argv)
# 8 MiB of KV: about 11 blocks of 16 tokens for SmolLM2-135M in fp32.
POOL_ARGS = ["--kv_memory_bytes=8388608"]
OUTPUT_TOKENS = 40


setUpModule, tearDownModule = lib.module_fixtures(OPTIONS)


class RouterCapacityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.workers = lib.start_workers(OPTIONS, 2, POOL_ARGS)
        cls.router = lib.start_router(OPTIONS, cls.workers,
                                      ["--max_queue=1", "--status_interval_ms=50"])
        cls.stub = lib.generation_stub(cls.router.address)
        cls.total_blocks = int(cls.router.worker_gauge("kvserve_router_worker_total_blocks",
                                                       cls.workers[0]))
        print(f"pool: {cls.total_blocks} blocks per worker", file=sys.stderr)

    def big_request(self, first_token):
        """A prompt of (total - 4) full blocks, distinct from every other by its first token, and
        OUTPUT_TOKENS more: it needs total - 1 blocks, and once prefilled it leaves 3 free."""
        prompt_len = 16 * (self.total_blocks - 4)
        ids = [first_token] + [(first_token * 7 + i) % 40000 + 100 for i in range(prompt_len - 1)]
        return lib.request(ids=ids, temperature=0, max_tokens=OUTPUT_TOKENS, ignore_eos=True)

    def routed(self):
        series = self.router.series("kvserve_router_requests_routed_total")
        return [series.get(f'{{worker="{w.address}"}}', 0.0) for w in self.workers]

    def test_full_worker_sends_to_the_other_then_queue_then_refuse(self):
        self.assertGreater(self.total_blocks, 6)
        results, errors, first_tokens = {}, {}, {}

        def run(name, first_token):
            try:
                stream = self.stub.Generate(self.big_request(first_token), timeout=600)
                for response in stream:
                    if response.choices and name not in first_tokens:
                        first_tokens[name] = time.time()
                    results.setdefault(name, []).extend(
                        t for d in response.choices for t in d.token_ids)
            except grpc.RpcError as error:
                errors[name] = error.code()

        # Each next request starts as soon as the router has routed (and reserved blocks for)
        # the previous one, not when it streams: a and b must both still hold their pools when
        # c arrives, however fast the workers decode.
        threads = {}
        for count, (name, token) in enumerate((("a", 1001), ("b", 1002)), start=1):
            threads[name] = threading.Thread(target=run, args=(name, token))
            threads[name].start()
            deadline = time.time() + 120
            while sum(self.routed()) < count and name not in errors and time.time() < deadline:
                time.sleep(0.005)
        self.assertEqual(errors, {})
        self.assertEqual(sorted(self.routed()), [1.0, 1.0], "a and b must use different workers")

        threads["c"] = threading.Thread(target=run, args=("c", 1003))
        threads["c"].start()
        deadline = time.time() + 30
        while self.router.series("kvserve_router_queue_depth").get("", 0) < 1:
            self.assertLess(time.time(), deadline, "c never waited in the queue")
            self.assertNotIn("c", first_tokens, "c ran although both pools were full")
            time.sleep(0.02)
        run("d", 1004)  # the queue holds c: d is refused at once
        self.assertEqual(errors.get("d"), grpc.StatusCode.RESOURCE_EXHAUSTED)

        for thread in threads.values():
            thread.join()
        self.assertNotIn("c", errors)
        for name in "abc":
            self.assertEqual(len(results[name]), OUTPUT_TOKENS, name)
        self.assertGreater(first_tokens["c"], min(first_tokens["a"], first_tokens["b"]))
        rejected = self.router.series("kvserve_router_requests_rejected_total")
        self.assertGreaterEqual(rejected.get('{reason="queue_full"}', 0), 1)
        waits = self.router.series("kvserve_router_queue_wait_seconds_count")
        self.assertGreaterEqual(waits.get("", 0), 1)

    def test_queued_request_past_its_deadline_is_refused_and_leaves_the_queue(self):
        first_tokens, threads = {}, []

        def run(first_token):
            for response in self.stub.Generate(self.big_request(first_token), timeout=600):
                if response.choices:
                    first_tokens.setdefault(first_token, time.time())

        routed_before = sum(self.routed())
        for count, token in enumerate((2001, 2002), start=1):  # fill both pools
            threads.append(threading.Thread(target=run, args=(token,)))
            threads[-1].start()
            deadline = time.time() + 120
            while sum(self.routed()) < routed_before + count and time.time() < deadline:
                time.sleep(0.005)
        def expired():  # the client's cancel at its deadline may reach the router first
            rejected = self.router.series("kvserve_router_requests_rejected_total")
            return (rejected.get('{reason="deadline"}', 0) +
                    rejected.get('{reason="cancelled"}', 0))

        before = expired()
        # The deadline must pass while both fillers still run (each was just routed: its
        # prefill and OUTPUT_TOKENS of decode are ahead), so that the request expires in the
        # queue rather than after admission.
        with self.assertRaises(grpc.RpcError) as raised:
            lib.collect(self.stub.Generate(self.big_request(2003), timeout=0.25))
        self.assertEqual(raised.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        deadline = time.time() + 10
        while (self.router.series("kvserve_router_queue_depth").get("", 0) != 0 or
               expired() < before + 1):
            self.assertLess(time.time(), deadline, "the expired waiter stayed in the queue: " + str(
                (self.router.series("kvserve_router_queue_depth"),
                 self.router.series("kvserve_router_requests_rejected_total"),
                 self.router.series("kvserve_router_queue_wait_seconds_count"))))
            time.sleep(0.05)
        for thread in threads:
            thread.join()

    def test_request_larger_than_any_pool_is_refused_at_once(self):
        # A prompt of total - 2 blocks leaves 2 blocks of context (max_tokens is capped at the
        # pool-limited context length, kvcache/kv_budget.h); two choices need 2 each: total + 2.
        ids = list(range(100, 100 + 16 * (self.total_blocks - 2)))
        started = time.time()
        with self.assertRaises(grpc.RpcError) as raised:
            lib.collect(self.stub.Generate(
                lib.request(ids=ids, temperature=0, max_tokens=16 * 4, n=2), timeout=60))
        self.assertEqual(raised.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("pool", raised.exception.details())
        self.assertLess(time.time() - started, 5)


if __name__ == "__main__":
    unittest.main(argv=UNITTEST_ARGV, verbosity=2)
