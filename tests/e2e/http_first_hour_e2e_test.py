"""End-to-end test of what a new user runs first against the OpenAI-compatible HTTP API, with the
official `openai` package, on the default model, served by a kvserve-worker (--http_port, no API
key, no aliases: as README.md starts it) or, with --router=PATH, by a kvserve-router in front of
one: README.md's Python snippet runs as written; the documented model id is the served one,
models.retrieve answers it and 404s another.

  python3 http_first_hour_e2e_test.py --worker=build/worker/kvserve-worker --proto-root=proto \
      [--router=build/router/kvserve-router]
"""

import contextlib
import io
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


if __name__ == "__main__":
    unittest.main(argv=UNITTEST_ARGV, verbosity=2)
