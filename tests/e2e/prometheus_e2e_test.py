"""End-to-end test of the worker's metrics with a real Prometheus server: start kvserve-worker
(real default model) and /usr/bin/prometheus on loopback with a generated config that scrapes the
worker every 200 ms, run a few generations, then query Prometheus' HTTP API with PromQL:
kvserve_kv_cache_usage_ratio and a TTFT quantile (histogram_quantile over the TTFT histogram).

  python3 prometheus_e2e_test.py --worker=build/worker/kvserve-worker --proto-root=proto \
      [--prometheus=/usr/bin/prometheus]
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

import kvserve_e2e
import router_e2e_lib as lib

OPTIONS, UNITTEST_ARGV = kvserve_e2e.parse_args(sys.argv)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PrometheusE2eTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        lib.setup(OPTIONS)
        args = ["--kv_memory_bytes=67108864", "--num_threads=2"] + kvserve_e2e.model_args(OPTIONS)
        cls.worker = kvserve_e2e.Worker(OPTIONS["worker"], args).start()
        cls.data_dir = tempfile.mkdtemp(prefix="kvserve_prometheus_")
        config = os.path.join(cls.data_dir, "prometheus.yml")
        with open(config, "w") as out:
            out.write(f"""global:
  scrape_interval: 200ms
  evaluation_interval: 1s
scrape_configs:
  - job_name: kvserve-worker
    scrape_interval: 200ms
    scrape_timeout: 200ms
    static_configs:
      - targets: ["127.0.0.1:{cls.worker.metrics_port}"]
""")
        cls.prometheus_port = free_port()
        binary = OPTIONS.get("prometheus", "/usr/bin/prometheus")
        cls.prometheus = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={cls.data_dir}/data",
             f"--web.listen-address=127.0.0.1:{cls.prometheus_port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        kvserve_e2e.PROCESSES.append(cls.prometheus)

    @classmethod
    def tearDownClass(cls):
        kvserve_e2e.cleanup()
        shutil.rmtree(cls.data_dir, ignore_errors=True)

    def query(self, promql):
        url = (f"http://127.0.0.1:{self.prometheus_port}/api/v1/query?"
               + urllib.parse.urlencode({"query": promql}))
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        self.assertEqual(body["status"], "success", body)
        return body["data"]["result"]

    def wait_for(self, promql, predicate, timeout_s=60):
        deadline = time.time() + timeout_s
        result = None
        while time.time() < deadline:
            try:
                result = self.query(promql)
            except OSError:  # Prometheus still starting
                result = None
            if result and predicate(float(result[0]["value"][1])):
                return float(result[0]["value"][1])
            if self.prometheus.poll() is not None:
                self.fail("prometheus exited: " + self.prometheus.stderr.read().decode())
            time.sleep(0.2)
        self.fail(f"{promql} never satisfied the condition; last result {result}")

    def test_promql_returns_cache_usage_and_ttft_quantile(self):
        # The worker is scraped and healthy.
        self.wait_for('up{job="kvserve-worker"}', lambda v: v == 1)
        self.wait_for("kvserve_kv_cache_usage_ratio", lambda v: 0 <= v <= 1)

        stub = lib.generation_stub(self.worker.address)
        for prompt in ["Hello there", "The weather today is", "A short poem:"]:
            request = lib.request(prompt, temperature=0, max_tokens=4, ignore_eos=True)
            list(stub.Generate(request, timeout=120))

        # Usage rises above zero while a long request runs, as seen by Prometheus.
        long_request = lib.request("Describe the history of Rome in detail.", temperature=0,
                                   max_tokens=200, ignore_eos=True)
        stream = stub.Generate(long_request, timeout=300)
        next(stream)
        usage = self.wait_for("kvserve_kv_cache_usage_ratio", lambda v: v > 0)
        self.assertLessEqual(usage, 1.0)
        stream.cancel()

        count = self.wait_for("kvserve_time_to_first_token_seconds_count", lambda v: v >= 3)
        self.assertGreaterEqual(count, 3)
        p90 = self.wait_for(
            "histogram_quantile(0.9, sum by (le) (kvserve_time_to_first_token_seconds_bucket))",
            lambda v: v > 0)
        self.assertLess(p90, 60.0)
        p50_rate = self.wait_for(
            "histogram_quantile(0.5, sum by (le) "
            "(rate(kvserve_inter_token_latency_seconds_bucket[1m])))", lambda v: v > 0)
        self.assertLess(p50_rate, 5.0)
        print(f"\nPromQL: kv_cache_usage_ratio={usage:.4f} ttft_p90={p90:.4f}s "
              f"itl_p50(rate 1m)={p50_rate:.4f}s over {count:.0f} requests")


if __name__ == "__main__":
    unittest.main(argv=UNITTEST_ARGV, verbosity=2)
