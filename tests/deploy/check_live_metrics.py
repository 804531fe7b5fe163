#!/usr/bin/env python3
"""ctest deploy_promtool_check_live_metrics (label e2e): both binaries' live /metrics output
passes `promtool check metrics` (Debian package `prometheus`, installed by scripts/setup.sh), so
every name, type, unit suffix and help text that Prometheus tooling lints is right as served, not
only as documented. A kvserve-worker (synthetic model: no weights to load) and a kvserve-router in
front of it start on loopback (port 0); the router is scraped once it reports the worker healthy,
so its per-worker series are there too. Any promtool complaint (even a lint warning) fails.

  python3 tests/deploy/check_live_metrics.py <source root> <kvserve-worker> <kvserve-router>
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

from deploy_common import Failures

READY_TIMEOUT_S = 120


def default_model():
    """The host's copy of the default model (model/default_model.h's rules): the router reads
    its tokenizer."""
    if os.environ.get("KVSERVE_MODEL"):
        return os.environ["KVSERVE_MODEL"]
    cache = os.environ.get("KVSERVE_CACHE_DIR") or os.path.join(
        os.environ.get("HOME", "/tmp"), ".cache", "kvserve")
    return os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


class Process:
    """A binary that prints "<name> grpc_port=N", "<name> metrics_port=N" and "<name> ready"."""

    def __init__(self, command):
        self.log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT,
                                        text=True)
        self.ports = {}

    def output(self):
        self.log.seek(0)
        return self.log.read()

    def wait_ready(self):
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and self.process.poll() is None:
            text = self.output()
            self.ports = {kind: int(port) for kind, port in
                          re.findall(r"^\S+ (grpc|metrics)_port=(\d+)$", text, re.MULTILINE)}
            if re.search(r"^\S+ ready$", text, re.MULTILINE):
                return True
            time.sleep(0.1)
        return False

    def metrics(self):
        url = f"http://127.0.0.1:{self.ports['metrics']}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.read().decode()

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def promtool(failures, promtool_path, label, text):
    result = subprocess.run([promtool_path, "check", "metrics"], input=text, text=True,
                            capture_output=True, check=False)
    complaints = (result.stdout + result.stderr).strip()
    print(f"{label}: {len(text.splitlines())} lines, promtool exit {result.returncode}"
          + (f"\n  {complaints}" if complaints else ""))
    failures.check(result.returncode == 0 and not complaints,
                   f"{label}: promtool check metrics complained:\n  {complaints}")


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    worker_binary, router_binary = sys.argv[2], sys.argv[3]
    failures = Failures("deploy_promtool_check_live_metrics")
    promtool_path = shutil.which("promtool")
    model = default_model()
    if not failures.check(promtool_path is not None, "promtool not found (scripts/setup.sh)"):
        return failures.report("nothing")
    if not failures.check(os.path.exists(model), f"default model {model} missing "
                                                  "(scripts/fetch_model.sh)"):
        return failures.report("nothing")
    local = ["--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0"]
    worker = Process([worker_binary, *local, "--model=synthetic:tiny", "--num_threads=1"])
    router = None
    try:
        if not failures.check(worker.wait_ready(), f"worker not ready:\n{worker.output()}"):
            return failures.report("nothing")
        address = f"127.0.0.1:{worker.ports['grpc']}"
        router = Process([router_binary, *local, f"--model={model}", f"--workers={address}"])
        if not failures.check(router.wait_ready(), f"router not ready:\n{router.output()}"):
            return failures.report("nothing")
        healthy = f'kvserve_router_worker_healthy{{worker="{address}"}} 1'
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and healthy not in router.metrics():
            time.sleep(0.1)
        failures.check(healthy in router.metrics(),
                       f"the router never reported {address} healthy:\n{router.output()}")
        promtool(failures, promtool_path, "kvserve-worker /metrics", worker.metrics())
        promtool(failures, promtool_path, "kvserve-router /metrics", router.metrics())
    finally:
        if router is not None:
            router.stop()
        worker.stop()
    return failures.report("the live /metrics of kvserve-worker and kvserve-router")


if __name__ == "__main__":
    sys.exit(main())
