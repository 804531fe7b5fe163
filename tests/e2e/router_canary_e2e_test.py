"""End-to-end test of the router's consistency canary and routing-quality metrics, on simulated
workers (kvserve-worker --runner=simulated: the model's tokenizer and shape, a fake runner with
step times from a step-time model; no weights are loaded).

Worker A serves the default model's tokenizer; worker B a Hugging Face directory whose
tokenizer.json is another (a small byte-level BPE fixture). The router (default model) refuses B:
its serving fingerprint differs, so the router's prompt hashes would never name B's blocks. B is
listed as refused with the reason (RouterAdmin.ListWorkers, `kvserve-cli workers`), the router's
log says why, its index state is "stale", and every request goes to A and succeeds. Requests
sharing a long prefix then show the routing-quality counters: reuse available, captured by the
choice and delivered by the worker.

  python3 router_canary_e2e_test.py --worker=build/worker/kvserve-worker \
      --router=build/router/kvserve-router --cli=build/tools/kvserve-cli --proto-root=proto
"""

import json
import os
import shutil
import subprocess
import sys
import time
import unittest

import grpc

import kvserve_e2e
import router_e2e_lib as lib

OPTIONS, UNITTEST_ARGV = kvserve_e2e.parse_args(sys.argv)
HERE = os.path.dirname(os.path.abspath(__file__))
OTHER_TOKENIZER = os.path.join(HERE, "..", "tokenizer", "fixtures", "tokenizer_bytelevel_small")

setUpModule, tearDownModule = lib.module_fixtures(OPTIONS)


def write_step_time_model(directory):
    path = os.path.join(directory, "step_time.json")
    with open(path, "w") as f:
        json.dump({"fixed_ms": 2.0, "prefill_token_ms": 0.01, "decode_token_ms": 0.5,
                   "source": "router_canary_e2e_test: a fast simulated worker"}, f)
    return path


def write_other_model(directory):
    """A Hugging Face directory with a small llama shape and another tokenizer (no weights: a
    simulated worker reads only config.json and the tokenizer)."""
    model = os.path.join(directory, "other-model")
    os.makedirs(model)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(OTHER_TOKENIZER, name), model)
    with open(os.path.join(model, "tokenizer.json")) as f:
        tokenizer = json.load(f)
    vocab = len(tokenizer["model"]["vocab"]) + len(tokenizer.get("added_tokens", []))
    config = {"architectures": ["LlamaForCausalLM"], "_name_or_path": "other-model",
              "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": vocab,
              "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "bos_token_id": 1,
              "eos_token_id": 2}
    with open(os.path.join(model, "config.json"), "w") as f:
        json.dump(config, f)
    return model


class RouterCanaryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.directory = lib.temp_dir()
        step_time = write_step_time_model(cls.directory)
        simulated = ["--runner=simulated", f"--step_time_model={step_time}",
                     "--kv_memory_bytes=33554432"]
        cls.same = lib.start_workers(OPTIONS, 1, simulated)[0]
        other_model = write_other_model(cls.directory)
        cls.other = kvserve_e2e.Worker(OPTIONS["worker"], list(lib.WORKER_ARGS) + simulated +
                                       [f"--model={other_model}"]).start()
        args = ["--status_interval_ms=50"] + kvserve_e2e.model_args(OPTIONS)
        cls.router = lib.Router(OPTIONS["router"],
                                f"--workers={cls.same.address},{cls.other.address}", args).start()
        cls.router.wait_workers_healthy([cls.same])
        cls.stub = lib.generation_stub(cls.router.address)
        cls.admin_pb2 = lib.PB["router_admin_pb2"]
        cls.admin = lib.PB["router_admin_pb2_grpc"].RouterAdminStub(
            grpc.insecure_channel(cls.router.address))

    def listed(self, worker):
        workers = self.admin.ListWorkers(self.admin_pb2.ListWorkersRequest(), timeout=10).workers
        return next(w for w in workers if w.address == worker.address)

    def wait_refused(self):
        deadline = time.time() + 30
        while time.time() < deadline:
            info = self.listed(self.other)
            if info.health == self.admin_pb2.WORKER_HEALTH_REFUSED:
                return info
            time.sleep(0.05)
        self.fail("the worker with another tokenizer was never refused:\n" + self.router.log())

    def test_a_worker_with_another_tokenizer_is_refused_and_the_cluster_keeps_serving(self):
        info = self.wait_refused()
        self.assertIn("tokenizer ", info.refused_reason)
        self.assertIn("!= router's", info.refused_reason)
        self.assertEqual(info.index_state, "stale")
        self.assertEqual(self.listed(self.same).health, self.admin_pb2.WORKER_HEALTH_HEALTHY)
        self.assertEqual(self.listed(self.same).index_state, "exact")
        # The canary's verdict in the router's log: one worker_refused line naming the worker
        # and why (base/log.h's text format).
        refused = f" WARNING worker_refused worker={self.other.address} reason=\"serving " \
                  "fingerprint differs from the router's: tokenizer "
        deadline = time.time() + 10
        while not any(refused in line for line in self.router.output) and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(sum(refused in line for line in self.router.output), 1,
                         self.router.log())
        self.assertEqual(self.router.worker_gauge("kvserve_router_worker_healthy", self.other), 0)
        stale = self.router.series("kvserve_router_worker_index_state")
        self.assertEqual(stale.get(f'{{state="stale",worker="{self.other.address}"}}'), 1.0,
                         stale)

        result = subprocess.run([OPTIONS["cli"], "workers", f"--target={self.router.address}"],
                                capture_output=True, text=True, timeout=60, check=False)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(any(row.startswith(self.other.address) and " refused " in row
                            for row in result.stdout.splitlines()), result.stdout)
        self.assertIn(f"{self.other.address} refused: tokenizer ", result.stdout)

        requests = [lib.request(f"Question {i}: what is a KV cache?", temperature=0,
                                max_tokens=4, ignore_eos=True) for i in range(6)]
        outputs, errors = lib.run_streams(self.stub, requests, timeout=120)
        self.assertEqual(errors, [])
        for tokens, _ in outputs:
            self.assertEqual(len(tokens), 4)
        routed = self.router.series("kvserve_router_requests_routed_total")
        # The refused worker's series may exist (exported at 0 from the start); nothing went to it.
        self.assertEqual(routed.get(f'{{worker="{self.other.address}"}}', 0), 0)
        self.assertGreaterEqual(routed.get(f'{{worker="{self.same.address}"}}', 0), 6)

    def test_shared_prefixes_show_reuse_available_captured_and_delivered(self):
        prefix = " ".join(f"word{i}" for i in range(200))  # several full blocks
        first = lib.request(prefix + " first", temperature=0, max_tokens=2, ignore_eos=True)
        list(self.stub.Generate(first, timeout=60))
        # The worker's KV events reach the router's index within a status interval or two.
        deadline = time.time() + 10
        while time.time() < deadline and self.listed(self.same).cached_blocks == 0:
            time.sleep(0.05)
        before = self.router.series("kvserve_router_prefix_reuse_tokens_total")
        second = lib.request(prefix + " second", temperature=0, max_tokens=2, ignore_eos=True)
        _, _, _, usage = lib.collect(self.stub.Generate(second, timeout=60))
        self.assertGreater(usage.cached_prompt_tokens, 0)
        after = self.router.series("kvserve_router_prefix_reuse_tokens_total")
        for stage in ("available", "captured", "delivered"):
            key = f'{{stage="{stage}"}}'
            self.assertGreater(after[key] - before.get(key, 0), 0, (stage, before, after))
        ratios = self.router.series("kvserve_router_prefix_reuse_ratio")
        self.assertGreater(ratios['{stage="captured"}'], 0)
        self.assertLessEqual(ratios['{stage="captured"}'], 1.0)


if __name__ == "__main__":
    unittest.main(argv=UNITTEST_ARGV)
