"""End-to-end test of frozen-worker detection: 16 streams run through the router on two real
workers, and one worker is frozen with SIGSTOP while they run (its kernel still holds the TCP
connections; the process answers nothing). The router must notice within the documented bound
(keepalive and the status-stream liveness deadline, docs/routing.md: 5 s), migrate the frozen
worker's streams, and every stream must complete with the text of an undisturbed run. New
requests go to the other worker; after SIGCONT the frozen worker comes back into rotation.

  python3 router_freeze_e2e_test.py --worker=build/worker/kvserve-worker \
      --router=build/router/kvserve-router --proto-root=proto
"""

import signal
import sys
import threading
import time
import unittest

import kvserve_e2e
import router_e2e_lib as lib

OPTIONS, UNITTEST_ARGV = kvserve_e2e.parse_args(sys.argv)
NUM_STREAMS = 16
OUTPUT_TOKENS = 24
DETECTION_BOUND_S = 5.0


setUpModule, tearDownModule = lib.module_fixtures(OPTIONS)


def requests():
    """8 greedy and 8 seeded sampled requests, each with its own prompt."""
    prompts = [f"Letter number {i}: dear friend, the weather here" for i in range(NUM_STREAMS)]
    return lib.greedy_and_seeded_requests(prompts, OUTPUT_TOKENS, 500, temperature=0.8)


class RouterFreezeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.workers = lib.start_workers(OPTIONS, 2)
        cls.router = lib.start_router(OPTIONS, cls.workers, ["--status_interval_ms=100"])
        cls.stub = lib.generation_stub(cls.router.address)

    def tearDown(self):
        for worker in self.workers:
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGCONT)

    def routed(self):
        series = self.router.series("kvserve_router_requests_routed_total")
        return [series.get(f'{{worker="{w.address}"}}', 0.0) for w in self.workers]

    def healthy(self, worker):
        return self.router.worker_gauge("kvserve_router_worker_healthy", worker)

    def run_all(self, on_progress=None):
        outputs, errors = lib.run_streams(self.stub, requests(), 120, on_progress)
        self.assertEqual(errors, [])
        return outputs

    def test_sigstop_one_worker_mid_stream_loses_nothing(self):
        undisturbed = self.run_all()
        before = self.routed()
        frozen = []
        detected = []

        def watch(victim, frozen_at):
            # When the router first reports the frozen worker unhealthy.
            while time.time() < frozen_at + 30:
                if self.healthy(victim) == 0:
                    detected.append(time.time() - frozen_at)
                    return
                time.sleep(0.05)

        def freeze_when_running(counts):
            started = sum(1 for count in counts if count >= 2)
            if frozen or started < NUM_STREAMS // 2 or max(counts) >= OUTPUT_TOKENS - 4:
                return
            load = [now - then for now, then in zip(self.routed(), before)]
            victim = self.workers[load.index(max(load))]
            victim.process.send_signal(signal.SIGSTOP)
            frozen.append((victim, time.time(), load))
            watcher = threading.Thread(target=watch, args=(victim, frozen[0][1]), daemon=True)
            watcher.start()
            frozen.append(watcher)

        disturbed = self.run_all(freeze_when_running)
        self.assertTrue(frozen, "the worker was never frozen: streams finished too fast")
        victim, frozen_at, load = frozen[0]
        frozen[1].join()
        survivor = next(w for w in self.workers if w is not victim)
        print(f"froze {victim.address}, routed before: {load}; marked unhealthy after "
              f"{detected[0] if detected else None} s; streams done "
              f"{time.time() - frozen_at:.1f} s after the freeze", file=sys.stderr)
        lib.assert_same_streams(self, disturbed, undisturbed)

        # Marked unhealthy within the bound (measured from the freeze), and still unhealthy.
        self.assertTrue(detected, "the router never marked the frozen worker unhealthy")
        self.assertLessEqual(detected[0], DETECTION_BOUND_S)
        self.assertEqual(self.healthy(victim), 0)

        # New requests go to the survivor while the victim is frozen.
        routed = self.routed()
        for i in range(4):
            tokens, _, _, _ = lib.collect(self.stub.Generate(
                lib.request(f"Short note {i}:", temperature=0, max_tokens=4, ignore_eos=True),
                timeout=60))
            self.assertEqual(len(tokens), 4)
        now = self.routed()
        self.assertEqual(now[self.workers.index(victim)], routed[self.workers.index(victim)])
        self.assertEqual(now[self.workers.index(survivor)],
                         routed[self.workers.index(survivor)] + 4)

        # SIGCONT: it reconnects and takes requests again.
        victim.process.send_signal(signal.SIGCONT)
        deadline = time.time() + 20
        while self.healthy(victim) != 1 and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.healthy(victim), 1)
        routed = self.routed()
        for i in range(6):
            lib.collect(self.stub.Generate(
                lib.request(f"Another note {i}:", temperature=0, max_tokens=2, ignore_eos=True),
                timeout=60))
        now = self.routed()
        self.assertGreater(now[self.workers.index(victim)], routed[self.workers.index(victim)])


if __name__ == "__main__":
    unittest.main(argv=UNITTEST_ARGV, verbosity=2)
