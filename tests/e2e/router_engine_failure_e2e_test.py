"""End-to-end test of a failed engine: two real workers behind a router, one started with the
testing aid --fault_fail_step (its model runner returns an error from that engine step on).
Its in-flight requests end with INTERNAL on the worker; the router treats that as a worker
failure and migrates them, so every client stream completes with the text of an undisturbed run.
The failed worker's health turns NOT_SERVING, its status stream says `failed`, the router marks
it unhealthy, and every later request goes to the healthy worker.

  python3 router_engine_failure_e2e_test.py --worker=build/worker/kvserve-worker \
      --router=build/router/kvserve-router --proto-root=proto
"""

import sys
import time
import unittest

import grpc

import kvserve_e2e
import router_e2e_lib as lib

OPTIONS, UNITTEST_ARGV = kvserve_e2e.parse_args(sys.argv)
NUM_STREAMS = 4
OUTPUT_TOKENS = 24
# Far enough in that the faulty worker has prefilled and started decoding its streams, early
# enough that none of them has finished (each step decodes one token of every running stream).
FAIL_STEP = 8


setUpModule, tearDownModule = lib.module_fixtures(OPTIONS)


def requests():
    return [lib.request(f"Report number {i}: the harbour at dawn was", temperature=0,
                        max_tokens=OUTPUT_TOKENS, ignore_eos=True) for i in range(NUM_STREAMS)]


def run_all(stub):
    """[(tokens, text, usage)] in request order, and [(stream index, exception)]."""
    return lib.run_streams(stub, requests(), 300, with_usage=True)


class RouterEngineFailureTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.healthy = lib.start_workers(OPTIONS, 1)[0]
        cls.faulty = lib.start_workers(OPTIONS, 1, [f"--fault_fail_step={FAIL_STEP}"])[0]
        cls.router = lib.start_router(OPTIONS, [cls.healthy, cls.faulty],
                                      ["--max_migrations=2", "--status_interval_ms=100"])
        cls.stub = lib.generation_stub(cls.router.address)

    def routed(self, worker):
        series = self.router.series("kvserve_router_requests_routed_total")
        return series.get(f'{{worker="{worker.address}"}}', 0.0)

    def health(self, worker, service=""):
        stub = lib.PB["health_pb2_grpc"].HealthStub(grpc.insecure_channel(worker.address))
        request = lib.PB["health_pb2"].HealthCheckRequest(service=service)
        return stub.Check(request, timeout=10).status

    def test_failed_engine_migrates_its_requests_and_leaves_rotation(self):
        serving = lib.PB["health_pb2"].HealthCheckResponse.SERVING
        self.assertEqual(self.health(self.faulty, "kvserve.v1.Worker"), serving)

        disturbed, errors = run_all(self.stub)
        self.assertEqual(errors, [])
        self.assertGreaterEqual(self.routed(self.faulty), 1, "the faulty worker got no request")
        migrations = self.router.series("kvserve_router_migrations_total").get("", 0)
        self.assertGreaterEqual(migrations, 1)

        # The faulty worker says so: health, status stream (the router's gauge), its own log.
        not_serving = lib.PB["health_pb2"].HealthCheckResponse.NOT_SERVING
        for service in ("", "kvserve.v1.Generation", "kvserve.v1.Worker"):
            self.assertEqual(self.health(self.faulty, service), not_serving, service)
        deadline = time.time() + 10
        while (self.router.worker_gauge("kvserve_router_worker_healthy", self.faulty) != 0 and
               time.time() < deadline):
            time.sleep(0.05)
        self.assertEqual(self.router.worker_gauge("kvserve_router_worker_healthy", self.faulty), 0)

        # A direct call to the failed worker is refused with UNAVAILABLE.
        direct = lib.generation_stub(self.faulty.address)
        with self.assertRaises(grpc.RpcError) as raised:
            list(direct.Generate(lib.request("Hi", max_tokens=2), timeout=30))
        self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAVAILABLE)

        # Every later request goes to the healthy worker, and the migrated streams equal an
        # undisturbed run (greedy, on the healthy worker alone).
        before = self.routed(self.faulty)
        undisturbed, errors = run_all(self.stub)
        self.assertEqual(errors, [])
        self.assertEqual(self.routed(self.faulty), before)
        lib.assert_same_streams(self, disturbed, undisturbed)
        for i in range(NUM_STREAMS):
            self.assertEqual(len(disturbed[i][0]), OUTPUT_TOKENS)
            self.assertEqual(disturbed[i][2].completion_tokens, OUTPUT_TOKENS)


if __name__ == "__main__":
    unittest.main(argv=UNITTEST_ARGV, verbosity=2)
