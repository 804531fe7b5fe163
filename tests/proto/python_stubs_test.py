"""Proves that Python clients can be generated from the same kvserve.v1 .proto files.

Runs grpc_tools.protoc on proto/kvserve/v1/*.proto into a temporary directory, imports the
generated modules, checks the message defaults and the services' methods, and makes one
streaming and one unary call through the generated stubs against an in-process server on
loopback. Exits non-zero (an uncaught exception or a failed check) when any step fails.

Usage: python3 python_stubs_test.py <proto root> <file relative to the root>...
"""

import importlib
import sys
import tempfile
from concurrent import futures

from grpc_tools import protoc


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def generate(proto_root, files, out_dir):
    args = ["grpc_tools.protoc", f"--proto_path={proto_root}", f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}"] + [f"{proto_root}/{name}" for name in files]
    code = protoc.main(args)
    check(code == 0, f"grpc_tools.protoc exited with {code}")


def check_messages(generation_pb2, sampling_pb2):
    request = generation_pb2.GenerateRequest(prompt="Once upon a time")
    check(request.WhichOneof("input") == "prompt", "input oneof holds the prompt")
    check(not request.HasField("sampling"), "sampling is unset by default")
    check(not request.HasField("add_generation_prompt"), "add_generation_prompt is optional")
    request.sampling.temperature = 0.0
    request.sampling.max_tokens = 8
    parsed = generation_pb2.GenerateRequest.FromString(request.SerializeToString())
    check(parsed.sampling.HasField("temperature"), "temperature 0 is distinct from unset")
    check(not parsed.sampling.HasField("seed"), "seed is unset")
    chat = generation_pb2.GenerateRequest()
    chat.chat.messages.add(role="user", content="Hi")
    check(chat.WhichOneof("input") == "chat", "input oneof holds the chat")
    check(isinstance(parsed.sampling, sampling_pb2.SamplingParams), "shared SamplingParams type")


def check_services(generation_pb2, worker_pb2, generation_grpc, worker_grpc):
    expected = {
        (generation_pb2, "Generation"): {"Generate": True, "Tokenize": False,
                                         "Detokenize": False, "GetModelInfo": False},
        (worker_pb2, "Worker"): {"Generate": True, "StreamStatus": True, "GetModelInfo": False,
                                 "FetchKvBlocks": True},
    }
    for (module, service_name), methods in expected.items():
        service = module.DESCRIPTOR.services_by_name[service_name]
        check(service.full_name == f"kvserve.v1.{service_name}", service.full_name)
        check(set(service.methods_by_name) == set(methods), f"{service_name} methods")
        for name, server_streaming in methods.items():
            method = service.methods_by_name[name]
            check(method.server_streaming == server_streaming, f"{service_name}.{name} streaming")
            check(not method.client_streaming, f"{service_name}.{name} client streaming")
    for module, service_name in ((generation_grpc, "Generation"), (worker_grpc, "Worker")):
        for symbol in (f"{service_name}Stub", f"{service_name}Servicer",
                       f"add_{service_name}Servicer_to_server"):
            check(hasattr(module, symbol), f"generated module lacks {symbol}")


def call_through_stubs(generation_pb2, output_pb2, generation_grpc):
    import grpc

    class Servicer(generation_grpc.GenerationServicer):
        def Generate(self, request, context):
            for token in request.prompt_token_ids.ids:
                yield output_pb2.GenerateResponse(
                    request_id=request.request_id,
                    choices=[output_pb2.ChoiceDelta(index=0, token_ids=[token])])
            yield output_pb2.GenerateResponse(
                request_id=request.request_id,
                choices=[output_pb2.ChoiceDelta(
                    index=0, finish_reason=output_pb2.FINISH_REASON_LENGTH)],
                usage=output_pb2.Usage(prompt_tokens=len(request.prompt_token_ids.ids)))

        def GetModelInfo(self, request, context):
            return generation_pb2.ModelInfo(name="echo", bos_token_id=0)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    generation_grpc.add_GenerationServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    check(port > 0, "could not bind a loopback port")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = generation_grpc.GenerationStub(channel)
            request = generation_pb2.GenerateRequest(
                request_id="py-1", prompt_token_ids=generation_pb2.TokenIds(ids=[5, 6, 7]))
            responses = list(stub.Generate(request, timeout=10))
            check(len(responses) == 4, f"expected 4 stream messages, got {len(responses)}")
            check([r.choices[0].token_ids[0] for r in responses[:3]] == [5, 6, 7], "tokens")
            check(all(r.request_id == "py-1" for r in responses), "request id echoed")
            check(responses[-1].HasField("usage") and not responses[0].HasField("usage"),
                  "usage only in the last message")
            info = stub.GetModelInfo(generation_pb2.GetModelInfoRequest(), timeout=10)
            check(info.HasField("bos_token_id") and info.bos_token_id == 0, "bos id 0 is set")
            try:
                stub.Tokenize(generation_pb2.TokenizeRequest(prompt="x"), timeout=10)
                check(False, "an unimplemented method must fail")
            except grpc.RpcError as error:
                check(error.code() == grpc.StatusCode.UNIMPLEMENTED, str(error.code()))
    finally:
        server.stop(grace=None)


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    proto_root, files = sys.argv[1], sys.argv[2:]
    with tempfile.TemporaryDirectory() as out_dir:
        generate(proto_root, files, out_dir)
        sys.path.insert(0, out_dir)
        modules = {name: importlib.import_module(f"kvserve.v1.{name}")
                   for name in ("generation_pb2", "generation_pb2_grpc", "output_pb2",
                                "sampling_pb2", "worker_pb2", "worker_pb2_grpc", "kv_events_pb2")}
        check_messages(modules["generation_pb2"], modules["sampling_pb2"])
        check_services(modules["generation_pb2"], modules["worker_pb2"],
                       modules["generation_pb2_grpc"], modules["worker_pb2_grpc"])
        call_through_stubs(modules["generation_pb2"], modules["output_pb2"],
                           modules["generation_pb2_grpc"])
    print(f"python stubs OK for {len(files)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
