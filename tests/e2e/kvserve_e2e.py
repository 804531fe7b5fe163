"""Helpers for the end-to-end tests: real kvserve-worker processes on loopback, driven by Python
stubs generated from proto/ at test time (grpcio-tools), their /metrics endpoint, and clients of
their OpenAI-compatible HTTP API (the official `openai` package, and plain JSON requests).

Every process a test starts is registered in PROCESSES and killed by cleanup() (called from the
tests' tearDownModule and at interpreter exit), so a failing test never leaves one behind.
"""

import atexit
import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

PROCESSES = []
_STUB_DIR = None


def generate_stubs(proto_root, extra_proto_root):
    """Runs grpc_tools.protoc on proto/kvserve/v1/*.proto and the test's health.proto into a
    temporary directory, puts it on sys.path and returns the imported modules as a dict."""
    global _STUB_DIR
    from grpc_tools import protoc  # imported here so a missing grpcio-tools fails loudly

    _STUB_DIR = tempfile.mkdtemp(prefix="kvserve_e2e_stubs_")
    api = [os.path.join(proto_root, "kvserve", "v1", name)
           for name in sorted(os.listdir(os.path.join(proto_root, "kvserve", "v1")))
           if name.endswith(".proto")]
    health = os.path.join(extra_proto_root, "grpc", "health", "v1", "health.proto")
    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    for root, files in ((proto_root, api), (extra_proto_root, [health])):
        args = ["grpc_tools.protoc", f"-I{root}", f"-I{include}", f"--python_out={_STUB_DIR}",
                f"--grpc_python_out={_STUB_DIR}"] + files
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed for {files}")
    sys.path.insert(0, _STUB_DIR)
    names = ["kvserve.v1.generation_pb2", "kvserve.v1.generation_pb2_grpc",
             "kvserve.v1.worker_pb2", "kvserve.v1.worker_pb2_grpc", "kvserve.v1.output_pb2",
             "kvserve.v1.sampling_pb2", "kvserve.v1.router_admin_pb2",
             "kvserve.v1.router_admin_pb2_grpc", "grpc.health.v1.health_pb2",
             "grpc.health.v1.health_pb2_grpc"]
    # grpc.health.v1 lives next to the installed grpc package: extend grpc's package path.
    import grpc
    grpc.__path__.append(os.path.join(_STUB_DIR, "grpc"))
    return {name.rsplit(".", 1)[1]: importlib.import_module(name) for name in names}


class Worker:
    """A kvserve-worker process. start() waits for "ready" and reads the printed ports."""

    NAME = "kvserve-worker"  # what the binary prints its ports and "ready" after

    def __init__(self, binary, extra_args=(), ready_timeout_s=300):
        self.binary = binary
        self.args = [binary, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                     *extra_args]
        self.ready_timeout_s = ready_timeout_s
        self.process = None
        self.grpc_port = None
        self.metrics_port = None
        self.http_port = None  # with --http_port
        self.output = []  # every stdout line, for failure messages
        self._ready = threading.Event()

    def start(self):
        self.process = subprocess.Popen(self.args, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, bufsize=1)
        PROCESSES.append(self.process)
        threading.Thread(target=self._read_output, daemon=True).start()
        if not self._ready.wait(self.ready_timeout_s):
            raise RuntimeError(f"{self.NAME} did not become ready:\n" + self.log())
        if self.process.poll() is not None:
            raise RuntimeError(f"{self.NAME} exited during start-up:\n" + self.log())
        return self

    def _read_output(self):
        for line in self.process.stdout:
            self.output.append(line.rstrip("\n"))
            match = re.match(re.escape(self.NAME) + r" (grpc|metrics|http)_port=(\d+)", line)
            if match:
                setattr(self, f"{match.group(1)}_port", int(match.group(2)))
            if line.startswith(self.NAME + " ready"):
                self._ready.set()
        self._ready.set()  # exited: unblock start()

    def log(self):
        return "\n".join(self.output[-60:])

    @property
    def address(self):
        return f"127.0.0.1:{self.grpc_port}"

    def metrics_text(self):
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.read().decode()

    def metric(self, series):
        """The value of one series, e.g. 'kvserve_requests_finished_total{reason="cancelled"}'."""
        for line in self.metrics_text().splitlines():
            if line.startswith(series + " "):
                return float(line.rsplit(" ", 1)[1])
        raise KeyError(series)

    def wait_metric(self, series, predicate, timeout_s=30):
        deadline = time.time() + timeout_s
        value = None
        while time.time() < deadline:
            value = self.metric(series)
            if predicate(value):
                return value
            time.sleep(0.05)
        raise AssertionError(f"{series} stayed at {value}")

    def terminate(self, timeout_s=60):
        """SIGTERM (drain), then the exit code."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout_s)


def cleanup():
    for process in PROCESSES:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
    PROCESSES.clear()


def _remove_stubs():
    if _STUB_DIR is not None:
        shutil.rmtree(_STUB_DIR, ignore_errors=True)


atexit.register(_remove_stubs)
atexit.register(cleanup)  # runs first (atexit is last in, first out)


# The HTTP API as the http*_e2e tests serve it: the bearer token, and the model names it takes.
HTTP_KEY = "test-key"
HTTP_ALIASES = "--http_model_aliases=smol,gpt-3.5-turbo"
HTTP_WORKER_ARGS = ["--http_port=0", f"--http_api_key={HTTP_KEY}", HTTP_ALIASES]


def openai_client(server, key=HTTP_KEY):
    """An openai.OpenAI client of `server`'s HTTP port (a Worker or router_e2e_lib.Router)."""
    import openai  # here so that tests without HTTP need no openai package
    return openai.OpenAI(base_url=f"http://127.0.0.1:{server.http_port}/v1", api_key=key,
                         max_retries=0, timeout=120)


def http_json(server, method, path, body=None, headers=None):
    """(status, parsed JSON body) of one request to `server`'s HTTP port; a dict or list body is
    sent as JSON, bytes as they are."""
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    request = urllib.request.Request(f"http://127.0.0.1:{server.http_port}{path}", data=data,
                                     method=method,
                                     headers={"Authorization": f"Bearer {HTTP_KEY}",
                                              "Content-Type": "application/json",
                                              **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def model_args(options):
    """["--model=PATH"] when the test was given --model=PATH, else [] (the default model)."""
    return ["--model=" + options["model"]] if "model" in options else []


def parse_args(argv):
    """--worker=PATH --proto-root=DIR [--model=PATH]; unittest gets the rest."""
    options = {}
    rest = [argv[0]]
    for arg in argv[1:]:
        if arg.startswith("--") and "=" in arg and not arg.startswith("--k"):
            key, value = arg[2:].split("=", 1)
            options[key] = value
        else:
            rest.append(arg)
    return options, rest
