"""End-to-end test of what a new user runs first against the OpenAI-compatible HTTP API, with the
official `openai` package, on the default model, served by a kvserve-worker (--http_port, no API
key, no aliases: as README.md starts it) or, with --router=PATH, by a kvserve-router in front of
one: README.md's Python snippet runs as written; the documented model id is the served one,
models.retrieve answers it and 404s another; a full tool round trip (call -> tool result ->
answer) works on the default model, whose own chat template ignores tools; errors name the
request's fields, one message per rule; stop_reason and system_fingerprint are as vLLM and
OpenAI give them.

  python3 http_first_hour_e2e_test.py --worker=build/worker/kvserve-worker --proto-root=proto \
      [--router=build/router/kvserve-router]
"""

import contextlib
import io
import json
import os
import re
import sys
import time
import unittest

import openai

import kvserve_e2e
import router_e2e_lib

OPTIONS, UNITTEST_ARGV = kvserve_e2e.parse_args(sys.argv)
SERVER = None  # the worker, or the router in front of it
STARTED_AT = 0
README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")
DOCUMENTED_MODEL = "SmolLM2-135M-Instruct"
# The default model file's own name (its GGUF general.name), still accepted as an alias.
FILE_NAME = "Smollm2 135M 8k Lc100K Mix1 Ep2"
WORKER_ARGS = ["--kv_memory_bytes=33554432", "--max_num_seqs=4", "--max_num_batched_tokens=256",
               "--num_threads=2", "--http_port=0"]


def setUpModule():
    global SERVER, STARTED_AT
    STARTED_AT = int(time.time())
    worker = kvserve_e2e.Worker(OPTIONS["worker"],
                                WORKER_ARGS + kvserve_e2e.model_args(OPTIONS)).start()
    SERVER = worker
    if "router" in OPTIONS:
        SERVER = router_e2e_lib.start_router(OPTIONS, [worker], ["--http_port=0"])


def tearDownModule():
    kvserve_e2e.cleanup()


def client():
    return openai.OpenAI(base_url=f"http://127.0.0.1:{SERVER.http_port}/v1", api_key="unused",
                         max_retries=0, timeout=120)


def readme_python_snippet():
    """The README's first ```python block that uses the openai package."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        if "from openai import OpenAI" in block:
            return block
    raise AssertionError("README.md has no openai snippet")


def default_model_only():
    return "model" not in OPTIONS


class ModelNameTest(unittest.TestCase):

    @unittest.skipUnless(default_model_only(), "the README is about the default model")
    def test_the_readme_snippet_runs_as_written(self):
        snippet = readme_python_snippet()
        self.assertIn("http://127.0.0.1:8000/v1", snippet)
        snippet = snippet.replace("http://127.0.0.1:8000/v1",
                                  f"http://127.0.0.1:{SERVER.http_port}/v1")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(snippet, "README.md", "exec"), {})
        self.assertTrue(out.getvalue().strip(), "the snippet printed nothing")

    @unittest.skipUnless(default_model_only(), "the documented id is the default model's")
    def test_the_documented_id_is_served_and_retrieved(self):
        models = client().models.list().data
        self.assertEqual(models[0].id, DOCUMENTED_MODEL)
        self.assertIn(FILE_NAME, [m.id for m in models])
        for model in models:
            self.assertGreaterEqual(model.created, STARTED_AT - 5)
            self.assertLessEqual(model.created, time.time() + 5)
        retrieved = client().models.retrieve(DOCUMENTED_MODEL)
        self.assertEqual(retrieved.id, DOCUMENTED_MODEL)
        self.assertEqual(retrieved.object, "model")
        self.assertEqual(retrieved.created, models[0].created)
        # The file's own name (spaces and all, percent-encoded by the client) is an alias.
        self.assertEqual(client().models.retrieve(FILE_NAME).id, FILE_NAME)
        for model in (DOCUMENTED_MODEL, FILE_NAME):
            r = client().chat.completions.create(
                model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
            self.assertEqual(r.model, model)

    def test_an_unknown_id_is_404_model_not_found(self):
        with self.assertRaises(openai.NotFoundError) as missing:
            client().models.retrieve("gpt-4o")
        self.assertEqual(missing.exception.body["code"], "model_not_found")
        self.assertEqual(missing.exception.body["param"], "model")
        self.assertIn("gpt-4o", missing.exception.body["message"])
        with self.assertRaises(openai.NotFoundError) as wrong:
            client().completions.create(model="gpt-4o", prompt="The KV cache is", max_tokens=4)
        self.assertEqual(wrong.exception.body["code"], "model_not_found")


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


class ToolRoundTripTest(unittest.TestCase):
    """The default model's chat template ignores tools: they reach the model through the
    system prompt, its calls come back as message.tool_calls, and the assistant turn of calls
    the SDK sends back (content "" or null) renders."""

    def test_call_then_tool_result_then_answer(self):
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        # No max_tokens: "required" ends once the calls are written.
        started = time.time()
        first = client().chat.completions.create(
            model=DOCUMENTED_MODEL, messages=messages, tools=[WEATHER_TOOL],
            tool_choice="required", temperature=0)
        self.assertLess(time.time() - started, 60)
        self.assertEqual(first.choices[0].finish_reason, "tool_calls")
        calls = first.choices[0].message.tool_calls
        self.assertGreaterEqual(len(calls), 1)
        self.assertLessEqual(len(calls), 1)  # one tool: one call at most
        self.assertEqual(calls[0].function.name, "get_weather")
        self.assertIn("city", json.loads(calls[0].function.arguments))
        self.assertLess(first.usage.completion_tokens, 100)

        results = [{"role": "tool", "tool_call_id": c.id, "content": "18 C and cloudy"}
                   for c in calls]
        as_dicts = [{"type": "function", "id": c.id,
                     "function": {"name": c.function.name, "arguments": c.function.arguments}}
                    for c in calls]
        # The SDK's own message object, and the dicts clients write by hand.
        for assistant in (first.choices[0].message,
                          {"role": "assistant", "content": "", "tool_calls": as_dicts},
                          {"role": "assistant", "content": None, "tool_calls": as_dicts}):
            with self.subTest(assistant=assistant):
                final = client().chat.completions.create(
                    model=DOCUMENTED_MODEL, messages=messages + [assistant] + results,
                    tools=[WEATHER_TOOL], max_tokens=48, temperature=0)
                self.assertIn(final.choices[0].finish_reason, ("stop", "length", "tool_calls"))
                message = final.choices[0].message
                self.assertTrue(message.content or message.tool_calls, final)

    def test_the_model_sees_the_tools_and_its_calls(self):
        messages = [{"role": "user", "content": "What is the weather in Paris?"},
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {
                            "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "18 C and cloudy"}]
        status, tokenized = kvserve_e2e.http_json(
            SERVER, "POST", "/tokenize", {"messages": messages, "tools": [WEATHER_TOOL]})
        self.assertEqual(status, 200, tokenized)
        status, text = kvserve_e2e.http_json(SERVER, "POST", "/detokenize",
                                             {"tokens": tokenized["tokens"]})
        self.assertEqual(status, 200, text)
        prompt = text["prompt"]
        self.assertIn('"name": "get_weather"', prompt.split("<tools>", 1)[1])
        self.assertIn('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
                      '</tool_call>', prompt)
        self.assertIn("18 C and cloudy", prompt)


class PapercutsTest(unittest.TestCase):
    """Errors name the OpenAI request's fields, one rule one message; stop_reason and
    system_fingerprint as vLLM and OpenAI give them."""

    def test_errors_name_the_request_fields_with_one_message_per_rule(self):
        messages = {}
        for max_tokens in (0, 10 ** 6):
            with self.assertRaises(openai.BadRequestError) as bad:
                client().completions.create(model=DOCUMENTED_MODEL, prompt="x",
                                            max_tokens=max_tokens)
            self.assertEqual(bad.exception.body["param"], "max_tokens")
            messages[max_tokens] = bad.exception.body["message"]
        limit = client().models.retrieve(DOCUMENTED_MODEL).model_extra["max_model_len"] - 1
        self.assertEqual(messages[0], f"max_tokens: must be in [1, {limit}], got 0")
        self.assertEqual(messages[10 ** 6], f"max_tokens: must be in [1, {limit}], got 1000000")
        with self.assertRaises(openai.BadRequestError) as bad:
            client().completions.create(model=DOCUMENTED_MODEL, prompt="x", max_tokens=4,
                                        temperature=-1)
        self.assertTrue(bad.exception.body["message"].startswith("temperature: "),
                        bad.exception.body)
        self.assertNotIn("sampling.", bad.exception.body["message"])

    def test_stop_reason_and_system_fingerprint(self):
        eos = client().chat.completions.create(
            model=DOCUMENTED_MODEL, messages=[{"role": "user", "content": "Say hi."}],
            max_tokens=200, temperature=0)
        self.assertEqual(eos.choices[0].finish_reason, "stop")
        self.assertIsNone(eos.choices[0].model_extra.get("stop_reason"))
        self.assertRegex(eos.system_fingerprint or "", r"^fp_[0-9a-f]{16}$")
        stopped = client().completions.create(
            model=DOCUMENTED_MODEL, prompt="1, 2, 3, 4,", max_tokens=16, temperature=0,
            stop=[" 6"])
        self.assertEqual(stopped.choices[0].finish_reason, "stop")
        self.assertEqual(stopped.choices[0].model_extra.get("stop_reason"), " 6")
        self.assertEqual(stopped.system_fingerprint, eos.system_fingerprint)


if __name__ == "__main__":
    unittest.main(argv=UNITTEST_ARGV, verbosity=2)
