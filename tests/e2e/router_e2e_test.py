"""End-to-end tests of kvserve-router in front of two real kvserve-worker processes (default
model, loopback, every port chosen by its process and read from its output): prefix-aware and
load-spreading routing, capacity-aware routing with queueing and RESOURCE_EXHAUSTED, cancel and
deadline propagation (blocks freed on the worker), two router replicas agreeing on capacity,
DNS discovery, locally served Tokenize / GetModelInfo / health, RouterAdmin.ListWorkers and
`kvserve-cli workers --target=ROUTER`, and start-up flag errors.

  python3 router_e2e_test.py --worker=build/worker/kvserve-worker \
      --router=build/router/kvserve-router --cli=build/tools/kvserve-cli --proto-root=proto
"""

import subprocess
import sys
import threading
import time
import unittest

import grpc

import kvserve_e2e
import router_e2e_lib as lib

OPTIONS, UNITTEST_ARGV = kvserve_e2e.parse_args(sys.argv)
STATUS_INTERVAL_MS = 100
# About 200 prompt tokens shared by the prefix tests (a dozen blocks of 16): long enough that the
# prefill it saves outweighs the load terms of the routing cost (docs/routing.md), even when the
# router's last report from the holder still counts a request that just finished.
SHARED_PREFIX = ("You are a meticulous assistant for a library catalogue. Every answer cites the "
                 "shelf, the row and the call number of each book, uses British spelling, and "
                 "never invents a title that the catalogue does not list. The library has three "
                 "floors: fiction on the ground floor, sorted by the author's surname; history, "
                 "science and philosophy on the first floor, sorted by subject code; and rare "
                 "books on the second floor, which readers may consult only in the reading room "
                 "and only with a librarian present. Opening hours are nine to five on weekdays "
                 "and ten to one on Saturdays; the library is closed on Sundays and on public "
                 "holidays. Members may borrow six books at a time for three weeks each. Keep "
                 "answers short and end each one with the word 'Catalogue'. Question: ")


setUpModule, tearDownModule = lib.module_fixtures(OPTIONS)


class RouterRoutingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.workers = lib.start_workers(OPTIONS, 2)
        cls.router = lib.start_router(OPTIONS, cls.workers,
                                      [f"--status_interval_ms={STATUS_INTERVAL_MS}"])
        cls.stub = lib.generation_stub(cls.router.address)

    def routed(self):
        series = self.router.series("kvserve_router_requests_routed_total")
        return [series.get(f'{{worker="{w.address}"}}', 0.0) for w in self.workers]

    def test_health_model_info_and_tokenize_are_served(self):
        health = lib.PB["health_pb2_grpc"].HealthStub(grpc.insecure_channel(self.router.address))
        self.assertEqual(health.Check(lib.PB["health_pb2"].HealthCheckRequest(), timeout=10).status,
                         lib.PB["health_pb2"].HealthCheckResponse.SERVING)
        info = self.stub.GetModelInfo(lib.PB["generation_pb2"].GetModelInfoRequest(), timeout=10)
        self.assertEqual(info.vocab_size, 49152)
        self.assertEqual(info.kv_block_size, 16)
        ids = self.stub.Tokenize(lib.PB["generation_pb2"].TokenizeRequest(prompt="Hello world"),
                                 timeout=10).token_ids
        text = self.stub.Detokenize(lib.PB["generation_pb2"].DetokenizeRequest(token_ids=ids),
                                    timeout=10).text
        self.assertEqual(text, "Hello world")

    def test_router_lists_its_workers_and_the_cli_prints_them(self):
        admin_pb2 = lib.PB["router_admin_pb2"]
        admin = lib.PB["router_admin_pb2_grpc"].RouterAdminStub(
            grpc.insecure_channel(self.router.address))
        listed = admin.ListWorkers(admin_pb2.ListWorkersRequest(), timeout=10).workers
        self.assertEqual([w.address for w in listed], sorted(w.address for w in self.workers))
        for info, worker in zip(listed, sorted(self.workers, key=lambda w: w.address)):
            self.assertEqual(info.health, admin_pb2.WORKER_HEALTH_HEALTHY)
            self.assertFalse(info.failed)
            self.assertTrue(info.capacity_known)
            self.assertTrue(info.id, "the worker's own id")
            self.assertEqual(info.block_size, 16)
            self.assertEqual(info.total_blocks,
                             self.router.worker_gauge("kvserve_router_worker_total_blocks", worker))
            self.assertGreater(info.free_blocks, 0)
            self.assertLessEqual(info.free_blocks, info.total_blocks)
        # kvserve-cli workers needs only the router's address.
        result = subprocess.run([OPTIONS["cli"], "workers", f"--target={self.router.address}"],
                                capture_output=True, text=True, timeout=60, check=False)
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = result.stdout.splitlines()
        self.assertEqual(len(rows), 1 + len(self.workers), result.stdout)
        for worker in self.workers:
            self.assertTrue(any(row.startswith(worker.address) and " healthy " in row
                                for row in rows), result.stdout)

    def test_streams_text_through_the_router(self):
        stream = self.stub.Generate(lib.request("The capital of France is", temperature=0,
                                                max_tokens=6, ignore_eos=True), timeout=120)
        tokens, text, reasons, usage = lib.collect(stream)
        self.assertEqual(len(tokens), 6)
        self.assertIn("Paris", text)
        self.assertEqual(usage.completion_tokens, 6)
        self.assertEqual(reasons, [lib.PB["output_pb2"].FINISH_REASON_LENGTH])

    def test_shared_prefix_goes_to_the_worker_holding_it(self):
        prefix_ids = self.stub.Tokenize(lib.PB["generation_pb2"].TokenizeRequest(
            prompt=SHARED_PREFIX), timeout=10).token_ids
        # The last prefix token may merge with the question's first one.
        shared_blocks = (len(prefix_ids) - 1) // 16
        self.assertGreaterEqual(shared_blocks, 8)
        before = self.routed()
        lib.collect(self.stub.Generate(lib.request(SHARED_PREFIX + "Where is Dune?",
                                                   temperature=0, max_tokens=2), timeout=120))
        first = [a - b for a, b in zip(self.routed(), before)]
        holder = first.index(1)
        # Wait until the router's index shows the holder's new blocks (next status report).
        deadline = time.time() + 10
        while time.time() < deadline and (self.router.worker_gauge(
                "kvserve_router_worker_cached_blocks", self.workers[holder]) or 0) < shared_blocks:
            time.sleep(0.05)
        for question in ("Where is Emma?", "Where is Ulysses?", "Where is Beloved?"):
            _, _, _, usage = lib.collect(self.stub.Generate(
                lib.request(SHARED_PREFIX + question, temperature=0, max_tokens=2), timeout=120))
            self.assertGreaterEqual(usage.cached_prompt_tokens, shared_blocks * 16, question)
        after = [a - b for a, b in zip(self.routed(), before)]
        self.assertEqual(after[holder], 4, f"routed per worker: {after}")
        self.assertEqual(after[1 - holder], 0, f"routed per worker: {after}")

    def test_unrelated_concurrent_requests_spread_across_workers(self):
        before = self.routed()
        prompts = ["Tell me about volcanoes.", "List some prime numbers:",
                   "Describe a sunny beach.", "Why is the sky blue?"]
        threads = [threading.Thread(target=lambda p=p: lib.collect(self.stub.Generate(
            lib.request(p, temperature=0, max_tokens=12, ignore_eos=True), timeout=300)))
            for p in prompts]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        spread = [a - b for a, b in zip(self.routed(), before)]
        self.assertEqual(sum(spread), 4)
        self.assertGreaterEqual(min(spread), 1, f"routed per worker: {spread}")

    def test_cancel_through_the_router_frees_the_workers_blocks(self):
        stream = self.stub.Generate(lib.request("Write a long story about a dragon.",
                                                temperature=0, max_tokens=400, ignore_eos=True),
                                    timeout=300)
        next(stream)
        next(stream)
        self.assertGreater(sum(w.metric("kvserve_kv_blocks_used") for w in self.workers), 0)
        stream.cancel()
        with self.assertRaises(grpc.RpcError) as raised:
            for _ in stream:
                pass
        self.assertEqual(raised.exception.code(), grpc.StatusCode.CANCELLED)
        for worker in self.workers:
            worker.wait_metric("kvserve_kv_blocks_used", lambda v: v == 0)
            worker.wait_metric("kvserve_requests_running", lambda v: v == 0)

    def test_deadline_propagates_to_the_worker(self):
        cancelled = sum(w.metric('kvserve_requests_finished_total{reason="cancelled"}')
                        for w in self.workers)
        # 4,000 tokens: a one-thread worker decodes ~150-200 tokens/s, so they take far longer
        # than the deadline (400 tokens came within a second of it once decode got faster).
        stream = self.stub.Generate(lib.request("Count from one to a thousand:", temperature=0,
                                                max_tokens=4000, ignore_eos=True), timeout=2)
        with self.assertRaises(grpc.RpcError) as raised:
            for _ in stream:
                pass
        self.assertEqual(raised.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        deadline = time.time() + 30
        while time.time() < deadline and sum(
                w.metric('kvserve_requests_finished_total{reason="cancelled"}')
                for w in self.workers) < cancelled + 1:
            time.sleep(0.05)
        for worker in self.workers:
            worker.wait_metric("kvserve_kv_blocks_used", lambda v: v == 0)

    def test_two_replicas_agree_on_every_workers_capacity(self):
        second = lib.start_router(OPTIONS, self.workers,
                                  [f"--status_interval_ms={STATUS_INTERVAL_MS}"])
        try:
            stub = lib.generation_stub(second.address)
            gauges = ["kvserve_router_worker_total_blocks", "kvserve_router_worker_free_blocks",
                      "kvserve_router_worker_evictable_blocks",
                      "kvserve_router_worker_cached_blocks"]
            for i in range(3):
                lib.collect(stub.Generate(lib.request(f"Replica check {i}: say hello",
                                                      temperature=0, max_tokens=3), timeout=120))
                time.sleep(2 * STATUS_INTERVAL_MS / 1000)  # one interval, plus the report's trip
                for name in gauges:
                    for worker in self.workers:
                        self.assertEqual(self.router.worker_gauge(name, worker),
                                         second.worker_gauge(name, worker), name)
        finally:
            self.assertEqual(second.terminate(), 0)

    def test_dns_discovery_finds_the_worker(self):
        worker = self.workers[0]
        router = lib.start_router(OPTIONS, [worker], ["--dns_refresh_s=1"],
                                  workers_flag=f"--workers_dns=localhost:{worker.grpc_port}")
        try:
            self.assertIn(f"kvserve-router worker_added={worker.address}", router.output)
            tokens, _, _, _ = lib.collect(lib.generation_stub(router.address).Generate(
                lib.request("Hello", temperature=0, max_tokens=2, ignore_eos=True), timeout=120))
            self.assertEqual(len(tokens), 2)
        finally:
            self.assertEqual(router.terminate(), 0)

    def test_invalid_flags_fail_naming_the_flag(self):
        cases = [(["--workers=127.0.0.1:1", "--max_migrations=-1"], "--max_migrations"),
                 ([], "--workers"),
                 (["--workers=nonsense"], "--workers"),
                 (["--workers=127.0.0.1:1", "--tls_cert=/nonexistent"], "--tls_key"),
                 (["--workers=127.0.0.1:1", "--auth_tokens_file=/nonexistent"],
                  "--auth_tokens_file")]
        for args, flag in cases:
            result = subprocess.run([OPTIONS["router"], "--listen=127.0.0.1:0",
                                     "--metrics_listen=127.0.0.1:0", *args],
                                    capture_output=True, text=True, timeout=60)
            self.assertEqual(result.returncode, 1, args)
            self.assertIn(flag, result.stderr, args)


if __name__ == "__main__":
    unittest.main(argv=UNITTEST_ARGV, verbosity=2)
