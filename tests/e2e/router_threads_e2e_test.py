"""End-to-end test that the router holds no thread per call: 200 concurrent Generate streams
through one router in front of one real worker with a small KV pool, so that at any moment a few
requests stream and the rest wait in the router's admission queue. The router's thread count
(/proc/<pid>/status) is sampled throughout; it must stay under a small bound (40) while every
stream completes, and the admission queue must really have held most of them. Then a storm of
calls that the client cancels or whose deadline passes, while queued or mid-stream, must leave
nothing behind: no waiter in the router's queue, no request or KV block held on the worker (no
orphan worker stream), and the router still serves.

  python3 router_threads_e2e_test.py --worker=build/worker/kvserve-worker \
      --router=build/router/kvserve-router --proto-root=proto
"""

import random
import sys
import threading
import time
import unittest

import grpc

import kvserve_e2e
import router_e2e_lib as lib

OPTIONS, UNITTEST_ARGV = kvserve_e2e.parse_args(sys.argv)
NUM_STREAMS = 200
OUTPUT_TOKENS = 16
THREAD_BOUND = 40
# 16 MiB of KV: about 22 blocks of 16 tokens for SmolLM2-135M in fp32; each request takes 2.
POOL_ARGS = ["--kv_memory_bytes=16777216"]


setUpModule, tearDownModule = lib.module_fixtures(OPTIONS)


def thread_count(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError(f"no Threads line for pid {pid}")


def prompt_ids(i):
    return [1000 + i, 2000 + i, 3000 + i, 4000 + i, 5000 + i, 6000 + i, 7000 + i, 8000 + i]


class RouterThreadsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.workers = lib.start_workers(OPTIONS, 1, POOL_ARGS)
        cls.router = lib.start_router(OPTIONS, cls.workers, ["--status_interval_ms=50"])
        cls.stub = lib.generation_stub(cls.router.address)

    def test_concurrent_queued_and_streaming_calls_hold_no_thread_each(self):
        router, stub = self.router, self.stub
        pid = router.process.pid
        # Warm up one call so that lazily started threads exist before the baseline.
        lib.collect(stub.Generate(lib.request(ids=[100, 200, 300], temperature=0,
                                              max_tokens=2, ignore_eos=True), timeout=120))
        idle_threads = thread_count(pid)

        samples = {"threads": 0, "queue": 0.0}
        done = threading.Event()

        def sample():
            while not done.is_set():
                samples["threads"] = max(samples["threads"], thread_count(pid))
                depth = router.series("kvserve_router_queue_depth").get("", 0.0)
                samples["queue"] = max(samples["queue"], depth)
                time.sleep(0.02)

        results, errors = {}, {}

        def run(i):
            ids = prompt_ids(i)
            try:
                tokens, _, _, usage = lib.collect(stub.Generate(
                    lib.request(ids=ids, temperature=0, max_tokens=OUTPUT_TOKENS,
                                ignore_eos=True), timeout=300))
                results[i] = (len(tokens), usage.completion_tokens if usage else None)
            except grpc.RpcError as e:
                errors[i] = f"{e.code().name}: {e.details()}"

        sampler = threading.Thread(target=sample)
        sampler.start()
        clients = [threading.Thread(target=run, args=(i,)) for i in range(NUM_STREAMS)]
        start = time.time()
        for client in clients:
            client.start()
        for client in clients:
            client.join()
        done.set()
        sampler.join()
        elapsed = time.time() - start

        print(f"router threads: idle {idle_threads}, max {samples['threads']} during "
              f"{NUM_STREAMS} concurrent streams (max queue depth {samples['queue']:.0f}, "
              f"{elapsed:.1f} s)", file=sys.stderr)
        self.assertEqual(errors, {})
        self.assertEqual(len(results), NUM_STREAMS)
        for i, (tokens, completion) in results.items():
            self.assertEqual((tokens, completion), (OUTPUT_TOKENS, OUTPUT_TOKENS), i)
        self.assertGreater(samples["queue"], NUM_STREAMS / 2,
                           "most requests should have waited in the router's queue")
        self.assertLessEqual(samples["threads"], THREAD_BOUND, router.log())

    def test_cancelled_and_expired_calls_leave_nothing_behind(self):
        seed = random.randrange(1 << 30)
        print(f"seed {seed}", file=sys.stderr)
        rng = random.Random(seed)
        plans = [(i % 3, rng.uniform(0.05, 1.5)) for i in range(120)]
        outcomes = {}

        def run(i, kind, delay_s):
            request = lib.request(ids=prompt_ids(500 + i), temperature=0,
                                  max_tokens=OUTPUT_TOKENS, ignore_eos=True)
            try:
                if kind == 0:  # the client cancels, queued or mid-stream
                    stream = self.stub.Generate(request, timeout=300)
                    threading.Timer(delay_s, stream.cancel).start()
                    lib.collect(stream)
                elif kind == 1:  # its deadline passes
                    lib.collect(self.stub.Generate(request, timeout=delay_s))
                else:
                    lib.collect(self.stub.Generate(request, timeout=300))
                outcomes[i] = "OK"
            except grpc.RpcError as e:
                outcomes[i] = e.code().name

        clients = [threading.Thread(target=run, args=(i, kind, delay))
                   for i, (kind, delay) in enumerate(plans)]
        for client in clients:
            client.start()
        for client in clients:
            client.join()
        for i, (kind, _) in enumerate(plans):
            allowed = {0: {"CANCELLED", "OK"}, 1: {"DEADLINE_EXCEEDED", "OK"}, 2: {"OK"}}[kind]
            self.assertIn(outcomes[i], allowed, f"call {i} (seed {seed})")
        print("outcomes: " + ", ".join(f"{code} {list(outcomes.values()).count(code)}"
                                       for code in sorted(set(outcomes.values()))),
              file=sys.stderr)

        worker = self.workers[0]
        deadline = time.time() + 30
        while time.time() < deadline:
            held = [worker.metric(name) for name in
                    ("kvserve_requests_running", "kvserve_requests_waiting",
                     "kvserve_kv_blocks_used")]
            if held == [0, 0, 0]:
                break
            time.sleep(0.1)
        self.assertEqual(held, [0, 0, 0], "the worker still runs requests nobody waits for")
        self.assertEqual(self.router.series("kvserve_router_queue_depth").get(""), 0)
        tokens, _, _, _ = lib.collect(self.stub.Generate(
            lib.request(ids=prompt_ids(999), temperature=0, max_tokens=4, ignore_eos=True),
            timeout=60))
        self.assertEqual(len(tokens), 4)


if __name__ == "__main__":
    unittest.main(argv=UNITTEST_ARGV)
