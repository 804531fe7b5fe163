"""End-to-end test of tools on the OpenAI-compatible chat API (--http_port) with the official
`openai` Python package, served by a kvserve-worker or, with --router=PATH, by a kvserve-router in
front of one, whose chat template (Qwen 2.5's, through --chat_template) renders tools: tools,
tool calls and tool results reach the template; "required" and a named function give valid
calls, streamed as they are written (arguments in pieces that join to the unstreamed call);
bad tools are 400 naming the field.

  python3 http_tools_e2e_test.py --worker=build/worker/kvserve-worker --proto-root=proto \
      [--router=build/router/kvserve-router]
"""

import json
import os
import sys
import unittest

import jsonschema
import openai

import kvserve_e2e
import router_e2e_lib

OPTIONS, UNITTEST_ARGV = kvserve_e2e.parse_args(sys.argv)
SERVER = None  # the worker, or the router in front of it
QWEN_TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tokenizer",
                             "testdata", "chat_templates", "Qwen-Qwen2.5-7B-Instruct.jinja")
WORKER_ARGS = ["--kv_memory_bytes=33554432", "--max_num_seqs=4", "--max_num_batched_tokens=256",
               "--num_threads=2"]
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


def setUpModule():
    global SERVER
    _, SERVER = router_e2e_lib.start_http_server(OPTIONS, WORKER_ARGS,
                                                 [f"--chat_template={QWEN_TEMPLATE}"])


def tearDownModule():
    kvserve_e2e.cleanup()


def client():
    return kvserve_e2e.openai_client(SERVER)


def http(method, path, body=None):
    return kvserve_e2e.http_json(SERVER, method, path, body)


class ToolsTest(unittest.TestCase):
    """Tools through the official client. The tiny model rarely writes a call in "auto", so
    these show that tools, tool calls and tool results reach the template and come back as a
    valid response; the parsing of calls is tested in tests/http/openai_tool_calls_test.cc.
    "required" and a named function constrain the output to calls."""

    def test_tools_and_tool_results_are_rendered_and_answered(self):
        messages = [
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C and cloudy"}]
        status, tokenized = http("POST", "/tokenize", {"messages": messages,
                                                        "tools": [WEATHER_TOOL]})
        self.assertEqual(status, 200, tokenized)
        status, text = http("POST", "/detokenize", {"tokens": tokenized["tokens"]})
        self.assertEqual(status, 200)
        prompt = text["prompt"]
        self.assertIn('<tools>\n{"type": "function", "function": {"name": "get_weather"', prompt)
        self.assertIn('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}',
                      prompt)
        self.assertIn("<tool_response>\n18 C and cloudy\n</tool_response>", prompt)

        for stream in (False, True):
            response = client().chat.completions.create(
                model="smol", messages=messages, tools=[WEATHER_TOOL], tool_choice="auto",
                max_tokens=24, temperature=0, stream=stream)
            if stream:
                finish = [c.choices[0].finish_reason for c in response if c.choices]
                self.assertIn(finish[-1], ("stop", "length", "tool_calls"))
            else:
                self.assertIn(response.choices[0].finish_reason, ("stop", "length", "tool_calls"))
                message = response.choices[0].message
                self.assertTrue(message.content or message.tool_calls)

    def test_required_and_named_tool_choice_always_give_valid_calls(self):
        time_tool = {"type": "function", "function": {
            "name": "get_time", "parameters": {
                "type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
                "required": ["zone"]}}}
        tools = [WEATHER_TOOL, time_tool]
        schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        for seed in range(3):
            for choice in ("required", {"type": "function", "function": {"name": "get_time"}}):
                with self.subTest(seed=seed, choice=choice):
                    r = client().chat.completions.create(
                        model="smol", messages=messages, tools=tools, tool_choice=choice,
                        temperature=0.8, seed=seed, max_tokens=200)
                    self.assertEqual(r.choices[0].finish_reason, "tool_calls")
                    calls = r.choices[0].message.tool_calls
                    self.assertGreaterEqual(len(calls), 1)
                    for call in calls:
                        if isinstance(choice, dict):
                            self.assertEqual(call.function.name, "get_time")
                        jsonschema.validate(json.loads(call.function.arguments),
                                            schemas[call.function.name])
                    # Streamed, the deltas reassemble to the same calls.
                    stream = client().chat.completions.create(
                        model="smol", messages=messages, tools=tools, tool_choice=choice,
                        temperature=0.8, seed=seed, max_tokens=200, stream=True)
                    streamed = {}
                    for chunk in stream:
                        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                            entry = streamed.setdefault(delta.index, {"name": "", "arguments": ""})
                            if delta.function.name:
                                entry["name"] = delta.function.name
                            entry["arguments"] += delta.function.arguments or ""
                    self.assertEqual([(c["name"], c["arguments"]) for _, c in sorted(streamed.items())],
                                     [(c.function.name, c.function.arguments) for c in calls])

    def test_bad_tools_are_400_naming_the_field(self):
        cases = [
            ({"tools": [WEATHER_TOOL], "tool_choice": {
                "type": "function", "function": {"name": "get_time"}}}, "is not one of the tools"),
            ({"tools": [{"type": "function", "function": {"name": "bad name"}}]},
             "tools[0].name"),
            ({"tools": [WEATHER_TOOL, WEATHER_TOOL]}, "tools[1].name"),
        ]
        for extra, field in cases:
            with self.assertRaises(openai.BadRequestError) as bad:
                client().chat.completions.create(
                    model="smol", messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                    **extra)
            self.assertIn(field, str(bad.exception))

    def test_streamed_arguments_arrive_in_pieces_and_join_to_the_unstreamed_call(self):
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        named = {"type": "function", "function": {"name": "get_weather"}}
        for choice in ("required", named):
            with self.subTest(choice=choice):
                kwargs = dict(model="smol", messages=messages, tools=[WEATHER_TOOL],
                              tool_choice=choice, temperature=0.8, seed=11, max_tokens=200)
                whole = client().chat.completions.create(**kwargs)
                self.assertEqual(whole.choices[0].finish_reason, "tool_calls")
                want = [(c.function.name, c.function.arguments)
                        for c in whole.choices[0].message.tool_calls]
                calls, finish = {}, None
                for chunk in client().chat.completions.create(stream=True, **kwargs):
                    if not chunk.choices:
                        continue
                    finish = chunk.choices[0].finish_reason or finish
                    for delta in chunk.choices[0].delta.tool_calls or []:
                        if delta.id is not None:  # a call's first delta: id, type and name
                            self.assertNotIn(delta.index, calls)
                            self.assertEqual(delta.type, "function")
                            self.assertEqual(delta.function.arguments, "")
                            calls[delta.index] = {"name": delta.function.name, "pieces": []}
                        elif delta.function.arguments:
                            calls[delta.index]["pieces"].append(delta.function.arguments)
                self.assertEqual(finish, "tool_calls")
                got = [(c["name"], "".join(c["pieces"])) for _, c in sorted(calls.items())]
                self.assertEqual(got, want)
                for _, call in sorted(calls.items()):
                    self.assertGreater(len(call["pieces"]), 1, call)


if __name__ == "__main__":
    unittest.main(argv=UNITTEST_ARGV, verbosity=2)
