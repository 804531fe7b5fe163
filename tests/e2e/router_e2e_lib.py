"""Shared parts of the router e2e tests: a kvserve-router process (ports read from its output,
like kvserve_e2e.Worker), a small cluster (workers + routers on loopback, port 0), the module
set-up and tear-down, requests and stream collection (the worker-only tests use these too),
Prometheus series parsing, and a test CA made with openssl.

Processes go through kvserve_e2e.PROCESSES, so kvserve_e2e.cleanup() kills whatever a failing
test left behind.
"""

import os
import re
import subprocess
import tempfile
import threading
import time
import urllib.request

import grpc

import kvserve_e2e

HERE = os.path.dirname(os.path.abspath(__file__))
PB = {}

# Workers as the e2e suite runs them: one CPU thread each (CI machines are small and shared).
WORKER_ARGS = ["--max_num_seqs=16", "--max_num_batched_tokens=256", "--num_threads=1",
               "--drain_timeout_s=5"]


def setup(options):
    """Generates the stubs once per process; returns the dict of modules."""
    if not PB:
        PB.update(kvserve_e2e.generate_stubs(options["proto-root"], os.path.join(HERE, "protos")))
    return PB


def module_fixtures(options):
    """(setUpModule, tearDownModule) of a test module: the stubs generated at set-up, every
    process the module started killed at tear-down. In a test module:
        setUpModule, tearDownModule = lib.module_fixtures(OPTIONS)"""

    def set_up_module():
        setup(options)

    return set_up_module, kvserve_e2e.cleanup


class Router(kvserve_e2e.Worker):
    """A kvserve-router process; start() waits for 'kvserve-router ready'."""

    NAME = "kvserve-router"

    def __init__(self, binary, workers_flag, extra_args=(), ready_timeout_s=60):
        super().__init__(binary, [workers_flag, *extra_args], ready_timeout_s)

    def series(self, name):
        """{labels string: value} of every sample of metric `name`."""
        result = {}
        for line in self.metrics_text().splitlines():
            match = re.match(re.escape(name) + r"(\{[^}]*\})? (\S+)$", line)
            if match:
                result[match.group(1) or ""] = float(match.group(2))
        return result

    def worker_gauge(self, name, worker):
        return self.series(name).get(f'{{worker="{worker.address}"}}')

    def wait_workers_healthy(self, workers, timeout_s=60):
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if all(self.worker_gauge("kvserve_router_worker_healthy", w) == 1 for w in workers):
                return
            time.sleep(0.05)
        raise AssertionError("router never saw every worker healthy:\n" + self.log())


def start_workers(options, count, extra_args=()):
    args = list(WORKER_ARGS) + list(extra_args) + kvserve_e2e.model_args(options)
    workers = [kvserve_e2e.Worker(options["worker"], args) for _ in range(count)]
    # Started in parallel: each loads the model.
    threads = [threading.Thread(target=worker.start) for worker in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for worker in workers:
        if worker.grpc_port is None:
            raise RuntimeError("a worker did not start:\n" + worker.log())
    return workers


def start_router(options, workers, extra_args=(), workers_flag=None):
    """A router in front of `workers` (--workers=their addresses unless workers_flag is given);
    returns once the router sees every one of them healthy."""
    args = list(extra_args) + kvserve_e2e.model_args(options)
    if workers_flag is None:
        workers_flag = "--workers=" + ",".join(w.address for w in workers)
    router = Router(options["router"], workers_flag, args).start()
    router.wait_workers_healthy(workers)
    return router


def start_http_router(options, workers, extra_args=()):
    """A router with --http_port in front of `workers`, taking kvserve_e2e.HTTP_KEY as its bearer
    token (tenant "t") and the same model names as a worker."""
    tokens = os.path.join(temp_dir(), "tokens")
    with open(tokens, "w") as f:
        f.write(f"{kvserve_e2e.HTTP_KEY} t\n")
    return start_router(options, workers, ["--http_port=0", f"--auth_tokens_file={tokens}",
                                           kvserve_e2e.HTTP_ALIASES, *extra_args])


def start_http_server(options, worker_args, shared_args=()):
    """What the http*_e2e tests talk to: a worker with `worker_args` serving the HTTP API, and
    with --router=PATH in `options` a router serving it in front of that worker. Returns
    (worker, server); `shared_args` go to both (--chat_template)."""
    worker = kvserve_e2e.Worker(options["worker"], [
        *worker_args, *kvserve_e2e.HTTP_WORKER_ARGS, *shared_args,
        *kvserve_e2e.model_args(options)]).start()
    if "router" not in options:
        return worker, worker
    return worker, start_http_router(options, [worker], shared_args)


def generation_stub(target, credentials=None):
    channel = (grpc.secure_channel(target, credentials) if credentials
               else grpc.insecure_channel(target))
    return PB["generation_pb2_grpc"].GenerationStub(channel)


def sampling(**fields):
    return PB["sampling_pb2"].SamplingParams(**fields)


def request(prompt=None, ids=None, **sampling_fields):
    gen = PB["generation_pb2"]
    if ids is not None:
        return gen.GenerateRequest(prompt_token_ids=gen.TokenIds(ids=ids),
                                   sampling=sampling(**sampling_fields))
    return gen.GenerateRequest(prompt=prompt, sampling=sampling(**sampling_fields))


def greedy_and_seeded_requests(prompts, max_tokens, seed_base, **sampled_fields):
    """A request for each prompt, all ignoring EOS: the even-numbered ones greedy, the odd ones
    sampled with `sampled_fields` and seed seed_base + their index."""
    result = []
    for i, prompt in enumerate(prompts):
        if i % 2 == 0:
            result.append(request(prompt, temperature=0, max_tokens=max_tokens, ignore_eos=True))
        else:
            result.append(request(prompt, seed=seed_base + i, max_tokens=max_tokens,
                                  ignore_eos=True, **sampled_fields))
    return result


def collect(responses):
    """(tokens, text, finish reasons, usage) of a whole stream."""
    tokens, text, reasons, usage = [], "", [], None
    for response in responses:
        assert usage is None, "usage must come in the last message only"
        for delta in response.choices:
            tokens.extend(delta.token_ids)
            text += delta.text
            if delta.finish_reason:
                reasons.append(delta.finish_reason)
        if response.HasField("usage"):
            usage = response.usage
    return tokens, text, reasons, usage


def run_streams(stub, requests, timeout, on_progress=None, with_usage=False):
    """Runs every request as its own Generate stream, all at once (a thread each), and returns
    [(token ids, text)] in request order; with with_usage, [(token ids, text, usage)], a usage
    anywhere but in a stream's last message being an error (as in collect). A request with
    sampling.prompt_logprobs must get them exactly once, before any token, one per prompt
    token (an error otherwise). on_progress, when
    given, sees the list of every stream's token count after each message of any stream. Errors
    are returned as [(stream index, exception)] beside the outputs."""
    outputs = [None] * len(requests)
    counts = [0] * len(requests)
    errors = []
    lock = threading.Lock()

    def run(i, request):
        tokens, text, usage, prompt_logprobs = [], "", None, None
        try:
            for response in stub.Generate(request, timeout=timeout):
                if with_usage:
                    assert usage is None, "usage must come in the last message only"
                if response.prompt_logprobs:
                    assert prompt_logprobs is None, "prompt logprobs sent twice"
                    assert not tokens, "prompt logprobs after a token"
                    prompt_logprobs = len(response.prompt_logprobs)
                for delta in response.choices:
                    tokens.extend(delta.token_ids)
                    text += delta.text
                if response.HasField("usage"):
                    usage = response.usage
                with lock:
                    counts[i] = len(tokens)
                    if on_progress:
                        on_progress(list(counts))
            if request.sampling.HasField("prompt_logprobs"):  # once, one per prompt token
                assert prompt_logprobs == (usage or response.usage).prompt_tokens, \
                    f"{prompt_logprobs} prompt logprobs"
            outputs[i] = (tokens, text, usage) if with_usage else (tokens, text)
        except Exception as error:  # reported with the stream's index
            errors.append((i, error))

    threads = [threading.Thread(target=run, args=(i, r)) for i, r in enumerate(requests)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outputs, errors


def assert_same_streams(test, got, want):
    """Stream by stream (as run_streams returns them), the tokens and the text of `got` equal
    those of `want`."""
    test.assertEqual(len(got), len(want), "number of streams")
    for i in range(len(want)):
        test.assertEqual(got[i][0], want[i][0], f"tokens of stream {i}")
        test.assertEqual(got[i][1], want[i][1], f"text of stream {i}")


def make_test_ca(directory):
    """A CA, a server certificate for 127.0.0.1 / localhost and a client certificate, all signed
    by the CA; returns {name: path}."""
    paths = {name: os.path.join(directory, name) for name in
             ("ca.key", "ca.pem", "server.key", "server.pem", "client.key", "client.pem")}
    ext = os.path.join(directory, "san.cnf")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")

    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", "/CN=kvserve test CA",
        "-keyout", paths["ca.key"], "-out", paths["ca.pem"])
    for who in ("server", "client"):
        csr = os.path.join(directory, who + ".csr")
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}", "-keyout",
            paths[who + ".key"], "-out", csr)
        run("x509", "-req", "-in", csr, "-CA", paths["ca.pem"], "-CAkey", paths["ca.key"],
            "-CAcreateserial", "-days", "2", "-extfile", ext, "-out", paths[who + ".pem"])
    return paths


def read(path):
    with open(path, "rb") as f:
        return f.read()


def temp_dir():
    return tempfile.mkdtemp(prefix="kvserve_router_e2e_")


def worker_metric_total(worker, name):
    """Sum of every sample of `name` on a worker's /metrics (0 when absent)."""
    total = 0.0
    for line in worker.metrics_text().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def url_get(url):
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()
