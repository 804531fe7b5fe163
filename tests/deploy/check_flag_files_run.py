#!/usr/bin/env python3
"""ctest deploy_flag_files_start_binaries (label e2e): every flag file under deploy/k8s starts
the real binary. Each worker.flags / router.flags is passed with --flagfile to the built
kvserve-worker / kvserve-router, followed by overrides for this machine only: loopback ports
(port 0), the local default model instead of the image's path, a 64 MiB KV pool instead of the
cluster's budget, a resolvable --workers_dns and a scratch auth token file. The process must print
"ready" (so every value passed its Validate(), not just the flag names) and exit 0 on SIGTERM.

  python3 tests/deploy/check_flag_files_run.py <source root> <kvserve-worker> <kvserve-router>
"""
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

from deploy_common import Failures, parse_flag_lines

READY_TIMEOUT_S = 180


def default_model():
    """The host's copy of the default model (model/default_model.h's rules)."""
    if os.environ.get("KVSERVE_MODEL"):
        return os.environ["KVSERVE_MODEL"]
    cache = os.environ.get("KVSERVE_CACHE_DIR") or os.path.join(
        os.environ.get("HOME", "/tmp"), ".cache", "kvserve")
    return os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def start_and_stop(failures, label, command):
    """Runs `command` until it prints "ready", then SIGTERMs it; it must exit 0."""
    with tempfile.TemporaryFile(mode="w+") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + READY_TIMEOUT_S
        ready = False
        while time.monotonic() < deadline and process.poll() is None:
            log.seek(0)
            if any(line.endswith(" ready") for line in log.read().splitlines()):
                ready = True
                break
            time.sleep(0.2)
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.seek(0)
        output = log.read().strip()
    print(f"{label}: ready={ready} exit={process.returncode}")
    failures.check(ready and process.returncode == 0,
                   f"{label}: {' '.join(command)}\n  ready={ready} exit={process.returncode}\n"
                   f"  {output}")


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    root = pathlib.Path(sys.argv[1]).resolve()
    worker, router = sys.argv[2], sys.argv[3]
    failures = Failures("deploy_flag_files_start_binaries")
    model = default_model()
    if not failures.check(os.path.exists(model), f"default model {model} missing "
                                                  "(scripts/fetch_model.sh)"):
        return failures.report("nothing")
    local = ["--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0", f"--model={model}"]
    k8s = root / "deploy" / "k8s"
    worker_files = sorted(k8s.rglob("worker.flags"))
    router_files = sorted(k8s.rglob("router.flags"))
    failures.check(worker_files and router_files, "no worker.flags / router.flags under deploy/k8s")
    with tempfile.TemporaryDirectory() as scratch:
        tokens = pathlib.Path(scratch) / "tokens"
        tokens.write_text("deploy-test-token deploy-test\n", encoding="utf-8")
        for path in worker_files:
            start_and_stop(failures, str(path.relative_to(root)),
                           [worker, f"--flagfile={path}", *local, "--kv_memory_bytes=67108864",
                            "--num_threads=1"])
        for path in router_files:
            names = {name for name, _ in parse_flag_lines(path.read_text(encoding="utf-8"))[0]}
            auth = [f"--auth_tokens_file={tokens}"] if "auth_tokens_file" in names else []
            start_and_stop(failures, str(path.relative_to(root)),
                           [router, f"--flagfile={path}", *local, "--workers_dns=localhost:1",
                            *auth])
    return failures.report(f"{len(worker_files)} worker and {len(router_files)} router flag files")


if __name__ == "__main__":
    sys.exit(main())
