"""End-to-end test of the OpenAI-compatible HTTP API (--http_port) with the official `openai`
Python package as the client and raw sockets for bad HTTP, served by a kvserve-worker or, with
--router=PATH, by a kvserve-router in front of one (the same tests: the router's HTTP front end
must answer as the worker's). Real processes with the default model on loopback (ports 0, read
from their output).

Covers completions and chat, streaming and not, n = 2, logprobs, stop, seed reproducibility,
the same greedy text as gRPC, every error status (400 / 401 / 404 / 413 / 429 / 503 / 504), a
client that disconnects mid-stream (its blocks come back: /metrics), /v1/models, /health,
/tokenize, /detokenize, HTTP metrics; and bad HTTP (malformed request line, huge headers,
chunked bodies, a slow sender, invalid UTF-8, a 10 MB prompt): a 4xx, and the server serves on.
Tools are in http_tools_e2e_test.py, structured output in http_structured_output_e2e_test.py.

  python3 http_e2e_test.py --worker=build/worker/kvserve-worker --proto-root=proto \
      [--router=build/router/kvserve-router]
"""

import json
import socket
import sys
import threading
import time
import unittest

import openai

import kvserve_e2e
import router_e2e_lib

OPTIONS, UNITTEST_ARGV = kvserve_e2e.parse_args(sys.argv)
WORKER = None  # the worker that runs the requests (its KV metrics)
SERVER = None  # the process whose HTTP port the tests talk to: WORKER, or the router
KEY = kvserve_e2e.HTTP_KEY
WORKER_ARGS = ["--kv_memory_bytes=67108864", "--max_num_seqs=16", "--max_num_batched_tokens=256",
               "--num_threads=2"]
VIA_ROUTER = "router" in OPTIONS
MODEL_ARGS = kvserve_e2e.model_args(OPTIONS)


def setUpModule():
    global WORKER, SERVER
    router_e2e_lib.setup(OPTIONS)
    WORKER, SERVER = router_e2e_lib.start_http_server(OPTIONS, WORKER_ARGS)


def tearDownModule():
    kvserve_e2e.cleanup()


def client(worker=None, key=KEY):
    return kvserve_e2e.openai_client(worker or SERVER, key)


def http(method, path, body=None, headers=None, worker=None):
    """(status, parsed JSON body) of one request."""
    return kvserve_e2e.http_json(worker or SERVER, method, path, body, headers)


def raw(data, worker=None, read_timeout_s=30):
    """Sends raw bytes and returns what the server answers until it closes (or the timeout)."""
    with socket.create_connection(("127.0.0.1", (worker or SERVER).http_port), timeout=10) as s:
        s.sendall(data)
        s.settimeout(read_timeout_s)
        received = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                received += chunk
                if b"\r\n\r\n" in received and b"Connection: keep-alive" in received:
                    head, _, rest = received.partition(b"\r\n\r\n")
                    length = [int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:")]
                    if length and len(rest) >= length[0]:
                        break
        except (socket.timeout, ConnectionResetError):
            pass
        return received


def status_of(response_bytes):
    return int(response_bytes.split(b" ", 2)[1]) if response_bytes else None


class OpenAiClientTest(unittest.TestCase):
    def test_completion_not_streamed_has_text_usage_and_finish_reason(self):
        result = client().completions.create(model="smol", prompt="The capital of France is",
                                             max_tokens=8, temperature=0)
        self.assertEqual(result.object, "text_completion")
        self.assertEqual(result.model, "smol")
        self.assertEqual(len(result.choices), 1)
        self.assertTrue(result.choices[0].text)
        self.assertEqual(result.choices[0].finish_reason, "length")
        self.assertEqual(result.usage.completion_tokens, 8)
        self.assertGreater(result.usage.prompt_tokens, 0)
        self.assertEqual(result.usage.total_tokens,
                         result.usage.prompt_tokens + result.usage.completion_tokens)

    def test_completion_streamed_matches_not_streamed_and_reports_usage(self):
        kwargs = dict(model="smol", prompt="Once upon a time", max_tokens=12, temperature=0)
        whole = client().completions.create(**kwargs).choices[0].text
        text, finish, usage = "", None, None
        for chunk in client().completions.create(stream=True,
                                                 stream_options={"include_usage": True},
                                                 **kwargs):
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                text += choice.text
                finish = choice.finish_reason or finish
        self.assertEqual(text, whole)
        self.assertEqual(finish, "length")
        self.assertEqual(usage.completion_tokens, 12)

    def test_chat_streamed_and_not(self):
        messages = [{"role": "user", "content": "Name a colour."}]
        result = client().chat.completions.create(model="smol", messages=messages,
                                                  max_tokens=10, temperature=0)
        self.assertEqual(result.object, "chat.completion")
        self.assertEqual(result.choices[0].message.role, "assistant")
        self.assertTrue(result.choices[0].message.content)
        self.assertIn(result.choices[0].finish_reason, ("stop", "length"))
        streamed, roles = "", []
        for chunk in client().chat.completions.create(model="smol", messages=messages,
                                                      max_tokens=10, temperature=0, stream=True):
            for choice in chunk.choices:
                if choice.delta.role:
                    roles.append(choice.delta.role)
                streamed += choice.delta.content or ""
        self.assertEqual(streamed, result.choices[0].message.content)
        self.assertEqual(roles, ["assistant"])

    def test_n_2_gives_two_choices_in_both_modes(self):
        result = client().completions.create(model="smol", prompt="Hello", max_tokens=5, n=2,
                                             temperature=1.0, seed=7)
        self.assertEqual(sorted(c.index for c in result.choices), [0, 1])
        self.assertEqual(result.usage.completion_tokens, 10)
        indices = set()
        for chunk in client().chat.completions.create(
                model="smol", messages=[{"role": "user", "content": "Hi"}], max_tokens=4, n=2,
                stream=True):
            indices.update(choice.index for choice in chunk.choices)
        self.assertEqual(indices, {0, 1})

    def test_logprobs_completions_and_chat(self):
        result = client().completions.create(model="smol", prompt="One, two,", max_tokens=4,
                                             temperature=0, logprobs=2)
        logprobs = result.choices[0].logprobs
        self.assertEqual(len(logprobs.tokens), 4)
        self.assertEqual(len(logprobs.token_logprobs), 4)
        self.assertTrue(all(lp <= 0 for lp in logprobs.token_logprobs))
        self.assertEqual(len(logprobs.top_logprobs[0]), 2)
        chat = client().chat.completions.create(
            model="smol", messages=[{"role": "user", "content": "Hi"}], max_tokens=3,
            temperature=0, logprobs=True, top_logprobs=3)
        content = chat.choices[0].logprobs.content
        self.assertEqual(len(content), chat.usage.completion_tokens)
        self.assertEqual(len(content[0].top_logprobs), 3)

    def test_stop_string_ends_the_text_before_it(self):
        base = client().completions.create(model="smol", prompt="1, 2, 3, 4,", max_tokens=12,
                                           temperature=0).choices[0].text
        stop = base.strip()[:2].strip() or base[:1]
        result = client().completions.create(model="smol", prompt="1, 2, 3, 4,", max_tokens=12,
                                             temperature=0, stop=[stop])
        self.assertEqual(result.choices[0].finish_reason, "stop")
        self.assertNotIn(stop, result.choices[0].text)

    def test_seed_reproduces_sampled_text(self):
        kwargs = dict(model="smol", prompt="A story:", max_tokens=16, temperature=1.0, seed=1234)
        first = client().completions.create(**kwargs).choices[0].text
        second = client().completions.create(**kwargs).choices[0].text
        self.assertEqual(first, second)

    def test_same_greedy_text_through_http_as_through_grpc(self):
        prompt = "The KV cache is"
        http_text = client().completions.create(model="smol", prompt=prompt, max_tokens=16,
                                                temperature=0).choices[0].text
        stub = router_e2e_lib.generation_stub(SERVER.address)
        request = router_e2e_lib.request(prompt, max_tokens=16, temperature=0)
        metadata = [("authorization", f"Bearer {KEY}")] if VIA_ROUTER else None
        grpc_text = "".join(d.text for r in stub.Generate(request, timeout=120,
                                                          metadata=metadata)
                            for d in r.choices)
        self.assertEqual(http_text, grpc_text)

    def test_models_health_tokenize_detokenize(self):
        models = client().models.list()
        ids = [m.id for m in models.data]
        # The served id, the model file's own name when it differs, and the two aliases.
        self.assertIn("smol", ids)
        self.assertIn("gpt-3.5-turbo", ids)
        self.assertEqual(len(ids), len(set(ids)))
        status, body = http("GET", "/health")
        self.assertEqual(status, 200)
        status, body = http("POST", "/tokenize", {"prompt": "Hello world"})
        self.assertEqual(status, 200)
        self.assertEqual(body["count"], len(body["tokens"]))
        status, text = http("POST", "/detokenize", {"tokens": body["tokens"]})
        self.assertEqual(status, 200)
        self.assertIn("Hello world", text["prompt"])

    def test_error_statuses(self):
        with self.assertRaises(openai.BadRequestError) as bad:
            client().completions.create(model="smol", prompt="x", max_tokens=4, top_p=0)
        self.assertEqual(bad.exception.status_code, 400)
        self.assertEqual(bad.exception.body["param"], "top_p")
        self.assertIn("must be in (0, 1]", bad.exception.body["message"])
        with self.assertRaises(openai.BadRequestError) as wrong_type:
            client().completions.create(model="smol", prompt="x", max_tokens=4,
                                        extra_body={"temperature": "hot"})
        self.assertEqual(wrong_type.exception.body["param"], "temperature")
        with self.assertRaises(openai.AuthenticationError) as auth:
            client(key="wrong").completions.create(model="smol", prompt="x", max_tokens=4)
        self.assertEqual(auth.exception.status_code, 401)
        with self.assertRaises(openai.NotFoundError) as missing:
            client().completions.create(model="gpt-4", prompt="x", max_tokens=4)
        self.assertEqual(missing.exception.status_code, 404)
        self.assertEqual(missing.exception.body["code"], "model_not_found")
        with self.assertRaises(openai.APIStatusError) as late:
            client().completions.create(model="smol", prompt="x", max_tokens=1000,
                                        extra_body={"ignore_eos": True},
                                        extra_headers={"X-Request-Timeout-Ms": "300"})
        self.assertEqual(late.exception.status_code, 504)
        status, body = http("POST", "/v1/completions", b"x" * (9 << 20))
        self.assertEqual(status, 413)
        WORKER.wait_metric("kvserve_kv_blocks_used", lambda v: v == 0)

    def test_client_disconnect_mid_stream_frees_its_blocks(self):
        cancelled = WORKER.metric('kvserve_requests_finished_total{reason="cancelled"}')
        stream = client().completions.create(model="smol", prompt="Count: 1, 2, 3,",
                                             max_tokens=1000, stream=True,
                                             extra_body={"ignore_eos": True})
        received = 0
        for _ in stream:
            received += 1
            if received == 5:
                break
        self.assertGreater(WORKER.metric("kvserve_kv_blocks_used"), 0)
        stream.close()
        WORKER.wait_metric('kvserve_requests_finished_total{reason="cancelled"}',
                           lambda v: v >= cancelled + 1)
        WORKER.wait_metric("kvserve_kv_blocks_used", lambda v: v == 0)
        SERVER.wait_metric("kvserve_http_open_streams", lambda v: v == 0)

    def test_http_metrics_count_by_endpoint_and_code(self):
        http("GET", "/health")
        text = SERVER.metrics_text()
        self.assertIn('kvserve_http_requests_total{code="200",endpoint="/health"}', text)
        self.assertIn("kvserve_http_open_streams", text)


class BadHttpTest(unittest.TestCase):
    def assert_still_serving(self):
        self.assertEqual(http("GET", "/health")[0], 200)

    def test_malformed_request_line_is_400(self):
        self.assertEqual(status_of(raw(b"GARBAGE\r\n\r\n")), 400)
        self.assertEqual(status_of(raw(b"GET / HTTP/9\r\n\r\n")), 400)
        self.assert_still_serving()

    def test_huge_headers_are_431(self):
        request = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100000 + b"\r\n\r\n"
        self.assertEqual(status_of(raw(request)), 431)
        self.assert_still_serving()

    def test_chunked_bodies_are_read_and_malformed_chunks_are_400(self):
        body = json.dumps({"prompt": "Hello"}).encode()
        chunked = (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                   KEY.encode() + b"\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
                   b"%x\r\n" % 5 + body[:5] + b"\r\n" + b"%x\r\n" % (len(body) - 5) + body[5:] +
                   b"\r\n0\r\n\r\n")
        answer = raw(chunked)
        self.assertEqual(status_of(answer), 200, answer)
        self.assertIn(b'"tokens"', answer)
        broken = (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b"zz\r\nhello\r\n0\r\n\r\n")
        self.assertEqual(status_of(raw(broken)), 400)
        self.assert_still_serving()

    def test_slow_sender_is_cut_off_by_the_header_timeout(self):
        start = time.time()
        with socket.create_connection(("127.0.0.1", SERVER.http_port), timeout=5) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            closed = False
            for _ in range(40):
                try:
                    s.sendall(b"X")
                    time.sleep(0.5)
                    s.settimeout(0.01)
                    if s.recv(1) == b"":
                        closed = True
                        break
                except socket.timeout:
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    closed = True
                    break
            self.assertTrue(closed, "a slow sender must be disconnected")
        self.assertLess(time.time() - start, 15)
        self.assert_still_serving()

    def test_invalid_utf8_in_json_is_400(self):
        status, body = http("POST", "/v1/completions", b'{"prompt": "\xff\xfe", "max_tokens": 2}')
        self.assertEqual(status, 400)
        self.assertEqual(body["error"]["param"], "body")
        self.assert_still_serving()

    def test_ten_megabyte_prompt_is_413(self):
        status, body = http("POST", "/v1/completions",
                            {"prompt": "a" * (10 << 20), "max_tokens": 2})
        self.assertEqual(status, 413)
        self.assertEqual(body["error"]["type"], "invalid_request_error")
        self.assert_still_serving()

    def test_keep_alive_serves_several_requests_on_one_connection(self):
        request = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
        with socket.create_connection(("127.0.0.1", SERVER.http_port), timeout=10) as s:
            for _ in range(3):
                s.sendall(request)
                answer = s.recv(65536)
                self.assertTrue(answer.startswith(b"HTTP/1.1 200"), answer)


class QueueAndDrainTest(unittest.TestCase):
    """429 when the queue is full, then drain: 503. On a worker: one running sequence and one
    waiting slot. Through a router: a worker whose small pool (8 MiB) fits one request at a time
    (its prompt alone takes all but 4 blocks), and a router queue of one."""

    def test_queue_full_is_429_and_draining_is_503(self):
        if VIA_ROUTER:
            worker = kvserve_e2e.Worker(OPTIONS["worker"], [
                "--kv_memory_bytes=8388608", "--max_num_seqs=4", "--max_num_batched_tokens=256",
                "--num_threads=2", "--drain_timeout_s=5"] + MODEL_ARGS).start()
            server = router_e2e_lib.start_http_router(OPTIONS, [worker],
                                                      ["--max_queue=1", "--drain_timeout_s=5"])
        else:
            worker = server = kvserve_e2e.Worker(OPTIONS["worker"], [
                "--kv_memory_bytes=67108864", "--max_num_seqs=1", "--max_num_batched_tokens=256",
                "--num_threads=2", "--http_port=0", "--max_waiting_requests=1",
                "--drain_timeout_s=5", "--http_model_aliases=smol"] + MODEL_ARGS).start()
        statuses = []
        prompts, max_tokens = ["Go"] * 4, 300
        if VIA_ROUTER:
            # Each request's prompt fills all but 4 blocks of the pool (distinct prompts: no
            # shared prefix), so once one runs no other fits, whatever the worker reports.
            deadline = time.time() + 30
            total = 0
            while not total and time.time() < deadline:  # until the worker's first report
                total = server.worker_gauge("kvserve_router_worker_total_blocks", worker) or 0
                time.sleep(0.05)
            self.assertGreater(total, 6)
            prompt_len = 16 * (int(total) - 4)
            prompts = [[100 + r] + [(r * 7 + i) % 40000 + 100 for i in range(prompt_len - 1)]
                       for r in range(4)]
            max_tokens = 40

        def long_request(prompt):
            try:
                client(server).completions.create(model="smol", prompt=prompt,
                                                  max_tokens=max_tokens,
                                                  extra_body={"ignore_eos": True})
                statuses.append(200)
            except openai.APIStatusError as error:
                statuses.append(error.status_code)
            except openai.APIConnectionError:
                statuses.append("connection")

        threads = [threading.Thread(target=long_request, args=(p,)) for p in prompts]
        for thread in threads:
            thread.start()
            time.sleep(0.05)
        deadline = time.time() + 30
        while 429 not in statuses and time.time() < deadline:
            time.sleep(0.05)
        self.assertIn(429, statuses, (statuses, server.log() if VIA_ROUTER else ""))
        server.process.send_signal(15)  # drain
        deadline = time.time() + 10
        while time.time() < deadline and http("GET", "/health", worker=server)[0] != 503:
            time.sleep(0.05)
        self.assertEqual(http("GET", "/health", worker=server)[0], 503)
        status, body = http("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2},
                            worker=server)
        self.assertEqual(status, 503)
        self.assertEqual(body["error"]["code"], "service_unavailable")
        for thread in threads:
            thread.join(60)
        self.assertEqual(server.process.wait(60), 0)
        if worker is not server:
            self.assertEqual(worker.terminate(), 0)


if __name__ == "__main__":
    unittest.main(argv=UNITTEST_ARGV, verbosity=2)
