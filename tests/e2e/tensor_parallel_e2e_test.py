"""End-to-end tests of a tensor-parallel worker group: `kvserve-worker --tensor_parallel_size=N`
starts N processes on loopback (the leader spawns its followers; Gloo between them).

  - The default model at TP = 3 through the worker's gRPC API gives the same greedy text as
    TP = 1 for 10 prompts. Both run with --dtype=f32: on the CPU the default --dtype=auto keeps
    the file's Q4_1 blocks, whose int8 activation rounding is applied to each rank's slice, so a
    group can pick the other token at a near-tie; in f32 the only difference is the order of the
    all-reduce's sums.
  - kill -9 of a follower while 8 streams run through a router in front of a TP = 3 group and a
    TP = 1 worker (TP = 3: the default model's 9 query heads and 3 KV heads split 3 or 9 ways): every stream completes with the text of an undisturbed run (the group's
    in-flight requests end UNAVAILABLE and the router migrates them), the leader exits non-zero
    and no process of the group is left.
  - A follower frozen with SIGSTOP: the next all-reduce times out (--tp_timeout_s), the stream
    ends UNAVAILABLE, the leader exits non-zero and the frozen rank is killed.
  - kill -9 of the leader: its followers die with it (the kernel's parent-death signal).
  - SIGTERM to a leader under load: the in-flight streams finish, then every rank exits 0 (the
    leader exits 0 only when each follower did).

  python3 tensor_parallel_e2e_test.py --worker=build/worker/kvserve-worker \
      --router=build/router/kvserve-router --proto-root=proto
"""

import os
import re
import signal
import sys
import time
import unittest

import grpc

import kvserve_e2e
import router_e2e_lib as lib

OPTIONS, UNITTEST_ARGV = kvserve_e2e.parse_args(sys.argv)
# One CPU thread per rank (--num_threads is the group's total, shared among its ranks).
F32 = ["--dtype=float32", "--tp_timeout_s=20"]
PROMPTS = [f"Question {i}: what is the capital of country number {i}? Answer:" for i in range(10)]


setUpModule, tearDownModule = lib.module_fixtures(OPTIONS)


def start_group(size, extra=()):
    args = list(lib.WORKER_ARGS) + F32 + [f"--tensor_parallel_size={size}",
                                          f"--num_threads={size}", *extra]
    return kvserve_e2e.Worker(OPTIONS["worker"], args + kvserve_e2e.model_args(OPTIONS)).start()


def follower_pids(leader):
    for line in leader.output:
        match = re.search(r"follower_pids=([\d,]+)", line)
        if match:
            return [int(pid) for pid in match.group(1).split(",")]
    raise AssertionError("the leader printed no follower pids:\n" + leader.log())


def alive(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def children_of(pid):
    result = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[1]) == pid:
            result.append(int(entry))
    return result


def wait_gone(pids, timeout_s=30):
    deadline = time.time() + timeout_s
    while time.time() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.05)
    return [pid for pid in pids if alive(pid)]


def greedy(prompt, max_tokens):
    return lib.request(prompt, temperature=0, max_tokens=max_tokens, ignore_eos=True)


class TensorParallelTest(unittest.TestCase):
    def test_tp3_equals_tp1_for_10_prompts(self):
        outputs = {}
        for size in (1, 3):
            worker = start_group(size)
            stub = lib.generation_stub(worker.address)
            info = stub.GetModelInfo(lib.PB["generation_pb2"].GetModelInfoRequest())
            self.assertEqual(info.tensor_parallel_size, size)
            results, errors = lib.run_streams(stub, [greedy(p, 12) for p in PROMPTS], 600)
            self.assertEqual(errors, [])
            outputs[size] = results
            if size > 1:
                text = worker.metrics_text()
                self.assertIn("kvserve_tp_plan_broadcast_seconds_count", text)
                self.assertNotIn("kvserve_tp_allreduce_seconds_count 0\n", text)
                pids = follower_pids(worker)
            self.assertEqual(worker.terminate(), 0, worker.log())
            if size > 1:
                self.assertEqual(wait_gone(pids), [])
        for i, prompt in enumerate(PROMPTS):
            self.assertEqual(outputs[3][i], outputs[1][i], f"prompt {i}: {prompt!r}")
            self.assertEqual(len(outputs[3][i][0]), 12)

    def test_kill_follower_under_router_migrates_every_stream(self):
        group = start_group(3)
        single = start_group(1)
        pids = follower_pids(group)
        router = lib.start_router(OPTIONS, [group, single],
                                  ["--max_migrations=2", "--status_interval_ms=100"])
        stub = lib.generation_stub(router.address)
        requests = [greedy(f"Story number {i}: once upon a time, in a village by the sea,", 24)
                    for i in range(8)]
        undisturbed, errors = lib.run_streams(stub, requests, 600)
        self.assertEqual(errors, [])

        killed = []

        def kill_follower(counts):
            started = sum(1 for count in counts if count >= 2)
            if not killed and started >= 4 and max(counts) < 20:
                os.kill(pids[0], signal.SIGKILL)
                killed.append(list(counts))

        disturbed, errors = lib.run_streams(stub, requests, 600, kill_follower)
        self.assertEqual(errors, [])
        self.assertTrue(killed, "the follower was never killed: streams finished too fast")
        for i in range(len(requests)):
            self.assertEqual(disturbed[i], undisturbed[i], f"stream {i}")
        migrations = router.series("kvserve_router_migrations_total").get("", 0)
        self.assertGreaterEqual(migrations, 1)
        self.assertNotEqual(group.process.wait(60), 0, group.log())
        print(f"killed follower {pids[0]} at token counts {killed[0]}; {migrations:.0f} "
              f"migrations; the leader said: {[l for l in group.output if 'stopping' in l]}",
              file=sys.stderr)
        self.assertEqual(wait_gone(pids), [])
        self.assertEqual(children_of(group.process.pid), [])
        self.assertEqual(single.terminate(), 0)
        router.terminate()

    def test_frozen_follower_times_out_unavailable_and_leaves_no_process(self):
        group = start_group(3, ["--tp_timeout_s=3"])
        pids = follower_pids(group)
        stub = lib.generation_stub(group.address)
        stream = stub.Generate(greedy("A very long tale:", 400), timeout=120)
        next(stream)
        os.kill(pids[1], signal.SIGSTOP)  # the next all-reduce waits for it, then times out
        with self.assertRaises(grpc.RpcError) as raised:
            for _ in stream:
                pass
        self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAVAILABLE,
                         raised.exception.details())
        self.assertNotEqual(group.process.wait(60), 0, group.log())
        self.assertEqual(wait_gone(pids), [])  # SIGKILL reaches a stopped process

    def test_followers_die_with_a_killed_leader(self):
        group = start_group(3)
        pids = follower_pids(group)
        group.process.send_signal(signal.SIGKILL)
        group.process.wait(30)
        self.assertEqual(wait_gone(pids, timeout_s=10), [])  # PR_SET_PDEATHSIG

    def test_sigterm_drains_then_every_rank_exits_0(self):
        group = start_group(3, ["--drain_timeout_s=120"])
        pids = follower_pids(group)
        stub = lib.generation_stub(group.address)
        requests = [greedy(f"Tale {i}: the old lighthouse keeper", 16) for i in range(4)]
        signalled = []

        def terminate_when_running(counts):
            if not signalled and sum(1 for count in counts if count >= 1) >= 2:
                group.process.send_signal(signal.SIGTERM)
                signalled.append(list(counts))

        outputs, errors = lib.run_streams(stub, requests, 600, terminate_when_running)
        self.assertTrue(signalled)
        # Every stream was in flight (all were sent before the first token came back): all finish.
        self.assertEqual(errors, [])
        for tokens, _ in outputs:
            self.assertEqual(len(tokens), 16)
        self.assertEqual(group.process.wait(120), 0, group.log())
        self.assertEqual(wait_gone(pids), [])


if __name__ == "__main__":
    unittest.main(argv=UNITTEST_ARGV, verbosity=2)
