"""End-to-end test that the router holds no thread per call: 200 concurrent Generate streams
through one router in front of one real worker with a small KV pool, so that at any moment a few
requests stream and the rest wait in the router's admission queue. The router's thread count
(/proc/<pid>/status) is sampled throughout; it must stay under a small bound (40) while every
stream completes, and the admission queue must really have held most of them.

  python3 router_threads_e2e_test.py --worker=build/worker/kvserve-worker \
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
NUM_STREAMS = 200
OUTPUT_TOKENS = 16
THREAD_BOUND = 40
# 16 MiB of KV: about 22 blocks of 16 tokens for SmolLM2-135M in fp32; each request takes 2.
POOL_ARGS = ["--kv_memory_bytes=16777216"]


def setUpModule():
    lib.setup(OPTIONS)


def tearDownModule():
    kvserve_e2e.cleanup()


def thread_count(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError(f"no Threads line for pid {pid}")


class RouterThreadsTest(unittest.TestCase):
    def test_concurrent_queued_and_streaming_calls_hold_no_thread_each(self):
        workers = lib.start_workers(OPTIONS, 1, POOL_ARGS)
        router = lib.start_router(OPTIONS, workers, ["--status_interval_ms=50"])
        pid = router.process.pid
        stub = lib.generation_stub(router.address)
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
            ids = [1000 + i, 2000 + i, 3000 + i, 4000 + i, 5000 + i, 6000 + i, 7000 + i, 8000 + i]
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


if __name__ == "__main__":
    unittest.main(argv=UNITTEST_ARGV)
