"""End-to-end test of the logs (base/log.h) and request ids, on a router with its HTTP port in
front of two real workers, all with --log_format=json:

- a request's X-Request-Id comes back as a response header and in the response's id, and the
  router's and the serving worker's request_done lines name it (one made up by the server when
  the client sent none; every HTTP response carries one, an unknown path's 404 too); on gRPC the
  x-request-id metadata is honoured and returned;
- a worker killed with SIGKILL mid-stream: the router logs worker_lost and request_migrated
  (from, to, tokens so far), its request_done lists both workers, and the surviving worker's
  request_done carries the same id;
- a router pointed at a dead port logs one worker_unreachable line, not one per retry (each
  retry is a DEBUG worker_connect_failed line).

Every line a process writes that starts with "{" must be one JSON object.

  python3 router_logs_e2e_test.py --worker=build/worker/kvserve-worker \\
      --router=build/router/kvserve-router --proto-root=proto
"""

import json
import re
import signal
import socket
import sys
import time
import unittest
import urllib.error
import urllib.request

import kvserve_e2e
import router_e2e_lib as lib

OPTIONS, UNITTEST_ARGV = kvserve_e2e.parse_args(sys.argv)
JSON_LOGS = "--log_format=json"

setUpModule, tearDownModule = lib.module_fixtures(OPTIONS)


def events(process, name=None):
    """Every JSON log line of `process` (a Worker or Router) as a dict, or those of event `name`.
    A line that starts with "{" and does not parse fails the test."""
    result = []
    for line in list(process.output):
        if not line.startswith("{"):
            continue
        event = json.loads(line)  # raises on a malformed line
        if name is None or event.get("event") == name:
            result.append(event)
    return result


def wait_events(test, process, name, predicate, count=1, timeout_s=30):
    """The events `name` of `process` that satisfy `predicate`, once there are `count` of them."""
    deadline = time.time() + timeout_s
    while True:
        found = [e for e in events(process, name) if predicate(e)]
        if len(found) >= count or time.time() > deadline:
            break
        time.sleep(0.05)
    test.assertGreaterEqual(len(found), count, f"{name}: {found}\n" + process.log())
    return found


def http_request(server, path, body=None, headers=None):
    """(status, headers, body bytes) of one request to `server`'s HTTP port."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.http_port}{path}", data=data,
        method="POST" if data is not None else "GET",
        headers={"Authorization": f"Bearer {kvserve_e2e.HTTP_KEY}",
                 "Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RouterLogsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.workers = lib.start_workers(OPTIONS, 2, [JSON_LOGS])
        cls.router = lib.start_http_router(OPTIONS, cls.workers,
                                           [JSON_LOGS, "--status_interval_ms=100"])

    def worker(self, address):
        return next(w for w in self.workers if w.address == address)

    def test_1_the_request_id_is_echoed_and_in_every_request_done(self):
        status, headers, body = http_request(
            self.router, "/v1/completions",
            {"model": "smol", "prompt": "The capital of France is", "max_tokens": 4,
             "temperature": 0}, {"X-Request-Id": "logs-e2e-1"})
        self.assertEqual(status, 200, body)
        self.assertEqual(headers["X-Request-Id"], "logs-e2e-1")
        self.assertEqual(json.loads(body)["id"], "cmpl-logs-e2e-1")
        done = wait_events(self, self.router, "request_done", lambda e: e["id"] == "logs-e2e-1")
        self.assertEqual(len(done), 1, done)
        self.assertEqual(done[0]["code"], "OK")
        self.assertEqual(done[0]["level"], "info")
        self.assertEqual(done[0]["output_tokens"], 4)
        self.assertGreater(done[0]["prompt_tokens"], 0)
        self.assertEqual(done[0]["migrations"], 0)
        self.assertEqual(done[0]["tenant"], "t")
        self.assertGreater(done[0]["total_ms"], 0)
        self.assertGreaterEqual(done[0]["total_ms"], done[0]["ttft_ms"])
        served_by = self.worker(done[0]["workers"])
        on_worker = wait_events(self, served_by, "request_done",
                                lambda e: e["id"] == "logs-e2e-1")
        self.assertEqual(on_worker[0]["output_tokens"], 4)
        self.assertEqual(on_worker[0]["prompt_tokens"], done[0]["prompt_tokens"])
        self.assertEqual(on_worker[0]["preemptions"], 0)
        self.assertEqual(on_worker[0]["code"], "OK")

        # No X-Request-Id: the server makes one, echoes it, and it is the response's id.
        status, headers, body = http_request(
            self.router, "/v1/chat/completions",
            {"model": "smol", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
        self.assertEqual(status, 200, body)
        made = headers["X-Request-Id"]
        self.assertRegex(made, r"^[0-9a-f]{32}$")
        self.assertEqual(json.loads(body)["id"], "chatcmpl-" + made)
        wait_events(self, self.router, "request_done", lambda e: e["id"] == made)

        # Every response carries one: an unknown path, a refused request.
        status, headers, _ = http_request(self.router, "/nowhere", headers={"X-Request-Id": "n-1"})
        self.assertEqual((status, headers["X-Request-Id"]), (404, "n-1"))
        status, headers, _ = http_request(
            self.router, "/v1/completions", {"model": "smol", "prompt": "x", "max_tokens": 10000000},
            {"X-Request-Id": "bad-1"})
        self.assertEqual((status, headers["X-Request-Id"]), (400, "bad-1"))
        refused = wait_events(self, self.router, "request_refused", lambda e: e["id"] == "bad-1")
        self.assertEqual(refused[0]["code"], "INVALID_ARGUMENT")
        status, headers, _ = http_request(
            self.router, "/v1/completions", {"model": "smol", "prompt": "x", "max_tokens": 1},
            {"X-Request-Id": "no-auth-1", "Authorization": "Bearer wrong"})
        self.assertEqual((status, headers["X-Request-Id"]), (401, "no-auth-1"))
        refused = wait_events(self, self.router, "request_refused",
                              lambda e: e["id"] == "no-auth-1")
        self.assertEqual((refused[0]["reason"], refused[0]["code"]),
                         ("unauthenticated", "UNAUTHENTICATED"))

        # gRPC: the x-request-id metadata is honoured (the response's request_id, the logs) and
        # returned in the initial metadata.
        stub = lib.generation_stub(self.router.address)
        call = stub.Generate(lib.request("Hello", temperature=0, max_tokens=2),
                             metadata=[("authorization", f"Bearer {kvserve_e2e.HTTP_KEY}"),
                                       ("x-request-id", "grpc-logs-1")], timeout=120)
        responses = list(call)
        self.assertEqual(dict(call.initial_metadata()).get("x-request-id"), "grpc-logs-1")
        self.assertTrue(all(r.request_id == "grpc-logs-1" for r in responses))
        done = wait_events(self, self.router, "request_done", lambda e: e["id"] == "grpc-logs-1")
        wait_events(self, self.worker(done[0]["workers"]), "request_done",
                    lambda e: e["id"] == "grpc-logs-1")

    def test_2_a_worker_killed_mid_stream_is_logged_lost_and_the_request_migrated(self):
        routed = self.router.series("kvserve_router_requests_routed_total")
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.router.http_port}/v1/completions",
            data=json.dumps({"model": "smol", "prompt": "A very long story begins:",
                             "max_tokens": 120, "temperature": 0, "ignore_eos": True,
                             "stream": True}).encode(),
            headers={"Authorization": f"Bearer {kvserve_e2e.HTTP_KEY}",
                     "Content-Type": "application/json", "X-Request-Id": "logs-failover"})
        victim = None
        chunks = 0
        with urllib.request.urlopen(request, timeout=300) as response:
            self.assertEqual(response.headers["X-Request-Id"], "logs-failover")
            for raw in response:
                line = raw.decode().strip()
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    break
                self.assertNotIn("error", json.loads(line[6:]), line)
                chunks += 1
                if chunks == 3:
                    now = self.router.series("kvserve_router_requests_routed_total")
                    victim = next(w for w in self.workers
                                  if now.get(f'{{worker="{w.address}"}}', 0) >
                                  routed.get(f'{{worker="{w.address}"}}', 0))
                    victim.process.send_signal(signal.SIGKILL)
        self.assertIsNotNone(victim, "the stream ended before the kill")
        survivor = next(w for w in self.workers if w is not victim)

        lost = wait_events(self, self.router, "worker_lost",
                           lambda e: e["worker"] == victim.address)
        self.assertEqual(len(lost), 1, lost)
        self.assertEqual(lost[0]["level"], "warning")
        migrated = wait_events(self, self.router, "request_migrated",
                               lambda e: e["id"] == "logs-failover")
        self.assertEqual(len(migrated), 1, migrated)
        self.assertEqual(migrated[0]["from"], victim.address)
        self.assertEqual(migrated[0]["to"], survivor.address)
        self.assertGreaterEqual(migrated[0]["tokens"], 3)
        self.assertTrue(migrated[0]["reason"], migrated)
        done = wait_events(self, self.router, "request_done",
                           lambda e: e["id"] == "logs-failover")
        self.assertEqual(done[0]["code"], "OK", done)
        self.assertEqual(done[0]["workers"], f"{victim.address},{survivor.address}")
        self.assertEqual(done[0]["migrations"], 1)
        self.assertEqual(done[0]["output_tokens"], 120)
        on_survivor = wait_events(self, survivor, "request_done",
                                  lambda e: e["id"] == "logs-failover")
        self.assertEqual(on_survivor[0]["code"], "OK")
        # Only the tokens after the move were generated there.
        self.assertEqual(on_survivor[0]["output_tokens"], 120 - migrated[0]["tokens"])
        # The router keeps retrying the dead worker: logged once, not once per retry.
        time.sleep(3)
        self.assertEqual(len(events(self.router, "worker_lost")), 1)
        self.assertEqual([e for e in events(self.router, "worker_unreachable")
                          if e["worker"] == victim.address], [])

    def test_3_a_dead_worker_address_is_logged_unreachable_once(self):
        dead = f"127.0.0.1:{free_port()}"
        router = lib.Router(OPTIONS["router"], f"--workers={dead}",
                            [JSON_LOGS, "--log_level=debug", *kvserve_e2e.model_args(OPTIONS)])
        router.start()
        # Three failed attempts (each a DEBUG line), and still one warning.
        attempts = wait_events(self, router, "worker_connect_failed",
                               lambda e: e["worker"] == dead, count=3, timeout_s=90)
        self.assertEqual(attempts[-1]["level"], "debug")
        unreachable = [e for e in events(router, "worker_unreachable") if e["worker"] == dead]
        self.assertEqual(len(unreachable), 1, router.log())
        self.assertEqual(unreachable[0]["level"], "warning")
        self.assertEqual(unreachable[0]["attempts"], 1)
        # A request now is refused, and says so.
        stub = lib.generation_stub(router.address)
        with self.assertRaises(Exception):
            list(stub.Generate(lib.request("Hi", max_tokens=1), timeout=10,
                               metadata=[("x-request-id", "to-nowhere")]))
        refused = wait_events(self, router, "request_refused", lambda e: e["id"] == "to-nowhere")
        self.assertEqual(refused[0]["code"], "UNAVAILABLE")

    def test_4_every_json_line_parses(self):
        for process in [self.router, *self.workers]:
            for line in process.output:
                if line.startswith("{"):
                    event = json.loads(line)
                    self.assertTrue({"time", "level", "event"} <= event.keys(), line)
                    self.assertRegex(event["time"],
                                     r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


if __name__ == "__main__":
    unittest.main(argv=UNITTEST_ARGV)
