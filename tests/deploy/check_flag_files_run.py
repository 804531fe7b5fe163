#!/usr/bin/env python3
"""ctest deploy_flag_files_start_binaries (label e2e): every flag file under deploy/k8s starts
the real binary. Each worker.flags / router.flags is passed with --flagfile to the built
kvserve-worker / kvserve-router, followed by overrides for this machine only: loopback ports
(port 0, --http_port too), the local default model instead of the image's path, --num_threads=1
where the manifests pass the container's CPU limit, a resolvable --workers_dns and a scratch auth
token file. Budgets are the flag file's own: --kv_memory_bytes is never replaced.

Expected outcome, per file:
  - a worker with --device=cuda[:N]: on a machine with an NVIDIA GPU it must print "ready"; on
    one without, it must exit with status 2 and a message naming the missing CUDA device (the
    worker's documented behaviour), without printing "ready";
  - a worker on the CPU whose --kv_memory_bytes is more than half of this machine's available
    memory is not started (reported as not run; the check does not shrink the budget);
  - everything else must print "ready" (so every value passed its Validate(), not just the flag
    names) and exit 0 on SIGTERM.

  python3 tests/deploy/check_flag_files_run.py <source root> <kvserve-worker> <kvserve-router>
"""
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from deploy_common import Failures, parse_flag_lines

READY_TIMEOUT_S = 180
# A worker that cannot use --device=cuda must say so and exit before loading anything heavy.
NO_GPU_EXIT_STATUS = 2
NO_GPU_TIMEOUT_S = 60
# What the worker must say when no GPU is present: one line naming CUDA and the device or GPU.
NO_GPU_MESSAGE = re.compile(r"(?i)cuda.*(device|gpu)|(device|gpu).*cuda")


def has_cuda_gpu():
    """True when this machine has an NVIDIA GPU a process can use."""
    if shutil.which("nvidia-smi"):
        result = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
        return result.returncode == 0 and "GPU " in result.stdout
    return False


def available_memory_bytes():
    with open("/proc/meminfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def default_model():
    """The host's copy of the default model (model/default_model.h's rules)."""
    if os.environ.get("KVSERVE_MODEL"):
        return os.environ["KVSERVE_MODEL"]
    cache = os.environ.get("KVSERVE_CACHE_DIR") or os.path.join(
        os.environ.get("HOME", "/tmp"), ".cache", "kvserve")
    return os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def run_until_ready(command, timeout_s):
    """Starts `command`; waits for a line ending in " ready" or for the process to exit. Then
    SIGTERMs it if it still runs. Returns (ready, exit status, output)."""
    with tempfile.TemporaryFile(mode="w+") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + timeout_s
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
        return ready, process.returncode, log.read().strip()


def expect_ready(failures, label, command):
    """The process must print "ready", then exit 0 on SIGTERM."""
    ready, status, output = run_until_ready(command, READY_TIMEOUT_S)
    print(f"{label}: ready={ready} exit={status}")
    failures.check(ready and status == 0,
                   f"{label}: {' '.join(command)}\n  ready={ready} exit={status}\n  {output}")


def expect_no_gpu_exit(failures, label, command):
    """--device=cuda without a GPU: exit status 2 and a message naming the missing device."""
    ready, status, output = run_until_ready(command, NO_GPU_TIMEOUT_S)
    named = bool(NO_GPU_MESSAGE.search(output))
    print(f"{label}: no GPU here: ready={ready} exit={status} message names CUDA device={named}")
    failures.check(not ready and status == NO_GPU_EXIT_STATUS and named,
                   f"{label}: {' '.join(command)}\n  without a GPU, want exit "
                   f"{NO_GPU_EXIT_STATUS} and a message naming the missing CUDA device; got "
                   f"ready={ready} exit={status}\n  {output}")


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
    # As in the manifests: no OpenBLAS thread pool beside the worker's own.
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    gpu = has_cuda_gpu()
    k8s = root / "deploy" / "k8s"
    worker_files = sorted(k8s.rglob("worker.flags"))
    router_files = sorted(k8s.rglob("router.flags"))
    failures.check(worker_files and router_files, "no worker.flags / router.flags under deploy/k8s")
    with tempfile.TemporaryDirectory() as scratch:
        tokens = pathlib.Path(scratch) / "tokens"
        tokens.write_text("deploy-test-token deploy-test\n", encoding="utf-8")
        not_run = []
        for path in worker_files:
            label = str(path.relative_to(root))
            values = dict(parse_flag_lines(path.read_text(encoding="utf-8"))[0])
            # A fixed --http_port is taken elsewhere on a shared machine (ports are exclusive).
            http = ["--http_port=0"] if "http_port" in values else []
            command = [worker, f"--flagfile={path}", *local, *http, "--num_threads=1"]
            device = values.get("device") or "cpu"
            budget = int(values.get("kv_memory_bytes") or 0)
            if device.startswith("cuda"):
                if gpu:
                    expect_ready(failures, label, command)
                else:
                    expect_no_gpu_exit(failures, label, command)
            elif budget > available_memory_bytes() // 2:
                print(f"{label}: NOT RUN: --kv_memory_bytes={budget} is more than half of this "
                      f"machine's available memory")
                not_run.append(label)
            else:
                expect_ready(failures, label, command)
        for path in router_files:
            names = {name for name, _ in parse_flag_lines(path.read_text(encoding="utf-8"))[0]}
            auth = [f"--auth_tokens_file={tokens}"] if "auth_tokens_file" in names else []
            expect_ready(failures, str(path.relative_to(root)),
                         [router, f"--flagfile={path}", *local, "--workers_dns=localhost:1",
                          *auth, *(["--http_port=0"] if "http_port" in names else [])])
    note = f"; not run here (budget too large): {', '.join(not_run)}" if not_run else ""
    return failures.report(f"{len(worker_files)} worker and {len(router_files)} router flag files, "
                           f"{'with' if gpu else 'without'} a GPU{note}")


if __name__ == "__main__":
    sys.exit(main())
