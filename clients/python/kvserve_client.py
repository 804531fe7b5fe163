#!/usr/bin/env python3
"""A small kvserve client: streams a completion from kvserve.v1.Generation (a router, or a single
worker, which serves the same API).

  clients/python/generate_stubs.sh            # once: stubs into clients/python/gen
  clients/python/kvserve_client.py --prompt "The capital of France is"   # the router, 127.0.0.1:50051
  clients/python/kvserve_client.py --target 127.0.0.1:50061 --prompt "Hi"  # a worker directly
  clients/python/kvserve_client.py --chat "Write a haiku about caches." --max-tokens 48
  clients/python/kvserve_client.py --info
  clients/python/kvserve_client.py --target 127.0.0.1:50051 --token alice-secret --tls-ca ca.pem \
      --prompt "Hello"                        # a router with auth and TLS

Text is printed as it arrives; usage and the finish reason at the end.
"""

import argparse
import os
import sys

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gen"))
try:
    from kvserve.v1 import generation_pb2, generation_pb2_grpc, output_pb2, sampling_pb2
except ImportError:
    sys.exit("kvserve stubs not found: run clients/python/generate_stubs.sh first")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # The router's address, as kvserve-cli's --target (a worker answers the same API).
    parser.add_argument("--target", default="127.0.0.1:50051",
                        help="router (or worker) host:port (default: the router, 127.0.0.1:50051)")
    parser.add_argument("--prompt", help="plain text prompt")
    parser.add_argument("--chat", help="one user message, rendered with the chat template")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--timeout", type=float, default=300, help="deadline in seconds")
    parser.add_argument("--info", action="store_true", help="print ModelInfo and exit")
    parser.add_argument("--token", help="bearer token, for a router with --auth_tokens_file")
    parser.add_argument("--tls-ca", help="PEM CA file: connect with TLS, verifying the server")
    args = parser.parse_args()

    if args.tls_ca:
        with open(args.tls_ca, "rb") as ca:
            channel = grpc.secure_channel(args.target,
                                          grpc.ssl_channel_credentials(root_certificates=ca.read()))
    else:
        channel = grpc.insecure_channel(args.target)
    stub = generation_pb2_grpc.GenerationStub(channel)
    metadata = [("authorization", f"Bearer {args.token}")] if args.token else None
    if args.info:
        print(stub.GetModelInfo(generation_pb2.GetModelInfoRequest(), timeout=args.timeout,
                                metadata=metadata))
        return 0
    sampling = sampling_pb2.SamplingParams(temperature=args.temperature,
                                           max_tokens=args.max_tokens)
    if args.seed is not None:
        sampling.seed = args.seed
    if args.chat is not None:
        request = generation_pb2.GenerateRequest(
            chat=generation_pb2.ChatConversation(
                messages=[generation_pb2.ChatMessage(role="user", content=args.chat)]),
            sampling=sampling)
    else:
        request = generation_pb2.GenerateRequest(prompt=args.prompt or "Hello", sampling=sampling)

    try:
        for response in stub.Generate(request, timeout=args.timeout, metadata=metadata):
            for choice in response.choices:
                sys.stdout.write(choice.text)
                sys.stdout.flush()
                if choice.finish_reason:
                    reason = output_pb2.FinishReason.Name(choice.finish_reason)
                    sys.stdout.write(f"\n[{reason}]")
            if response.HasField("usage"):
                u = response.usage
                print(f"\n[usage: prompt {u.prompt_tokens}, completion {u.completion_tokens}, "
                      f"cached {u.cached_prompt_tokens}]")
    except grpc.RpcError as error:
        print(f"\nerror: {error.code().name}: {error.details()}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
