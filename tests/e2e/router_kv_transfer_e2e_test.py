"""End-to-end test of KV block transfer on a migration: two real workers with host KV tiers
behind a router. A greedy and a seeded request share a long system prompt, so the router runs
both on the worker that holds it; that worker is drained (SIGTERM, 1 s of grace) while they
stream, so both are cut mid-stream and migrate. The router names the draining worker, which
goes on serving its blocks for --drain_kv_handoff_s, as the KV source, and the new worker
fetches the requests' blocks instead of recomputing them. Each client stream equals an
undisturbed run's, token for token, and the new worker's metrics show the fetch and the host-tier
hits it served.

  python3 router_kv_transfer_e2e_test.py --worker=build/worker/kvserve-worker \
      --router=build/router/kvserve-router --cli=build/tools/kvserve-cli --proto-root=proto
"""

import signal
import subprocess
import sys
import time
import unittest

import kvserve_e2e
import router_e2e_lib as lib

OPTIONS, UNITTEST_ARGV = kvserve_e2e.parse_args(sys.argv)
OUTPUT_TOKENS = 160
CUT_AFTER_TOKENS = 8  # SIGTERM once both streams have this many

setUpModule, tearDownModule = lib.module_fixtures(OPTIONS)

SYSTEM = ("You are a careful assistant for a public library. " * 30).strip()


def requests():
    prompts = [f"{SYSTEM}\nReader {i}: tell me about the history of printing, in detail."
               for i in range(2)]
    return lib.greedy_and_seeded_requests(prompts, OUTPUT_TOKENS, 500, temperature=0.8)


class RouterKvTransferTest(unittest.TestCase):
    def test_a_drained_workers_requests_resume_from_its_blocks(self):
        workers = lib.start_workers(OPTIONS, 2, ["--host_kv_bytes=67108864",
                                                 "--drain_timeout_s=1",
                                                 "--drain_kv_handoff_s=10"])
        router = lib.start_router(OPTIONS, workers, ["--status_interval_ms=50"])
        stub = lib.generation_stub(router.address)
        # kvserve-cli workers says both can move blocks.
        table = subprocess.run([OPTIONS["cli"], "workers", f"--target={router.address}"],
                               capture_output=True, text=True, timeout=60, check=True).stdout
        self.assertIn("KV TRANSFER", table.splitlines()[0])
        for worker in workers:
            self.assertTrue(any(row.startswith(worker.address) and row.rstrip().endswith(" yes")
                                for row in table.splitlines()), table)
        undisturbed = []
        for request in requests():  # one at a time: the second follows the first's prefix
            outputs, errors = lib.run_streams(stub, [request], 600)
            self.assertEqual(errors, [])
            undisturbed.extend(outputs)
            self.assertEqual(len(outputs[0][0]), OUTPUT_TOKENS)
        holders = [w for w in workers if lib.worker_metric_total(w, "kvserve_prompt_tokens_total")]
        self.assertEqual(len(holders), 1, "the shared prefix should keep both on one worker")
        holder = holders[0]
        other = workers[1 - workers.index(holder)]

        drained = []

        def drain_when_started(counts):
            if not drained and min(counts) >= CUT_AFTER_TOKENS:
                drained.append(time.time())
                holder.process.send_signal(signal.SIGTERM)

        outputs, errors = lib.run_streams(stub, requests(), 600, drain_when_started)
        self.assertEqual(errors, [])
        self.assertTrue(drained, "the streams never reached the cut")
        lib.assert_same_streams(self, outputs, undisturbed)
        # Both requests moved to the other worker, which fetched their blocks.
        self.assertGreaterEqual(
            lib.worker_metric_total(other, 'kvserve_kv_fetches_total{result="complete"}'), 1,
            other.log())
        self.assertGreater(
            lib.worker_metric_total(other, 'kvserve_kv_transfer_blocks_total{direction="received"}'), 0)
        self.assertGreater(
            lib.worker_metric_total(other, "kvserve_prefix_cache_host_hit_tokens_total"), 0)
        self.assertGreaterEqual(
            sum(router.series("kvserve_router_kv_transfers_planned_total").values()), 1)
        self.assertEqual(holder.process.wait(timeout=60), 0, holder.log())


if __name__ == "__main__":
    unittest.main(argv=UNITTEST_ARGV)
