#!/usr/bin/env python3
"""Load check of the worker's HTTP front end (not run in CI): N concurrent Server-Sent-Event
streams on loopback against a kvserve-worker on the synthetic tiny model, each a short
/v1/completions with token-id input. Reports how many streams completed with [DONE], and the
worker's RSS, thread count and open file descriptors before, at peak and after.

  python3 bench/http_sse_load.py --worker=build/worker/kvserve-worker --streams=1000
"""

import argparse
import asyncio
import json
import os
import re
import subprocess
import time


def proc_stats(pid):
    status = open(f"/proc/{pid}/status").read()
    rss_kb = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))
    threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return {"rss_mib": round(rss_kb / 1024, 1), "threads": threads, "fds": fds}


async def one_stream(port, max_tokens):
    body = json.dumps({"prompt": [1, 2, 3, 4, 5, 6, 7, 8], "max_tokens": max_tokens,
                       "ignore_eos": True, "stream": True}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    await writer.drain()
    data = await reader.read()  # until the server closes (Connection: close)
    writer.close()
    return b"data: [DONE]" in data and data.startswith(b"HTTP/1.1 200")


async def run(port, streams, max_tokens, pid):
    peak = {}

    async def sample():
        while True:
            stats = proc_stats(pid)
            for key, value in stats.items():
                peak[key] = max(peak.get(key, 0), value)
            await asyncio.sleep(0.1)

    sampler = asyncio.create_task(sample())
    start = time.time()
    results = await asyncio.gather(*(one_stream(port, max_tokens) for _ in range(streams)),
                                   return_exceptions=True)
    elapsed = time.time() - start
    sampler.cancel()
    done = sum(1 for r in results if r is True)
    errors = [r for r in results if r is not True][:3]
    return done, elapsed, peak, errors


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", required=True)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--max_tokens", type=int, default=8)
    args = parser.parse_args()
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    worker = subprocess.Popen(
        [args.worker, "--model=synthetic:tiny", "--listen=127.0.0.1:0",
         "--metrics_listen=127.0.0.1:0", "--http_port=0", "--num_threads=2",
         f"--max_waiting_requests={args.streams + 16}", "--max_num_seqs=64"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port = None
    for line in worker.stdout:
        match = re.match(r"kvserve-worker http_port=(\d+)", line)
        if match:
            port = int(match.group(1))
        if line.startswith("kvserve-worker ready"):
            break
    try:
        before = proc_stats(worker.pid)
        done, elapsed, peak, errors = asyncio.run(run(port, args.streams, args.max_tokens,
                                                      worker.pid))
        time.sleep(1.0)
        after = proc_stats(worker.pid)
        print(f"streams: {done}/{args.streams} completed with [DONE] in {elapsed:.1f} s")
        print(f"worker before: {before}")
        print(f"worker peak:   {peak}")
        print(f"worker after:  {after}")
        if errors:
            print(f"first failures: {errors}")
    finally:
        worker.terminate()
        worker.wait(60)


if __name__ == "__main__":
    main()
