"""End-to-end test of the router's HTTP front end at scale: 1,000 concurrent Server-Sent-Event
streams through kvserve-router (--http_port) on loopback, then 200 clients that disconnect
mid-stream. A worker with the synthetic tiny model (short outputs, fast) runs the requests; the
prompts are token ids (the synthetic model has no tokenizer).

Checks: every stream ends with `data: [DONE]` and its usage; the router's open HTTP streams go
back to 0 and its thread and file-descriptor counts come back to what they were before the load
(measured after a first, warm-up run of the same load);
every disconnected client's request is cancelled on the worker and every KV block is back in the
pool. Prints the router's RSS, threads and descriptors before, at the peak and after.

  python3 router_http_streams_e2e_test.py --worker=build/worker/kvserve-worker \\
      --router=build/router/kvserve-router --proto-root=proto
"""

import asyncio
import json
import os
import sys
import time
import unittest
import urllib.request

import kvserve_e2e
import router_e2e_lib as lib

OPTIONS, UNITTEST_ARGV = kvserve_e2e.parse_args(sys.argv)
NUM_STREAMS = 1000
NUM_DISCONNECTS = 200
MODEL = {}  # "name": the served model's name, from /v1/models
WORKER_ARGS = ["--model=synthetic:tiny", "--max_num_seqs=256", "--max_num_batched_tokens=2048",
               "--num_threads=1", "--kv_memory_bytes=67108864", "--drain_timeout_s=5"]


setUpModule, tearDownModule = lib.module_fixtures(OPTIONS)


def proc_counts(pid):
    """(RSS MiB, threads, open file descriptors) of a process."""
    rss, threads = 0.0, 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return rss, threads, len(os.listdir(f"/proc/{pid}/fd"))


def request_bytes(port, index, max_tokens):
    body = json.dumps({"model": MODEL["name"], "prompt": [3 + (index * 7 + i) % 250 for i in range(8)],
                       "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                       "stream": True, "stream_options": {"include_usage": True}}).encode()
    return (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n").encode() + body


async def one_stream(port, index, max_tokens, disconnect_after=None):
    """Runs one streamed completion; returns ("done", usage), or ("left", events) when it hung
    up after `disconnect_after` data events."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request_bytes(port, index, max_tokens))
        await writer.drain()
        status_line = await reader.readline()
        if b" 200 " not in status_line:
            rest = await reader.read()
            return ("error", (status_line + rest).decode(errors="replace"))
        events, usage = 0, None
        while True:
            line = await reader.readline()
            if not line:
                return ("cut", events)
            if not line.startswith(b"data: "):
                continue
            data = line[6:].strip()
            if data == b"[DONE]":
                return ("done", usage)
            chunk = json.loads(data)
            if "error" in chunk:
                return ("error", chunk)
            if chunk.get("usage"):
                usage = chunk["usage"]
            events += 1
            if disconnect_after is not None and events >= disconnect_after:
                return ("left", events)
    finally:
        writer.close()


async def run_all(port, count, max_tokens, disconnect_after=None):
    return await asyncio.gather(*(one_stream(port, i, max_tokens, disconnect_after)
                                  for i in range(count)))


class RouterHttpStreamsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.worker = kvserve_e2e.Worker(OPTIONS["worker"], WORKER_ARGS).start()
        cls.router = lib.start_router(OPTIONS, [cls.worker],
                                      ["--http_port=0", "--max_queue=2048"])
        url = f"http://127.0.0.1:{cls.router.http_port}/v1/models"
        with urllib.request.urlopen(url, timeout=30) as response:
            MODEL["name"] = json.loads(response.read())["data"][0]["id"]

    def settle(self, pid, baseline, timeout_s=30):
        """Waits until the process's threads and descriptors are back to `baseline` (or below);
        returns the last counts."""
        deadline = time.time() + timeout_s
        counts = proc_counts(pid)
        while time.time() < deadline:
            counts = proc_counts(pid)
            if counts[1] <= baseline[1] and counts[2] <= baseline[2]:
                break
            time.sleep(0.2)
        return counts

    def test_1_thousand_concurrent_sse_streams_complete(self):
        pid = self.router.process.pid
        # Warm-up at full load: gRPC's and the allocator's pools sized before the baseline, so
        # that what the measured run leaves behind is growth, not first use.
        cold = proc_counts(pid)
        asyncio.run(run_all(self.router.http_port, NUM_STREAMS, 8))
        self.router.wait_metric("kvserve_http_open_streams", lambda v: v == 0)
        time.sleep(1)
        before = proc_counts(pid)
        peak = [before]

        async def load():
            sampler_done = asyncio.Event()

            async def sample():
                while not sampler_done.is_set():
                    peak.append(proc_counts(pid))
                    await asyncio.sleep(0.1)

            sampler = asyncio.create_task(sample())
            results = await run_all(self.router.http_port, NUM_STREAMS, 8)
            sampler_done.set()
            await sampler
            return results

        start = time.time()
        results = asyncio.run(load())
        elapsed = time.time() - start
        failures = [r for r in results if r[0] != "done"]
        self.assertEqual(failures, [], f"{len(failures)} of {NUM_STREAMS} streams failed")
        self.assertTrue(all(r[1]["completion_tokens"] == 8 for r in results))
        self.router.wait_metric("kvserve_http_open_streams", lambda v: v == 0)
        after = self.settle(pid, before)
        top = max(peak, key=lambda c: c[2])
        print(f"\n{NUM_STREAMS} SSE streams through the router in {elapsed:.1f} s; router RSS "
              f"{cold[0]:.1f} MiB cold, {before[0]:.1f} after the warm-up run, "
              f"{max(c[0] for c in peak):.1f} peak, "
              f"{after[0]:.1f} after; threads {before[1]} -> peak {max(c[1] for c in peak)} -> "
              f"{after[1]}; fds {before[2]} -> peak {top[2]} -> {after[2]}", file=sys.stderr)
        self.assertLessEqual(after[1], before[1], "threads left behind")
        self.assertLessEqual(after[2], before[2], "file descriptors left behind")

    def test_2_disconnecting_clients_cancel_and_free_their_blocks(self):
        cancelled = self.worker.metric('kvserve_requests_finished_total{reason="cancelled"}')
        results = asyncio.run(run_all(self.router.http_port, NUM_DISCONNECTS, 400,
                                      disconnect_after=2))
        self.assertTrue(all(r[0] == "left" for r in results),
                        [r for r in results if r[0] != "left"][:3])
        self.worker.wait_metric('kvserve_requests_finished_total{reason="cancelled"}',
                                lambda v: v >= cancelled + NUM_DISCONNECTS, timeout_s=60)
        self.worker.wait_metric("kvserve_kv_blocks_used", lambda v: v == 0, timeout_s=60)
        self.router.wait_metric("kvserve_http_open_streams", lambda v: v == 0)
        # Nothing of them is left in the router's books either.
        self.assertEqual(self.router.worker_gauge("kvserve_router_worker_reserved_blocks",
                                                  self.worker), 0)


if __name__ == "__main__":
    unittest.main(argv=UNITTEST_ARGV, verbosity=2)
