"""End-to-end test of what a first hour with kvserve probes: every port of a worker and a router
(gRPC, /metrics, OpenAI HTTP), the ports of a second process that asks for one already in use,
--version, the build-info gauge, ModelInfo.server_version, and counters present at 0.

One worker (default model, --http_port) and one router in front of it (--http_port), on
loopback with port 0. Checks:
  - a fresh worker and router export every counter with known label values at 0;
  - GET, POST, HEAD, other and odd methods on /, /health, /metrics and unknown paths, on every
    port of both processes (raw HTTP/1.1, also at the gRPC ports), while a request streams:
    every process lives, the stream finishes, /metrics and a new generation still work; the
    metrics ports answer 404 for unknown paths, 405 for a wrong method, headers only for HEAD;
  - a second worker or router given a port the first one listens on (each of --listen,
    --metrics_listen, --http_port) exits non-zero at once, naming the flag and the port, before
    it loads a model;
  - --version of every binary prints "kvserve <version> (commit <sha>[-dirty])", and the same
    version is ModelInfo.server_version (worker and router) and kvserve_build_info's labels.

  python3 ports_e2e_test.py --worker=build/worker/kvserve-worker \\
      --router=build/router/kvserve-router --cli=build/tools/kvserve-cli \\
      --generate=build/tools/kvserve-generate --project-version=0.1.0 \\
      --source-root=. --proto-root=proto
"""

import concurrent.futures
import re
import socket
import subprocess
import sys
import threading
import time
import unittest

import kvserve_e2e
import router_e2e_lib as lib

OPTIONS, UNITTEST_ARGV = kvserve_e2e.parse_args(sys.argv)
setUpModule, tearDownModule = lib.module_fixtures(OPTIONS)

STREAM_TOKENS = 512  # the stream the probes run beside: long enough to outlast them
VERSION_LINE = re.compile(r"kvserve (\d+\.\d+\.\d+) \(commit ([0-9a-f]{7,40}(?:-dirty)?|unknown)\)")
METHODS = ["GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "BREW",
           "M-SEARCH"]
PATHS = ["/", "/health", "/metrics", "/nope", "/v1/models", "/v1/completions", "/%s%s%s%n%n%n",
         "/" + "a" * 3000, "/metrics/../health?x=%s"]


def raw_http(port, data, timeout_s=3.0):
    """Sends `data` on a new connection and returns what comes back until the server closes it
    (or `timeout_s` of silence)."""
    received = b""
    try:
        connection = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    except OSError:  # nothing listens (the process died): the liveness checks say so
        return received
    with connection:
        try:
            connection.sendall(data)
            while True:
                chunk = connection.recv(65536)
                if not chunk:
                    break
                received += chunk
        except OSError:  # a reset or a timeout: what came before it is the answer
            pass
    return received


def request_bytes(method, path, body=b""):
    return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n").encode() + body


def status_of(response):
    """The status code of the first response in `response` (0 when there is none)."""
    match = re.match(rb"HTTP/1\.[01] (\d{3}) ", response)
    return int(match.group(1)) if match else 0


def series(server, name):
    """{labels: value} of every sample of `name` on `server`'s /metrics."""
    found = {}
    for line in server.metrics_text().splitlines():
        match = re.match(re.escape(name) + r"(\{[^}]*\})? (\S+)$", line)
        if match:
            found[match.group(1) or ""] = float(match.group(2))
    return found


class PortsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.worker = lib.start_workers(OPTIONS, 1, ["--http_port=0"])[0]
        cls.router = lib.start_router(OPTIONS, [cls.worker], ["--http_port=0"])

    def assert_alive(self):
        for server in (self.worker, self.router):
            self.assertIsNone(server.process.poll(), f"{server.NAME} died:\n{server.log()}")

    def generate(self, max_tokens):
        stub = lib.generation_stub(self.router.address)
        request = lib.request("The capital of France is", temperature=0, max_tokens=max_tokens,
                              ignore_eos=True)
        return lib.collect(stub.Generate(request, timeout=120))

    def test_1_counters_with_known_labels_are_present_at_zero_from_the_start(self):
        worker_expected = {
            "kvserve_requests_rejected_total": [
                "invalid_argument", "resource_exhausted", "unavailable", "not_found",
                "already_exists", "deadline_exceeded"],
            "kvserve_requests_finished_total": ["stop", "stop_string", "length", "abort",
                                                "cancelled"],
            "kvserve_kv_fetches_total": ["complete", "partial", "failed"],
        }
        label = {"kvserve_requests_rejected_total": "code",
                 "kvserve_requests_finished_total": "reason",
                 "kvserve_kv_fetches_total": "result"}
        for name, values in worker_expected.items():
            samples = series(self.worker, name)
            for value in values:
                self.assertEqual(samples.get(f'{{{label[name]}="{value}"}}'), 0.0,
                                 f"worker {name}{{{label[name]}={value}}}: {samples}")
        rejected = series(self.router, "kvserve_router_requests_rejected_total")
        for reason in ["queue_full", "never_fits", "no_worker", "shutting_down",
                       "unauthenticated", "invalid_argument", "deadline", "cancelled",
                       "migrations_exhausted", "worker_error"]:
            self.assertEqual(rejected.get(f'{{reason="{reason}"}}'), 0.0, f"{reason}: {rejected}")
        finished = series(self.router, "kvserve_router_requests_finished_total")
        for code in ["OK", "CANCELLED", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
                     "RESOURCE_EXHAUSTED", "UNAVAILABLE", "UNAUTHENTICATED", "INTERNAL"]:
            self.assertEqual(finished.get(f'{{code="{code}"}}'), 0.0, f"{code}: {finished}")
        routed = series(self.router, "kvserve_router_requests_routed_total")
        self.assertEqual(routed.get(f'{{worker="{self.worker.address}"}}'), 0.0, routed)

    def test_2_probes_on_every_port_leave_every_process_serving(self):
        stream = {"tokens": 0, "result": None}
        first_token = threading.Event()

        def run_stream():
            stub = lib.generation_stub(self.router.address)
            request = lib.request("Once upon a time", temperature=0, max_tokens=STREAM_TOKENS,
                                  ignore_eos=True)
            try:
                responses = []
                for response in stub.Generate(request, timeout=300):
                    responses.append(response)
                    stream["tokens"] += sum(len(c.token_ids) for c in response.choices)
                    first_token.set()
                stream["result"] = lib.collect(responses)
            except Exception as error:  # reported below
                stream["result"] = error
            first_token.set()

        streamer = threading.Thread(target=run_stream)
        streamer.start()
        self.assertTrue(first_token.wait(120), "the stream never started")

        ports = {}
        for server in (self.worker, self.router):
            for kind in ("grpc", "metrics", "http"):
                ports[f"{server.NAME} {kind}"] = getattr(server, f"{kind}_port")
        probes = [(name, port, method, path) for name, port in ports.items()
                  for method in METHODS for path in PATHS]
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(
                lambda p: (p, raw_http(p[1], request_bytes(p[2], p[3], b"{}" if p[2] in (
                    "POST", "PUT", "PATCH") else b""))), probes))
        self.assert_alive()
        self.assertIsNone(stream["result"], "the stream ended before the probes did")
        # Odd bytes too: a body larger than announced, garbage, a bare line.
        for port in ports.values():
            raw_http(port, b"\x16\x03\x01\x00\xa5garbage\r\n\r\n")
            raw_http(port, b"GET /health\r\n\r\n")
            raw_http(port, b"GET /health HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}{}{}")
        self.assert_alive()

        responses = {(name, method, path): response
                     for (name, _, method, path), response in answers}
        answered = {key: status_of(response) for key, response in responses.items()}
        for name in ("kvserve-worker metrics", "kvserve-router metrics"):
            for method in METHODS:
                self.assertEqual(answered[(name, method, "/nope")], 404, (name, method))
                self.assertEqual(answered[(name, method, "/")], 404, (name, method))
            self.assertEqual(answered[(name, "GET", "/metrics")], 200, name)
            self.assertEqual(answered[(name, "HEAD", "/metrics")], 200, name)
            self.assertEqual(answered[(name, "GET", "/health")], 200, name)
            for method in ("POST", "PUT", "DELETE", "BREW"):
                self.assertEqual(answered[(name, method, "/metrics")], 405, (name, method))
                self.assertIn(b"\r\nAllow: GET, HEAD\r\n",
                              responses[(name, method, "/metrics")])
        for name in ("kvserve-worker http", "kvserve-router http"):
            self.assertEqual(answered[(name, "GET", "/nope")], 404, name)
            self.assertEqual(answered[(name, "GET", "/")], 404, name)
            self.assertEqual(answered[(name, "GET", "/health")], 200, name)
            self.assertEqual(answered[(name, "HEAD", "/health")], 200, name)
            for method in ("POST", "PUT", "BREW"):
                self.assertEqual(answered[(name, method, "/health")], 405, (name, method))
                self.assertEqual(answered[(name, method, "/v1/models")], 405, (name, method))
            self.assertEqual(answered[(name, "GET", "/v1/completions")], 405, name)
            self.assertIn(b"\r\nAllow: POST\r\n", responses[(name, "GET", "/v1/completions")])
            self.assertIn(b"\r\nAllow: GET, HEAD\r\n", responses[(name, "POST", "/health")])

        # HEAD answers headers only: a GET pipelined behind it on the same connection is read as
        # the next response, not as the HEAD's body.
        for port in (self.worker.metrics_port, self.router.metrics_port, self.worker.http_port,
                     self.router.http_port):
            response = raw_http(port, b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n" +
                                request_bytes("GET", "/health"))
            parts = re.split(rb"(?=HTTP/1\.1 )", response)
            parts = [p for p in parts if p]
            self.assertEqual(len(parts), 2, response)
            self.assertEqual(parts[0].split(b"\r\n\r\n", 1)[1], b"", response)
            self.assertTrue(parts[1].startswith(b"HTTP/1.1 200 "), response)

        streamer.join(300)
        self.assertFalse(streamer.is_alive(), "the stream hung")
        self.assertNotIsInstance(stream["result"], Exception, stream["result"])
        tokens, _, reasons, usage = stream["result"]
        self.assertEqual(len(tokens), STREAM_TOKENS)
        self.assertEqual(reasons, [lib.PB["output_pb2"].FINISH_REASON_LENGTH])
        self.assert_alive()
        for server in (self.worker, self.router):
            self.assertIn("kvserve_build_info", server.metrics_text())
            with open(f"/proc/{server.process.pid}/maps") as maps:  # no civetweb left
                self.assertNotIn("civetweb", maps.read(), server.NAME)
        tokens, _, _, _ = self.generate(4)
        self.assertEqual(len(tokens), 4)
        self.assert_alive()

    def assert_second_process_refused(self, argv, flag, port, name):
        start = time.time()
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        elapsed = time.time() - start
        output = done.stdout + done.stderr
        self.assertNotEqual(done.returncode, 0, f"{name} with {flag}={port}:\n{output}")
        self.assertIn(f"{flag} 127.0.0.1:{port}: address already in use", output)
        # It failed before loading the model (the worker prints device= once loaded).
        self.assertNotIn("device=", output)
        self.assertNotIn(f"{name} ready", output)
        self.assertLess(elapsed, 20, output)

    def test_3_a_second_worker_on_a_used_port_exits_naming_it(self):
        binary = OPTIONS["worker"]
        used = {"--listen": self.worker.grpc_port, "--metrics_listen": self.worker.metrics_port,
                "--http_port": self.worker.http_port}
        for flag, port in used.items():
            args = {"--listen": "127.0.0.1:0", "--metrics_listen": "127.0.0.1:0",
                    "--http_port": "0"}
            args[flag] = str(port) if flag == "--http_port" else f"127.0.0.1:{port}"
            argv = [binary, *lib.WORKER_ARGS, *kvserve_e2e.model_args(OPTIONS),
                    *(f"{k}={v}" for k, v in args.items())]
            self.assert_second_process_refused(argv, flag, port, "kvserve-worker")
        self.assert_alive()

    def test_4_a_second_router_on_a_used_port_exits_naming_it(self):
        used = {"--listen": self.router.grpc_port, "--metrics_listen": self.router.metrics_port,
                "--http_port": self.router.http_port}
        for flag, port in used.items():
            args = {"--listen": "127.0.0.1:0", "--metrics_listen": "127.0.0.1:0",
                    "--http_port": "0"}
            args[flag] = str(port) if flag == "--http_port" else f"127.0.0.1:{port}"
            argv = [OPTIONS["router"], f"--workers={self.worker.address}",
                    *kvserve_e2e.model_args(OPTIONS), *(f"{k}={v}" for k, v in args.items())]
            self.assert_second_process_refused(argv, flag, port, "kvserve-router")
        self.assert_alive()

    def test_5_version_is_printed_exported_and_in_model_info(self):
        # Each binary's line (binaries linked at different commits may differ in the commit).
        lines = {}
        for binary in (OPTIONS["worker"], OPTIONS["router"], OPTIONS["cli"],
                       OPTIONS["generate"]):
            done = subprocess.run([binary, "--version"], capture_output=True, text=True,
                                  timeout=30)
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
            line = done.stdout.strip()
            self.assertRegex(line, "^" + VERSION_LINE.pattern + "$", binary)
            self.assertNotIn("Debug build", done.stdout + done.stderr)
            version, commit = VERSION_LINE.match(line).groups()
            self.assertEqual(version, OPTIONS["project-version"], binary)
            if commit != "unknown":
                # A commit of this repository (the tree may have moved on since the build).
                sha = commit.removesuffix("-dirty")
                known = subprocess.run(["git", "-C", OPTIONS["source-root"], "cat-file", "-e",
                                        sha + "^{commit}"], capture_output=True)
                self.assertEqual(known.returncode, 0, f"{binary}: {sha} is no commit here")
            lines[binary] = line

        # A running server says what its binary's --version says.
        for server in (self.worker, self.router):
            line = lines[server.binary]
            version, commit = VERSION_LINE.match(line).groups()
            self.assertEqual(series(server, "kvserve_build_info"),
                             {f'{{commit="{commit}",version="{version}"}}': 1.0}, server.NAME)
            stub = lib.generation_stub(server.address)
            info = stub.GetModelInfo(lib.PB["generation_pb2"].GetModelInfoRequest(), timeout=30)
            self.assertEqual(info.server_version, line, server.NAME)

if __name__ == "__main__":
    unittest.main(argv=UNITTEST_ARGV)
