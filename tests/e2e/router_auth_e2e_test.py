"""End-to-end test of the router's security: bearer-token auth (no token or a wrong one is
UNAUTHENTICATED, health needs none), per-tenant prefix-cache salts (two tenants sending the same
prompt never get cached tokens from each other), TLS on the router port with a CA the test makes
with openssl, mTLS (a client without a certificate is refused), and TLS + mTLS from the router to
a worker that requires client certificates.

  python3 router_auth_e2e_test.py --worker=build/worker/kvserve-worker \
      --router=build/router/kvserve-router --proto-root=proto
"""

import os
import sys
import time
import unittest

import grpc

import kvserve_e2e
import router_e2e_lib as lib

OPTIONS, UNITTEST_ARGV = kvserve_e2e.parse_args(sys.argv)
PROMPT = ("A long shared system prompt about the rules of chess: the king moves one square in "
          "any direction, the queen moves any number of squares along a rank, file or diagonal, "
          "the rook along ranks and files, the bishop along diagonals. Question: ")


setUpModule, tearDownModule = lib.module_fixtures(OPTIONS)


class RouterAuthTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        directory = lib.temp_dir()
        cls.tls = lib.make_test_ca(directory)
        tokens = os.path.join(directory, "tokens.txt")
        with open(tokens, "w") as f:
            f.write("# token tenant\nalice-secret alice\nbob-secret bob\n")
        cls.workers = lib.start_workers(OPTIONS, 1)
        tls_args = [f"--tls_cert={cls.tls['server.pem']}", f"--tls_key={cls.tls['server.key']}",
                    f"--auth_tokens_file={tokens}", "--status_interval_ms=50"]
        cls.router = lib.start_router(OPTIONS, cls.workers, tls_args)
        cls.credentials = grpc.ssl_channel_credentials(
            root_certificates=lib.read(cls.tls["ca.pem"]))
        cls.stub = lib.generation_stub(cls.router.address, cls.credentials)

    def generate(self, prompt, token, stub=None):
        metadata = [("authorization", f"Bearer {token}")] if token else []
        return lib.collect((stub or self.stub).Generate(
            lib.request(prompt, temperature=0, max_tokens=2), timeout=120, metadata=metadata))

    def test_missing_or_wrong_token_is_unauthenticated(self):
        for token in (None, "mallory-guess"):
            with self.assertRaises(grpc.RpcError) as raised:
                self.generate("Hello", token)
            self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAUTHENTICATED, token)
        with self.assertRaises(grpc.RpcError) as raised:
            self.stub.Tokenize(lib.PB["generation_pb2"].TokenizeRequest(prompt="Hi"), timeout=10)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        admin = lib.PB["router_admin_pb2_grpc"].RouterAdminStub(
            grpc.secure_channel(self.router.address, self.credentials))
        request = lib.PB["router_admin_pb2"].ListWorkersRequest()
        with self.assertRaises(grpc.RpcError) as raised:
            admin.ListWorkers(request, timeout=10)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        self.assertEqual(len(admin.ListWorkers(
            request, timeout=10, metadata=[("authorization", "Bearer bob-secret")]).workers), 1)
        _, _, _, usage = self.generate("Hello", "alice-secret")
        self.assertGreater(usage.prompt_tokens, 0)

    def test_health_needs_no_token(self):
        channel = grpc.secure_channel(self.router.address, self.credentials)
        health = lib.PB["health_pb2_grpc"].HealthStub(channel)
        self.assertEqual(health.Check(lib.PB["health_pb2"].HealthCheckRequest(), timeout=10).status,
                         lib.PB["health_pb2"].HealthCheckResponse.SERVING)

    def test_tenants_never_share_cached_blocks(self):
        prompt = PROMPT + "how does the knight move?"
        self.generate(prompt, "alice-secret")
        time.sleep(0.5)  # the worker's next status report carries the new blocks
        _, _, _, alice_again = self.generate(prompt, "alice-secret")
        self.assertGreaterEqual(alice_again.cached_prompt_tokens, 32)
        _, _, _, bob = self.generate(prompt, "bob-secret")
        self.assertEqual(bob.cached_prompt_tokens, 0)
        _, _, _, bob_again = self.generate(prompt, "bob-secret")
        self.assertGreaterEqual(bob_again.cached_prompt_tokens, 32)

    def test_plaintext_client_cannot_talk_to_the_tls_port(self):
        with self.assertRaises(grpc.RpcError) as raised:
            self.generate("Hello", "alice-secret", lib.generation_stub(self.router.address))
        self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAVAILABLE)

    def test_mtls_requires_a_client_certificate(self):
        router = lib.start_router(OPTIONS, self.workers, [
            f"--tls_cert={self.tls['server.pem']}", f"--tls_key={self.tls['server.key']}",
            f"--tls_ca={self.tls['ca.pem']}"])
        try:
            with self.assertRaises(grpc.RpcError) as raised:
                self.generate("Hello", None, lib.generation_stub(router.address, self.credentials))
            self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAVAILABLE)
            with_cert = grpc.ssl_channel_credentials(
                root_certificates=lib.read(self.tls["ca.pem"]),
                private_key=lib.read(self.tls["client.key"]),
                certificate_chain=lib.read(self.tls["client.pem"]))
            tokens, _, _, _ = self.generate("Hello", None,
                                            lib.generation_stub(router.address, with_cert))
            self.assertEqual(len(tokens), 2)
        finally:
            self.assertEqual(router.terminate(), 0)

    def test_router_reaches_an_mtls_worker_with_its_client_certificate(self):
        tls = self.tls
        worker = lib.start_workers(OPTIONS, 1, [f"--tls_cert={tls['server.pem']}",
                                                f"--tls_key={tls['server.key']}",
                                                f"--tls_ca={tls['ca.pem']}"])[0]
        router = lib.start_router(OPTIONS, [worker], [
            f"--worker_tls_ca={tls['ca.pem']}", f"--worker_tls_cert={tls['client.pem']}",
            f"--worker_tls_key={tls['client.key']}"])
        try:
            tokens, _, _, _ = self.generate("Hello", None, lib.generation_stub(router.address))
            self.assertEqual(len(tokens), 2)
        finally:
            self.assertEqual(router.terminate(), 0)
            worker.process.kill()


if __name__ == "__main__":
    unittest.main(argv=UNITTEST_ARGV, verbosity=2)
