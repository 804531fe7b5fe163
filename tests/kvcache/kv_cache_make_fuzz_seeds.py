#!/usr/bin/env python3
"""Writes seed inputs for tests/kvcache/kv_cache_manager_fuzz.cc: for a few pool shapes (small
pools that fill up, larger ones that share prefixes), operation sequences that cycle through
every operation kind of the harness with deterministic entropy, so the fuzzer starts from inputs
that already reach allocation, prefix hits, forks and eviction.

Input format (see the fuzz target): byte 0 -> num_blocks, byte 1 -> block size, then per
operation one kind byte and 8 entropy bytes.

Usage: python3 tests/kvcache/kv_cache_make_fuzz_seeds.py OUT_DIR
"""
import os
import random
import sys

NUM_OPERATION_KINDS = 16  # KvCacheHarness::kNumOperationKinds
# (byte 0, byte 1): num_blocks = 2 + b0 % 31, block_size = 1 << (b1 % 6)
SHAPES = [(0, 0), (6, 2), (14, 4), (30, 1), (30, 5)]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = random.Random(20240611)
    for b0, b1 in SHAPES:
        for rounds in (1, 8):
            data = bytearray([b0, b1])
            for _ in range(rounds):
                for kind in range(NUM_OPERATION_KINDS):
                    data.append(kind)
                    data += rng.getrandbits(64).to_bytes(8, "little")
            name = f"pool{2 + b0 % 31}_block{1 << (b1 % 6)}_ops{rounds * NUM_OPERATION_KINDS}"
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
