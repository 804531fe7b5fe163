"""End-to-end test of structured output on the OpenAI-compatible chat API (--http_port) with
the official `openai` Python package, served by a kvserve-worker or, with --router=PATH, by a
kvserve-router in front of one: JSON schemas (tests/e2e/testdata), json_object, choice, regex and
grammar in OpenAI's and vLLM's forms, streamed and not, at temperature 0.8 on the tiny default
model; bad constraints are 400 before any compute.

  python3 http_structured_output_e2e_test.py --worker=build/worker/kvserve-worker \
      --proto-root=proto [--router=build/router/kvserve-router]
"""

import concurrent.futures
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
WORKER_ARGS = ["--kv_memory_bytes=67108864", "--max_num_seqs=16", "--max_num_batched_tokens=256",
               "--num_threads=2"]


def setUpModule():
    global SERVER
    _, SERVER = router_e2e_lib.start_http_server(OPTIONS, WORKER_ARGS)


def tearDownModule():
    kvserve_e2e.cleanup()


def client():
    return kvserve_e2e.openai_client(SERVER)


SCHEMAS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata",
                       "structured_output_schemas.json")


class StructuredOutputTest(unittest.TestCase):
    """Structured output through the official client on the tiny default model, sampled at
    temperature 0.8: the grammar, not the model, guarantees the form."""

    def chat(self, content, seed, max_tokens=400, **kwargs):
        return client().chat.completions.create(
            model="smol", messages=[{"role": "user", "content": content}], temperature=0.8,
            seed=seed, max_tokens=max_tokens, **kwargs)

    def test_json_schemas_validate_at_temperature_08(self):
        with open(SCHEMAS) as f:
            schemas = json.load(f)
        jobs = [(i, seed) for i in range(len(schemas)) for seed in range(3)]

        def one(job):
            i, seed = job
            r = self.chat("Reply with a JSON example.", seed, response_format={
                "type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schemas[i],
                                                       "strict": True}})
            return i, seed, r.choices[0]

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            for i, seed, choice in pool.map(one, jobs):
                with self.subTest(schema=i, seed=seed):
                    self.assertEqual(choice.finish_reason, "stop", repr(choice.message.content))
                    jsonschema.validate(json.loads(choice.message.content), schemas[i])

    def test_json_object_choice_regex_and_grammar(self):
        for seed in range(3):
            r = self.chat("Describe a cat as JSON.", seed,
                          response_format={"type": "json_object"})
            if r.choices[0].finish_reason == "stop":
                self.assertIsInstance(json.loads(r.choices[0].message.content), dict)
            r = self.chat("Is the sky blue?", seed, extra_body={
                "structured_outputs": {"choice": ["yes", "no", "it depends"]}})
            self.assertIn(r.choices[0].message.content, ["yes", "no", "it depends"])
            r = self.chat("A phone number?", seed, extra_body={
                "guided_regex": r"\+33 [1-9]( [0-9]{2}){4}"})
            self.assertRegex(r.choices[0].message.content, r"^\+33 [1-9]( [0-9]{2}){4}$")
            r = self.chat("A sum?", seed, extra_body={"structured_outputs": {
                "grammar": 'root ::= num " + " num " = " num\nnum ::= [1-9] [0-9]?'}})
            self.assertRegex(r.choices[0].message.content, r"^[1-9][0-9]? \+ [1-9][0-9]? = "
                                                           r"[1-9][0-9]?$")
        # Streamed, the pieces join to the same kind of text. max_tokens covers the longest choice
        # spelled one byte a token (sampled at temperature 1, a path of 9 pieces was seen).
        chunks = client().chat.completions.create(
            model="smol", messages=[{"role": "user", "content": "yes?"}], stream=True,
            max_tokens=16, extra_body={"guided_choice": ["affirmative", "negative"]})
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertIn(text, ["affirmative", "negative"])

    def test_bad_constraints_are_400_before_any_compute(self):
        cases = [
            ({"response_format": {"type": "json_schema", "json_schema": {
                "name": "x", "schema": {"properties": {"a": {"$ref": "#/$defs/none"}}}}}},
             "invalid json_schema"),
            ({"extra_body": {"guided_regex": "(unclosed"}}, "invalid regex"),
            ({"extra_body": {"structured_outputs": {"grammar": "root ::= item"}}},
             "invalid grammar"),
            ({"extra_body": {"guided_choice": []}}, "choice.choices: 1 to 256 choices"),
        ]
        for kwargs, message in cases:
            with self.subTest(message=message):
                with self.assertRaises(openai.BadRequestError) as bad:
                    client().chat.completions.create(
                        model="smol", messages=[{"role": "user", "content": "x"}],
                        max_tokens=4, **kwargs)
                self.assertIn(message, str(bad.exception))
                self.assertTrue(bad.exception.body.get("param").startswith("response_format"))
        # The server still serves.
        self.assertEqual(self.chat("ok?", 1, max_tokens=4).choices[0].finish_reason, "length")


if __name__ == "__main__":
    unittest.main(argv=UNITTEST_ARGV, verbosity=2)
