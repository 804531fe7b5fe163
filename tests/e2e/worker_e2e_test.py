"""End-to-end test of kvserve-worker: a real worker process with the real default model on
loopback (port 0, ports read from its output), driven through Python stubs generated from proto/
at test time. Covers streaming generation (text, token ids, chat), Tokenize, GetModelInfo,
grpc.health.v1, client cancel and deadline (blocks returned, seen in /metrics), every bad input
with its status code and the field named in its message, and SIGTERM drain.

  python3 worker_e2e_test.py --worker=build/worker/kvserve-worker --proto-root=proto
"""

import math
import sys
import threading
import time
import unittest

import grpc

import kvserve_e2e
import router_e2e_lib as lib
from router_e2e_lib import PB, collect, sampling

OPTIONS, UNITTEST_ARGV = kvserve_e2e.parse_args(sys.argv)
WORKER = None
# A small KV pool (64 MiB: about 90 blocks of 16 tokens for SmolLM2-135M in fp32), so the context
# limit is reached with short prompts; threads kept low because CI machines are shared.
WORKER_ARGS = ["--kv_memory_bytes=67108864", "--max_num_seqs=16", "--max_num_batched_tokens=256",
               "--num_threads=2", "--drain_timeout_s=60"]


def start_worker():
    return kvserve_e2e.Worker(OPTIONS["worker"],
                              WORKER_ARGS + kvserve_e2e.model_args(OPTIONS)).start()


def setUpModule():
    global WORKER
    lib.setup(OPTIONS)
    WORKER = start_worker()


def tearDownModule():
    kvserve_e2e.cleanup()


def generation_stub(worker=None):
    return lib.generation_stub((worker or WORKER).address)


class WorkerE2eTest(unittest.TestCase):
    def test_health_check_reports_serving(self):
        channel = grpc.insecure_channel(WORKER.address)
        health = PB["health_pb2_grpc"].HealthStub(channel)
        response = health.Check(PB["health_pb2"].HealthCheckRequest(service=""), timeout=10)
        self.assertEqual(response.status, PB["health_pb2"].HealthCheckResponse.SERVING)

    def test_server_reflection_lists_every_service(self):
        # ServerReflectionRequest{list_services: ""} is field 7, length 0; the response's service
        # names are plain strings in its bytes (no reflection stubs needed).
        channel = grpc.insecure_channel(WORKER.address)
        reflect = channel.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            request_serializer=lambda raw: raw, response_deserializer=lambda raw: raw)
        response = next(reflect(iter([b"\x3a\x00"]), timeout=10))
        for service in [b"kvserve.v1.Generation", b"kvserve.v1.Worker", b"grpc.health.v1.Health"]:
            self.assertIn(service, response)

    def test_model_info_describes_the_default_model(self):
        info = generation_stub().GetModelInfo(PB["generation_pb2"].GetModelInfoRequest(),
                                              timeout=10)
        self.assertEqual(info.architecture, "llama")
        self.assertEqual(info.vocab_size, 49152)
        self.assertEqual(info.kv_block_size, 16)
        self.assertEqual(info.chat_template_format, "jinja")
        self.assertGreater(info.context_length, 512)
        self.assertEqual(info.limits.max_prompt_tokens, info.pool_limited_context_length - 1)
        self.assertGreaterEqual(info.context_length, info.pool_limited_context_length)
        self.assertTrue(info.eos_token_ids)

    def test_streaming_generation_from_text(self):
        request = PB["generation_pb2"].GenerateRequest(
            request_id="e2e-text", prompt="The capital of France is",
            sampling=sampling(temperature=0, max_tokens=6, ignore_eos=True))
        stream = generation_stub().Generate(request, timeout=120)
        first = next(stream)
        self.assertEqual(first.request_id, "e2e-text")
        responses = [first, *stream]
        tokens, text, reasons, usage = collect(responses)
        self.assertEqual(len(tokens), 6)
        self.assertGreater(len(responses), 1, "tokens must be streamed, not sent at the end")
        self.assertEqual(reasons, [PB["output_pb2"].FINISH_REASON_LENGTH])
        self.assertIn("Paris", text)
        self.assertEqual(usage.completion_tokens, 6)
        prompt_ids = generation_stub().Tokenize(
            PB["generation_pb2"].TokenizeRequest(prompt="The capital of France is"), timeout=10)
        self.assertEqual(usage.prompt_tokens, len(prompt_ids.token_ids))

    def test_token_id_input_matches_text_input(self):
        stub = generation_stub()
        ids = stub.Tokenize(PB["generation_pb2"].TokenizeRequest(prompt="Once upon a time"),
                            timeout=10).token_ids
        by_text = collect(stub.Generate(PB["generation_pb2"].GenerateRequest(
            prompt="Once upon a time", sampling=sampling(temperature=0, max_tokens=5)),
            timeout=120))
        by_ids = collect(stub.Generate(PB["generation_pb2"].GenerateRequest(
            prompt_token_ids=PB["generation_pb2"].TokenIds(ids=ids),
            sampling=sampling(temperature=0, max_tokens=5)), timeout=120))
        self.assertEqual(by_text[0], by_ids[0])

    def test_chat_input_is_rendered_with_the_template(self):
        stub = generation_stub()
        chat = PB["generation_pb2"].ChatConversation(messages=[
            PB["generation_pb2"].ChatMessage(role="user", content="What is 2+2?")])
        tokenized = stub.Tokenize(PB["generation_pb2"].TokenizeRequest(chat=chat), timeout=10)
        self.assertIn("<|im_start|>user\nWhat is 2+2?<|im_end|>", tokenized.rendered_prompt)
        self.assertTrue(tokenized.rendered_prompt.endswith("<|im_start|>assistant\n"))
        tokens, text, reasons, usage = collect(stub.Generate(
            PB["generation_pb2"].GenerateRequest(chat=chat,
                                                 sampling=sampling(temperature=0, max_tokens=8)),
            timeout=120))
        self.assertEqual(usage.prompt_tokens, len(tokenized.token_ids))
        self.assertTrue(tokens)
        self.assertEqual(len(reasons), 1)
        self.assertTrue(text.strip())

    def test_tokenize_returns_ids_and_bytes(self):
        response = generation_stub().Tokenize(
            PB["generation_pb2"].TokenizeRequest(prompt="Hello world, ça va?",
                                                 return_token_bytes=True), timeout=10)
        self.assertEqual(len(response.token_ids), len(response.token_bytes))
        self.assertEqual(b"".join(response.token_bytes).decode(), "Hello world, ça va?")
        self.assertEqual(response.rendered_prompt, "")

    def test_cancel_mid_stream_aborts_and_returns_blocks(self):
        cancelled_before = WORKER.metric('kvserve_requests_finished_total{reason="cancelled"}')
        stream = generation_stub().Generate(PB["generation_pb2"].GenerateRequest(
            prompt="Write a long story about a dragon.",
            sampling=sampling(temperature=0, max_tokens=400, ignore_eos=True)), timeout=300)
        next(stream)
        next(stream)
        self.assertGreater(WORKER.metric("kvserve_kv_blocks_used"), 0)
        stream.cancel()
        with self.assertRaises(grpc.RpcError) as raised:
            for _ in stream:
                pass
        self.assertEqual(raised.exception.code(), grpc.StatusCode.CANCELLED)
        WORKER.wait_metric('kvserve_requests_finished_total{reason="cancelled"}',
                           lambda v: v >= cancelled_before + 1)
        WORKER.wait_metric("kvserve_kv_blocks_used", lambda v: v == 0)

    def test_deadline_aborts_and_returns_blocks(self):
        cancelled_before = WORKER.metric('kvserve_requests_finished_total{reason="cancelled"}')
        # As many tokens as the pool holds (~2,900): the CPU worker decodes ~300 tokens/s on 2
        # cores, so they take far longer than the deadline (400 tokens once did, and no longer
        # do).
        info = generation_stub().GetModelInfo(PB["generation_pb2"].GetModelInfoRequest(),
                                              timeout=10)
        stream = generation_stub().Generate(PB["generation_pb2"].GenerateRequest(
            prompt="Count from one to a thousand:",
            sampling=sampling(temperature=0, max_tokens=info.pool_limited_context_length - 64,
                              ignore_eos=True)), timeout=1.5)
        with self.assertRaises(grpc.RpcError) as raised:
            for _ in stream:
                pass
        self.assertEqual(raised.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        WORKER.wait_metric('kvserve_requests_finished_total{reason="cancelled"}',
                           lambda v: v >= cancelled_before + 1)
        WORKER.wait_metric("kvserve_kv_blocks_used", lambda v: v == 0)

    def test_every_bad_input_gets_its_status_and_field(self):
        gen = PB["generation_pb2"]
        info = generation_stub().GetModelInfo(gen.GetModelInfoRequest(), timeout=10)
        context = info.pool_limited_context_length
        chat_user = gen.ChatMessage(role="user", content="hi")
        invalid = grpc.StatusCode.INVALID_ARGUMENT
        exhausted = grpc.StatusCode.RESOURCE_EXHAUSTED
        cases = [
            ("no input", gen.GenerateRequest(), invalid, "input"),
            ("empty prompt", gen.GenerateRequest(prompt=""), invalid, "prompt"),
            ("empty token ids", gen.GenerateRequest(prompt_token_ids=gen.TokenIds()), invalid,
             "prompt_token_ids.ids"),
            ("empty chat", gen.GenerateRequest(chat=gen.ChatConversation()), invalid,
             "chat.messages"),
            ("bad chat role", gen.GenerateRequest(chat=gen.ChatConversation(
                messages=[gen.ChatMessage(role="robot", content="x")])), invalid,
             "chat.messages[0].role"),
            ("prompt longer than context", gen.GenerateRequest(
                prompt_token_ids=gen.TokenIds(ids=[100] * (context + 5))), invalid, "input"),
            ("text prompt longer than context",
             gen.GenerateRequest(prompt=" hello" * (context + 5)), invalid, "input"),
            ("negative max_tokens", gen.GenerateRequest(
                prompt="x", sampling=sampling(max_tokens=-1)), invalid, "sampling.max_tokens"),
            ("max_tokens beyond context", gen.GenerateRequest(
                prompt="x", sampling=sampling(max_tokens=context)), invalid,
             "sampling.max_tokens"),
            ("negative temperature", gen.GenerateRequest(
                prompt="x", sampling=sampling(temperature=-0.5)), invalid, "sampling.temperature"),
            ("NaN temperature", gen.GenerateRequest(
                prompt="x", sampling=sampling(temperature=math.nan)), invalid,
             "sampling.temperature"),
            ("top_p zero", gen.GenerateRequest(prompt="x", sampling=sampling(top_p=0)), invalid,
             "sampling.top_p"),
            ("top_p above one", gen.GenerateRequest(prompt="x", sampling=sampling(top_p=1.5)),
             invalid, "sampling.top_p"),
            ("negative top_k", gen.GenerateRequest(prompt="x", sampling=sampling(top_k=-1)),
             invalid, "sampling.top_k"),
            ("negative n", gen.GenerateRequest(prompt="x", sampling=sampling(n=-1)), invalid,
             "sampling.n"),
            ("n too large", gen.GenerateRequest(
                prompt="x", sampling=sampling(n=info.limits.max_n + 1)), invalid, "sampling.n"),
            ("unknown token id", gen.GenerateRequest(
                prompt_token_ids=gen.TokenIds(ids=[1, 2, info.vocab_size])), invalid,
             "prompt_token_ids.ids[2]"),
            ("unknown stop token id", gen.GenerateRequest(
                prompt="x", sampling=sampling(stop_token_ids=[-3])), invalid,
             "sampling.stop_token_ids[0]"),
            ("too many stop strings", gen.GenerateRequest(prompt="x", sampling=sampling(
                stop=[f"s{i}" for i in range(info.limits.max_stop_strings + 1)])), invalid,
             "sampling.stop"),
            ("too long stop string", gen.GenerateRequest(
                prompt="x", sampling=sampling(stop=["ok", "y" * 1000])), invalid,
             "sampling.stop[1]"),
            ("empty stop string", gen.GenerateRequest(prompt="x", sampling=sampling(stop=[""])),
             invalid, "sampling.stop[0]"),
            ("other model", gen.GenerateRequest(model="llama-70b", prompt="x"),
             grpc.StatusCode.NOT_FOUND, "model"),
            ("never fits the KV pool", gen.GenerateRequest(chat=gen.ChatConversation(
                messages=[chat_user]), sampling=sampling(n=info.limits.max_n,
                                                          max_tokens=context - 100)),
             exhausted, "sampling.max_tokens"),
        ]
        stub = generation_stub()
        for name, request, code, field in cases:
            with self.subTest(name):
                self.assert_refused(lambda: list(stub.Generate(request, timeout=60)), code, field)

    def test_invalid_utf8_is_refused_naming_the_field(self):
        gen = PB["generation_pb2"]
        channel = grpc.insecure_channel(WORKER.address)
        raw_generate = channel.unary_stream(
            "/kvserve.v1.Generation/Generate", request_serializer=lambda raw: raw,
            response_deserializer=PB["output_pb2"].GenerateResponse.FromString)
        raw_tokenize = channel.unary_unary(
            "/kvserve.v1.Generation/Tokenize", request_serializer=lambda raw: raw,
            response_deserializer=gen.TokenizeResponse.FromString)

        def with_bad_bytes(message):
            # Python protobuf refuses to hold invalid UTF-8, so patch the serialized bytes.
            # Same length as the placeholder, so every length prefix stays right.
            bad = b"bad\xff\xfe bytes"
            assert len(bad) == len(b"PLACEHOLDER")
            return message.SerializeToString().replace(b"PLACEHOLDER", bad)

        prompt = with_bad_bytes(gen.GenerateRequest(prompt="PLACEHOLDER"))
        self.assert_refused(lambda: list(raw_generate(prompt, timeout=30)),
                            grpc.StatusCode.INVALID_ARGUMENT, "prompt")
        chat = with_bad_bytes(gen.GenerateRequest(chat=gen.ChatConversation(messages=[
            gen.ChatMessage(role="user", content="fine"),
            gen.ChatMessage(role="user", content="PLACEHOLDER")])))
        self.assert_refused(lambda: list(raw_generate(chat, timeout=30)),
                            grpc.StatusCode.INVALID_ARGUMENT, "chat.messages[1].content")
        stop = with_bad_bytes(gen.GenerateRequest(prompt="x", sampling=sampling(
            stop=["PLACEHOLDER"])))
        self.assert_refused(lambda: list(raw_generate(stop, timeout=30)),
                            grpc.StatusCode.INVALID_ARGUMENT, "sampling.stop[0]")
        tokenize = with_bad_bytes(gen.TokenizeRequest(prompt="PLACEHOLDER"))
        self.assert_refused(lambda: raw_tokenize(tokenize, timeout=30),
                            grpc.StatusCode.INVALID_ARGUMENT, "prompt")

    def test_metrics_endpoint_exports_every_documented_family(self):
        text = WORKER.metrics_text()
        for name in ["kvserve_kv_blocks_capacity", "kvserve_kv_blocks_free", "kvserve_kv_blocks_used",
                     "kvserve_kv_blocks_cached_evictable", "kvserve_kv_cache_usage_ratio",
                     "kvserve_prefix_cache_queried_tokens_total",
                     "kvserve_prefix_cache_hit_tokens_total", "kvserve_requests_running",
                     "kvserve_requests_waiting", "kvserve_preemptions_total",
                     "kvserve_prompt_tokens_total", "kvserve_generation_tokens_total",
                     "kvserve_requests_finished_total", "kvserve_time_to_first_token_seconds",
                     "kvserve_inter_token_latency_seconds", "kvserve_e2e_request_latency_seconds",
                     "kvserve_step_duration_seconds", "kvserve_step_tokens"]:
            self.assertIn(f"# TYPE {name} ", text)
        self.assertGreater(WORKER.metric("kvserve_kv_blocks_capacity"), 0)

    def assert_refused(self, call, code, field):
        with self.assertRaises(grpc.RpcError) as raised:
            call()
        self.assertEqual(raised.exception.code(), code, raised.exception.details())
        self.assertTrue(raised.exception.details().startswith(field + ": "),
                        f"{raised.exception.details()!r} should start with {field!r}")


class StructuredOutputTimeoutE2eTest(unittest.TestCase):
    """--structured_output_timeout_s on its own worker: a schema that cannot compile in time is
    DEADLINE_EXCEEDED naming the field, and the compile, finished in the background, serves the
    retry."""

    def test_a_compile_past_the_timeout_is_deadline_exceeded_then_cached(self):
        worker = kvserve_e2e.Worker(
            OPTIONS["worker"], WORKER_ARGS + ["--structured_output_timeout_s=0.000001"]
            + kvserve_e2e.model_args(OPTIONS)).start()
        stub = generation_stub(worker)
        schema = ('{"type": "object", "properties": {"city": {"type": "string"}, '
                  '"population": {"type": "integer"}}, "required": ["city", "population"]}')
        request = lib.request("A city as JSON:", temperature=0, max_tokens=40,
                              structured_output=PB["sampling_pb2"].StructuredOutput(
                                  json_schema=schema))
        with self.assertRaises(grpc.RpcError) as raised:
            list(stub.Generate(request, timeout=60))
        self.assertEqual(raised.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertTrue(raised.exception.details().startswith("sampling.structured_output: "),
                        raised.exception.details())
        deadline = time.time() + 30
        while True:
            try:
                tokens, text, _, _ = collect(stub.Generate(request, timeout=120))
                break
            except grpc.RpcError as error:
                self.assertEqual(error.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
                self.assertLess(time.time(), deadline, "the compile never reached the cache")
                time.sleep(0.2)
        self.assertGreater(len(tokens), 0)
        self.assertIn('"city"', text)
        self.assertEqual(worker.terminate(), 0, worker.log())


class DrainE2eTest(unittest.TestCase):
    """SIGTERM on its own worker: health NOT_SERVING, new requests UNAVAILABLE, the in-flight
    request finishes, exit code 0."""

    def test_sigterm_drains_then_exits_zero(self):
        worker = start_worker()
        stub = generation_stub(worker)
        gen = PB["generation_pb2"]
        stream = stub.Generate(gen.GenerateRequest(
            prompt="Tell me about the sea.",
            sampling=sampling(temperature=0, max_tokens=40, ignore_eos=True)), timeout=300)
        first = next(stream)
        exit_code = {}
        terminator = threading.Thread(target=lambda: exit_code.update(code=worker.terminate()))
        terminator.start()
        health = PB["health_pb2_grpc"].HealthStub(grpc.insecure_channel(worker.address))
        deadline = time.time() + 30
        status = None
        while time.time() < deadline:
            status = health.Check(PB["health_pb2"].HealthCheckRequest(), timeout=5).status
            if status == PB["health_pb2"].HealthCheckResponse.NOT_SERVING:
                break
            time.sleep(0.02)
        self.assertEqual(status, PB["health_pb2"].HealthCheckResponse.NOT_SERVING)
        with self.assertRaises(grpc.RpcError) as raised:
            list(stub.Generate(gen.GenerateRequest(prompt="x"), timeout=30))
        self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAVAILABLE)
        tokens, _, reasons, usage = collect([first, *stream])
        self.assertEqual(len(tokens), 40)
        self.assertEqual(reasons, [PB["output_pb2"].FINISH_REASON_LENGTH])
        self.assertIsNotNone(usage)
        terminator.join(120)
        self.assertEqual(exit_code.get("code"), 0, worker.log())


if __name__ == "__main__":
    unittest.main(argv=UNITTEST_ARGV, verbosity=2)
