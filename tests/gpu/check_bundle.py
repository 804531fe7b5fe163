#!/usr/bin/env python3
"""The device bundle (scripts/gpu_bundle.sh), made from this build's programs into a temporary
folder and checked on a machine without a GPU:
  - it is under 60 MiB (what one device call may carry, besides the working tree) and holds
    every program, the CUDA module, env.sh and the manifest;
  - every program and library resolves each dependency (ldd, after env.sh) inside the bundle, to
    glibc, or to the CUDA driver, cudart, cuBLAS or NCCL;
  - its CPU parts run: the GPU tests skip, gpu_bench says there is no device, model_bench lists
    its benchmarks, and kvserve-worker serves synthetic weights on the CPU to kvserve-loadgen and
    exits 0 on SIGTERM;
  - scripts/gpu_check.sh runs it in under 30 s, writes "no GPU" to $OUT/gpu_check.txt and
    exits 0 (not run where nvidia-smi lists a GPU: there it runs the whole check).

  check_bundle.py --build BUILD_DIR --source SOURCE_DIR
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

ARGS = None
MAX_BYTES = 60 * 1024 * 1024
PROGRAMS = ["cuda_kernels_test", "nccl_communicator_test", "gpu_model_test", "gpu_bench",
            "model_bench", "kvserve-loadgen", "kvserve-worker"]
# What may resolve outside the bundle: glibc's libraries and the CUDA ones the device brings.
GLIBC = {"linux-vdso.so.1", "ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6", "libdl.so.2",
         "libpthread.so.0", "librt.so.1", "libutil.so.1", "libresolv.so.2"}
CUDA = {"libcuda.so.1", "libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13", "libnccl.so.2"}


def has_gpu():
    if shutil.which("nvidia-smi") is None:
        return False
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    return listed.returncode == 0 and "GPU " in listed.stdout


class BundleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="gpu_bundle_test.")
        cls.bundle = os.path.join(cls.tmp, "gpu-bundle")
        # env.sh unpacks large libraries under $TMPDIR: keep them in this test's folder.
        cls.env = dict(os.environ, TMPDIR=cls.tmp)
        made = subprocess.run(
            [os.path.join(ARGS.source, "scripts", "gpu_bundle.sh"), "--build", ARGS.build,
             "--out", cls.bundle], env=cls.env, capture_output=True, text=True, timeout=120)
        sys.stdout.write(made.stdout + made.stderr)
        if made.returncode != 0:
            raise AssertionError(f"gpu_bundle.sh failed with exit status {made.returncode}")
        # Measured before anything runs from it.
        cls.bytes = sum(os.path.getsize(os.path.join(d, f))
                        for d, _, files in os.walk(cls.bundle) for f in files)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_in_bundle(self, *argv, timeout=60, **kwargs):
        """argv run with the bundle's env.sh sourced first."""
        script = '. "$0/env.sh" >/dev/null && exec "$@"'
        return subprocess.run(["bash", "-c", script, self.bundle, *argv], env=self.env,
                              text=True, timeout=timeout, **kwargs)

    def test_bundle_is_under_60_mib_and_holds_every_program(self):
        print(f"bundle: {self.bytes / 1048576:.1f} MiB")
        self.assertLess(self.bytes, MAX_BYTES)
        for name in PROGRAMS:
            self.assertTrue(os.access(os.path.join(self.bundle, "bin", name), os.X_OK), name)
        for name in ("env.sh", "MANIFEST.txt"):
            self.assertTrue(os.path.isfile(os.path.join(self.bundle, name)), name)
        # The CUDA module travels packed once it passes the packing threshold.
        module = os.path.join(self.bundle, "lib", "libkvserve_cuda.so")
        self.assertTrue(os.path.isfile(module) or os.path.isfile(module + ".gz"), module)

    def test_every_dependency_resolves_inside_the_bundle_or_to_glibc_or_cuda(self):
        files = [os.path.join(self.bundle, "bin", name) for name in PROGRAMS]
        lib = os.path.join(self.bundle, "lib")
        files += [os.path.join(lib, name) for name in sorted(os.listdir(lib))
                  if not name.endswith(".gz")]
        unpacked = os.path.join(self.tmp, f"kvserve-bundle-{os.getuid()}")
        problems = []
        for path in files:
            ldd = self.run_in_bundle("ldd", path, capture_output=True)
            self.assertEqual(ldd.returncode, 0, ldd.stderr)
            for name, where in re.findall(r"^\s*(\S+) => (.+?)(?: \(0x[0-9a-f]+\))?$",
                                          ldd.stdout, re.M):
                inside = where.startswith((self.bundle + "/", unpacked + "/"))
                if where == "not found" or not (inside or name in GLIBC | CUDA):
                    problems.append(f"{os.path.relpath(path, self.bundle)}: {name} => {where}")
        self.assertEqual(problems, [])

    def test_gpu_programs_skip_or_say_no_device_without_a_gpu(self):
        if has_gpu():
            self.skipTest("a GPU is present")
        for test in ("cuda_kernels_test", "nccl_communicator_test", "gpu_model_test"):
            result = self.run_in_bundle(test, "--gtest_brief=1", capture_output=True)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            self.assertRegex(result.stdout, r"\[  SKIPPED \] \d+ tests?", test)
        bench = self.run_in_bundle("gpu_bench", capture_output=True)
        self.assertEqual(bench.returncode, 0, bench.stderr)
        self.assertIn("no CUDA device", bench.stdout)
        listed = self.run_in_bundle("model_bench", "--benchmark_list_tests", capture_output=True)
        self.assertEqual(listed.returncode, 0, listed.stderr)
        self.assertRegex(listed.stdout, r"BM_Decode/64/")

    def test_worker_serves_synthetic_weights_on_the_cpu_and_drains_on_sigterm(self):
        worker = subprocess.Popen(
            ["bash", "-c", '. "$0/env.sh" >/dev/null && exec "$@"', self.bundle,
             "kvserve-worker", "--model=synthetic:tiny", "--device=cpu", "--num_threads=1",
             "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0"],
            env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            port, lines = None, []
            for line in worker.stdout:
                lines.append(line)
                match = re.match(r"kvserve-worker grpc_port=(\d+)", line)
                port = match.group(1) if match else port
                if line.startswith("kvserve-worker ready"):
                    break
            self.assertIsNotNone(port, "".join(lines))
            load = self.run_in_bundle(
                "kvserve-loadgen", f"--target=127.0.0.1:{port}", "--concurrency=8",
                "--num_requests=16", "--prompt_len=8:16", "--output_len=4:8", "--vocab_low=1",
                "--vocab_high=250", capture_output=True)
            self.assertEqual(load.returncode, 0, load.stdout + load.stderr)
            self.assertIn("16 ok, 0 failed", load.stdout)
            worker.terminate()
            self.assertEqual(worker.wait(timeout=30), 0)
            self.assertIn("kvserve-worker stopped", worker.stdout.read())
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
            worker.stdout.close()

    def test_gpu_check_reports_no_gpu_within_30_seconds(self):
        if has_gpu():
            self.skipTest("a GPU is present: gpu_check.sh would run the whole check")
        out = os.path.join(self.tmp, "out")
        start = time.monotonic()
        check = subprocess.run(
            [os.path.join(ARGS.source, "scripts", "gpu_check.sh")],
            env=dict(self.env, GPU_CHECK_BUNDLE=self.bundle, OUT=out), capture_output=True,
            text=True, timeout=60)
        took = time.monotonic() - start
        print(f"gpu_check.sh: exit status {check.returncode} in {took:.1f} s")
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        self.assertLess(took, 30)
        with open(os.path.join(out, "gpu_check.txt"), encoding="utf-8") as text:
            report = text.read()
        self.assertIn("no GPU", report)
        self.assertIn("== smoke: PASS", report)


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--build", required=True, help="the build folder the programs come from")
    parser.add_argument("--source", required=True, help="the source tree (for scripts/)")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
