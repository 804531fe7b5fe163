"""End-to-end test of scoring a prompt over the HTTP API, as evaluation harnesses do
(lm-evaluation-harness's local-completions model): OpenAI's legacy `echo` with `logprobs` and
`max_tokens: 0` on /v1/completions, vLLM's `prompt_logprobs` on /v1/completions and
/v1/chat/completions, /tokenizer_info, and GenerateResponse.prompt_logprobs over gRPC; served by
a kvserve-worker or, with --router=PATH, by a kvserve-router in front of one. Real processes,
the default model, loopback, ports 0.

The worker prefills in chunks of 32 tokens, so a long prompt's logprobs come from several
chunks; a prompt scored twice is in the prefix cache the second time and must score the same.
The scores must agree with the model's own decode: a greedy completion's sampled-token logprobs
equal that completion's prompt logprobs when it is echoed back as a prompt.

  python3 http_prompt_logprobs_e2e_test.py --worker=build/worker/kvserve-worker \
      --proto-root=proto [--router=build/router/kvserve-router]
"""

import math
import sys
import unittest

import kvserve_e2e
import router_e2e_lib

OPTIONS, UNITTEST_ARGV = kvserve_e2e.parse_args(sys.argv)
SERVER = None
KEY = kvserve_e2e.HTTP_KEY
WORKER_ARGS = ["--kv_memory_bytes=67108864", "--max_num_seqs=8", "--max_num_batched_tokens=32",
               "--num_threads=2"]
VIA_ROUTER = "router" in OPTIONS
LONG_PROMPT = ("The history of the printing press begins in the fifteenth century, when Johannes "
               "Gutenberg combined movable metal type, oil-based ink and a screw press into a "
               "system that could produce books far faster than scribes; within fifty years")


def setUpModule():
    global SERVER
    router_e2e_lib.setup(OPTIONS)
    _, SERVER = router_e2e_lib.start_http_server(OPTIONS, WORKER_ARGS)


def tearDownModule():
    kvserve_e2e.cleanup()


def http(method, path, body=None):
    return kvserve_e2e.http_json(SERVER, method, path, body)


def completion(**body):
    status, result = http("POST", "/v1/completions", {"model": "smol", "temperature": 0, **body})
    if status != 200:
        raise AssertionError(f"{status}: {result}")
    return result


def tokens_of(text):
    status, body = http("POST", "/tokenize", {"prompt": text, "add_special_tokens": False})
    assert status == 200, body
    return body["tokens"]


class PromptLogprobsTest(unittest.TestCase):
    def test_echo_with_max_tokens_0_scores_the_prompt_alone(self):
        result = completion(prompt=LONG_PROMPT, echo=True, logprobs=1, max_tokens=0)
        choice = result["choices"][0]
        self.assertEqual(choice["text"], LONG_PROMPT)
        logprobs = choice["logprobs"]
        n = len(tokens_of(LONG_PROMPT))
        self.assertGreater(n, 32, "longer than one prefill chunk")
        self.assertEqual(len(logprobs["tokens"]), n)
        self.assertEqual("".join(logprobs["tokens"]), LONG_PROMPT)
        self.assertIsNone(logprobs["token_logprobs"][0])
        self.assertIsNone(logprobs["top_logprobs"][0])
        for value, top in zip(logprobs["token_logprobs"][1:], logprobs["top_logprobs"][1:]):
            self.assertLessEqual(value, 0.0)
            self.assertEqual(len(top), 1)
            self.assertLessEqual(value, max(top.values()) + 1e-5)
        offsets = logprobs["text_offset"]
        self.assertEqual(offsets[0], 0)
        for k in range(1, n):
            self.assertEqual(offsets[k], offsets[k - 1] + len(logprobs["tokens"][k - 1].encode()))
        self.assertEqual(choice["finish_reason"], "length")
        self.assertEqual(result["usage"]["prompt_tokens"], n)
        self.assertEqual(result["usage"]["completion_tokens"], 0)

        # Scored again, with the prompt in the prefix cache: the same numbers, nothing cached.
        again = completion(prompt=LONG_PROMPT, echo=True, logprobs=1, max_tokens=0)
        for a, b in zip(logprobs["token_logprobs"][1:],
                        again["choices"][0]["logprobs"]["token_logprobs"][1:]):
            self.assertAlmostEqual(a, b, delta=1e-4)
        self.assertEqual(again["usage"]["prompt_tokens_details"]["cached_tokens"], 0)

    def test_prompt_scores_equal_the_models_own_decode(self):
        prompt = "The three primary colours are"
        greedy = completion(prompt=prompt, max_tokens=8, logprobs=0, ignore_eos=True)
        sampled = greedy["choices"][0]["logprobs"]["token_logprobs"]
        ids = tokens_of(prompt)
        completion_ids = tokens_of(prompt + greedy["choices"][0]["text"])[len(ids):]
        echoed = completion(prompt=ids + completion_ids, echo=True, logprobs=0, max_tokens=0)
        scored = echoed["choices"][0]["logprobs"]["token_logprobs"][len(ids):]
        self.assertEqual(len(scored), len(sampled))
        for k, (a, b) in enumerate(zip(scored, sampled)):
            self.assertAlmostEqual(a, b, delta=2e-3, msg=f"token {k}")

    def test_echo_with_a_completion_puts_the_prompt_first(self):
        plain = completion(prompt="One, two, three,", max_tokens=4, logprobs=2)
        echoed = completion(prompt="One, two, three,", max_tokens=4, logprobs=2, echo=True)
        text = echoed["choices"][0]["text"]
        self.assertEqual(text, "One, two, three," + plain["choices"][0]["text"])
        logprobs = echoed["choices"][0]["logprobs"]
        n = len(tokens_of("One, two, three,"))
        self.assertEqual(len(logprobs["tokens"]), n + 4)
        self.assertEqual(logprobs["tokens"][n:], plain["choices"][0]["logprobs"]["tokens"])
        self.assertEqual(logprobs["text_offset"][n], len("One, two, three,".encode()))
        self.assertEqual(echoed["usage"]["completion_tokens"], 4)

    def test_vllm_prompt_logprobs_on_completions_and_chat(self):
        result = completion(prompt="Paris is the capital of", max_tokens=2, prompt_logprobs=2)
        prompt_logprobs = result["choices"][0]["prompt_logprobs"]
        ids = tokens_of("Paris is the capital of")
        self.assertEqual(len(prompt_logprobs), len(ids))
        self.assertIsNone(prompt_logprobs[0])
        for token_id, entry in zip(ids[1:], prompt_logprobs[1:]):
            self.assertIn(str(token_id), entry)
            self.assertGreaterEqual(entry[str(token_id)]["rank"], 1)
            self.assertTrue(2 <= len(entry) <= 3)  # the token and its top 2
            self.assertTrue(all(v["logprob"] <= 0 for v in entry.values()))
        status, chat = http("POST", "/v1/chat/completions",
                            {"model": "smol", "max_tokens": 2, "prompt_logprobs": 0,
                             "messages": [{"role": "user", "content": "Hi"}]})
        self.assertEqual(status, 200, chat)
        self.assertIsNone(chat["prompt_logprobs"][0])
        self.assertTrue(all(len(entry) == 1 for entry in chat["prompt_logprobs"][1:]))
        self.assertEqual(len(chat["prompt_logprobs"]), chat["usage"]["prompt_tokens"])

    def test_grpc_sends_the_prompt_logprobs_once(self):
        stub = router_e2e_lib.generation_stub(SERVER.address)
        request = router_e2e_lib.request(LONG_PROMPT, max_tokens=4, temperature=0,
                                         prompt_logprobs=1)
        metadata = [("authorization", f"Bearer {KEY}")] if VIA_ROUTER else None
        messages = list(stub.Generate(request, timeout=120, metadata=metadata))
        carrying = [m for m in messages if m.prompt_logprobs]
        self.assertEqual(len(carrying), 1)
        self.assertIs(carrying[0], messages[0], "before any token")
        entries = carrying[0].prompt_logprobs
        self.assertEqual(len(entries), messages[-1].usage.prompt_tokens)
        self.assertEqual(entries[0].chosen.rank, 0)
        self.assertTrue(all(e.chosen.rank >= 1 and len(e.top) == 1 for e in entries[1:]))
        self.assertTrue(all(math.isfinite(e.chosen.logprob) for e in entries))

    def test_tokenizer_info_names_the_special_tokens(self):
        status, info = http("GET", "/tokenizer_info")
        self.assertEqual(status, 200, info)
        self.assertEqual(len(tokens_of(info["eos_token"])), 1)
        self.assertGreater(info["model_max_length"], 0)

    def test_bad_inputs_are_400_naming_the_field(self):
        cases = [
            ({"prompt": "x", "prompt_logprobs": -1}, "prompt_logprobs"),
            ({"prompt": "x", "prompt_logprobs": 21}, "prompt_logprobs"),
            ({"prompt": "x", "prompt_logprobs": "2"}, "prompt_logprobs"),
            ({"prompt": "x", "echo": True, "stream": True}, "echo"),
            ({"prompt": "x", "prompt_logprobs": 1, "stream": True}, "prompt_logprobs"),
            ({"prompt": "x", "echo": True, "logprobs": 21, "max_tokens": 0}, "logprobs"),
            ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
        ]
        for body, field in cases:
            status, error = http("POST", "/v1/completions", {"model": "smol", **body})
            self.assertEqual(status, 400, body)
            self.assertIn(field, error["error"]["message"], body)
        status, error = http("POST", "/v1/chat/completions",
                             {"model": "smol", "echo": True,
                              "messages": [{"role": "user", "content": "Hi"}]})
        self.assertEqual(status, 400)
        self.assertIn("echo", error["error"]["message"])


if __name__ == "__main__":
    unittest.main(argv=UNITTEST_ARGV, verbosity=2)
