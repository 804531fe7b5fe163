#!/usr/bin/env python3
"""ctest deploy_checks_catch_breakage: the deploy checks can fail. The files the checks read (see
copy_tree) are copied into a scratch tree; each case breaks one thing there the way a real change
would, runs the check that must notice, and requires it to exit non-zero with the expected
message. The kustomize case runs only where kustomize or kubectl is.

  python3 tests/deploy/check_breakage.py <source root>
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

from deploy_common import Failures, source_root

HERE = pathlib.Path(__file__).resolve().parent
K8S = "deploy/k8s"
WORKER_SET = f"{K8S}/base/worker-statefulset.yaml"
ROUTER_DEP = f"{K8S}/base/router-deployment.yaml"
WORKER_HPA = f"{K8S}/base/worker-hpa.yaml"
# The autoscaler issue 10 replaced: the routers scaled on their queue depth, no worker HPA.
OLD_ROUTER_HPA = """apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: kvserve-router
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: kvserve-router
  minReplicas: 2
  maxReplicas: 8
  metrics:
    - type: Pods
      pods:
        metric:
          name: kvserve_router_queue_depth
        target:
          type: AverageValue
          averageValue: "32"
"""

# (what breaks, file, old text, new text, check script, expected message)
CASES = [
    ("rules query a metric that does not exist", "deploy/prometheus/rules.yml",
     "max by (namespace, pod) (kvserve_kv_cache_usage_ratio)",
     "max by (namespace, pod) (kvserve_kv_cache_usage_percent)",
     "check_metric_names.py", "'kvserve_kv_cache_usage_percent' is not documented"),
    ("rules read a histogram without _bucket", "deploy/prometheus/rules.yml",
     "rate(kvserve_inter_token_latency_seconds_bucket[5m])",
     "rate(kvserve_inter_token_latency_seconds[5m])",
     "check_metric_names.py", "is a histogram"),
    ("dashboard edited by hand with a wrong name", "deploy/grafana/kvserve-dashboard.json",
     "kvserve_router_queue_depth{", "kvserve_router_queue_length{",
     "check_metric_names.py", "'kvserve_router_queue_length' is not documented"),
    ("a metric dropped from docs/metrics.md", "docs/metrics.md",
     "| `kvserve_preemptions_total` |", "| `kvserve_preemption_count` |",
     "check_metric_names.py", "'kvserve_preemptions_total' is not documented"),
    ("a metric renamed in the code only", "worker/metrics.cc",
     '"kvserve_preemptions_total"', '"kvserve_preempted_sequences_total"',
     "check_metric_names.py", "no worker/ or router/ .cc file registers it"),
    ("rules.yml does not parse as PromQL", "deploy/prometheus/rules.yml",
     "expr: max by (namespace, pod) (kvserve_kv_cache_usage_ratio)",
     "expr: max by (namespace, pod) (kvserve_kv_cache_usage_ratio",
     "check_rules.py", "check rules rules.yml exited"),
    ("an alert threshold its unit test pins", "deploy/prometheus/rules.yml",
     "pod:kvserve_kv_cache_usage_ratio:max > 0.95", "pod:kvserve_kv_cache_usage_ratio:max > 0.99",
     "check_rules.py", "test rules rules_test.yml exited"),
    ("a worker flag the binary does not define", f"{K8S}/base/config/worker.flags",
     "--block_size=16", "--block_size=16\n--kv_cache_bytes=1",
     "check_manifests.py", "defines no flag --kv_cache_bytes"),
    ("a flag removed from the binary", "worker/main.cc",
     "ABSL_FLAG(double, drain_timeout_s,", "ABSL_FLAG(double, drain_deadline_s,",
     "check_manifests.py", "kvserve-worker defines no flag --drain_timeout_s"),
    ("a TLS flag misspelt in the component", f"{K8S}/components/tls/worker-tls.yaml",
     "--tls_ca=", "--tls_client_ca=", "check_manifests.py", "defines no flag --tls_client_ca"),
    ("a kustomization names a missing file", f"{K8S}/base/kustomization.yaml",
     "  - pdb.yaml\n", "  - pdb.yaml\n  - ingress.yaml\n",
     "check_manifests.py", "references ingress.yaml, which does not exist"),
    ("a writable root filesystem", ROUTER_DEP, "readOnlyRootFilesystem: true",
     "readOnlyRootFilesystem: false", "check_manifests.py", "readOnlyRootFilesystem must be true"),
    ("a container without a readiness probe", ROUTER_DEP, "          readinessProbe:\n",
     "          readinessProbeDisabled:\n", "check_manifests.py", "no readinessProbe"),
    ("a grace period shorter than the drain", WORKER_SET, "terminationGracePeriodSeconds: 90",
     "terminationGracePeriodSeconds: 60", "check_manifests.py",
     "terminationGracePeriodSeconds 60 must exceed"),
    ("a probe on the wrong port", WORKER_SET, "            grpc:\n              port: 50061\n"
     "            periodSeconds: 5\n            timeoutSeconds: 2",
     "            grpc:\n              port: 50062\n            periodSeconds: 5\n"
     "            timeoutSeconds: 2", "check_manifests.py", "readinessProbe port 50062"),
    ("no memory limit", WORKER_SET, "            limits:\n              cpu: \"4\"\n"
     "              memory: 16Gi\n", "            limits:\n              cpu: \"4\"\n",
     "check_manifests.py", "resources.limits needs memory"),
    ("a /dev/shm larger than the memory limit", WORKER_SET, "sizeLimit: 8Gi", "sizeLimit: 32Gi",
     "check_manifests.py", "memory limit is not above the 32Gi Memory emptyDir on /dev/shm"),
    # Threads from the container's CPU limit (issue 10).
    ("OpenBLAS left to start a thread per node core", WORKER_SET,
     "            - name: OPENBLAS_NUM_THREADS\n              value: \"1\"\n", "",
     "check_manifests.py", "env OPENBLAS_NUM_THREADS must be"),
    ("a worker without a CPU limit", WORKER_SET, "            limits:\n              cpu: \"4\"\n",
     "            limits:\n", "check_manifests.py", "resources.limits needs cpu"),
    ("--num_threads fixed instead of taken from the CPU limit", WORKER_SET,
     "- --num_threads=$(KVSERVE_CPU_LIMIT)", "- --num_threads=4", "check_manifests.py",
     "--num_threads must come from the container's CPU limit"),
    ("--num_threads back in a flag file", f"{K8S}/overlays/cpu-dev/config/worker.flags",
     "--block_size=16", "--block_size=16\n--num_threads=2", "check_manifests.py",
     "sets --num_threads"),
    # GPU workers (issue 8).
    ("the h200 KV pool sized by a host budget again", f"{K8S}/overlays/h200/config/worker.flags",
     "\n--kv_memory_bytes=0\n", "\n--kv_memory_bytes=103079215104\n", "check_manifests.py",
     "sizes the KV pool by a fixed host budget"),
    ("a CUDA worker without a GPU", WORKER_SET,
     "              nvidia.com/gpu: \"1\"\n          startupProbe:", "          startupProbe:",
     "check_manifests.py", "but no nvidia.com/gpu limit"),
    ("/dev/shm on disk instead of memory", WORKER_SET,
     "            medium: Memory\n            sizeLimit: 8Gi", "            sizeLimit: 8Gi",
     "check_manifests.py", "needs a Memory emptyDir on /dev/shm"),
    ("h200 workers on the CPU", f"{K8S}/overlays/h200/config/worker.flags", "--device=cuda",
     "--device=cpu", "check_image.py", "use the CPU image"),
    ("cpu-dev on the CUDA image", f"{K8S}/overlays/cpu-dev/kustomization.yaml",
     "newTag: 0.1.0-cpu", "newTag: 0.1.0", "check_image.py", "use the CPU image"),
    ("the CUDA image without the CUDA backend module", "deploy/docker/Dockerfile",
     "      && install -m 0644 /build/kernels/libkvserve_cuda.so /opt/kvserve/lib/; \\\n", "",
     "check_image.py", "libkvserve_cuda.so is not installed in /opt/kvserve/lib"),
    ("the CPU image on a CUDA base", "deploy/docker/Dockerfile",
     "FROM ubuntu:${UBUNTU_VERSION} AS runtime-base-cpu",
     "FROM nvidia/cuda:${CUDA_VERSION}-runtime-${BASE_OS} AS runtime-base-cpu", "check_image.py",
     "the cpu variant needs no CUDA base"),
    # Autoscaling (issue 10).
    ("the HPA scales the routers instead of the workers", WORKER_HPA,
     "    kind: StatefulSet\n    name: kvserve-worker", "    kind: Deployment\n    name: kvserve-router",
     "check_manifests.py", "more routers add no KV capacity"),
    ("the worker HPA on a router metric", WORKER_HPA, "name: kvserve_requests_waiting",
     "name: kvserve_router_queue_depth", "check_manifests.py",
     "kvserve_router_queue_depth is not a metric of kvserve-worker pods"),
    ("the worker HPA on a metric the adapter does not serve", WORKER_HPA,
     "name: kvserve_requests_waiting", "name: kvserve_requests_running", "check_metric_names.py",
     "'kvserve_requests_running' is not served by adapter-rules.yaml"),
    ("the StatefulSet pins its replicas under the HPA", WORKER_SET,
     "  serviceName: kvserve-worker\n", "  serviceName: kvserve-worker\n  replicas: 2\n",
     "check_manifests.py", "sets spec.replicas while"),
    ("setup.sh gains a library the image lacks", "scripts/setup.sh", "libxxhash-dev",
     "libxxhash-dev libzstd-dev", "check_image.py", "installs libzstd-dev"),
    ("the image's model is not the one the flags load", "deploy/docker/Dockerfile",
     "KVSERVE_MODEL=/opt/kvserve/models/", "KVSERVE_MODEL=/models/", "check_image.py",
     "is not the image's model"),
    ("pods run as another uid than the image's user", ROUTER_DEP, "runAsUser: 10001",
     "runAsUser: 1000", "check_image.py", "runAsUser 1000 is not the image's 10001"),
    ("router discovery names the wrong Service", f"{K8S}/base/config/router.flags",
     "--workers_dns=kvserve-worker:50061", "--workers_dns=kvserve-workers:50061",
     "check_manifests.py", "--workers_dns names no Service"),
]
# Only where kustomize runs: what shows only once the overlays' patches are applied.
KUSTOMIZE_CASES = [
    ("an overlay patch that no longer applies", f"{K8S}/overlays/cpu-dev/kustomization.yaml",
     "path: /spec/template/spec/tolerations\n", "path: /spec/template/spec/tolerationz/0\n",
     "check_kustomize.py", "kustomize failed"),
    ("the CPU worker of cpu-dev keeps the base's GPU", f"{K8S}/overlays/cpu-dev/kustomization.yaml",
     "      - op: remove\n        path: /spec/template/spec/containers/0/resources/limits/"
     "nvidia.com~1gpu\n", "", "check_kustomize.py", "but the pod holds nvidia.com/gpu"),
]


def copy_tree(root, scratch):
    """The files the checks read: deploy/, docs/metrics.md, scripts/setup.sh, the model's default
    path, where the CUDA module is built and looked for (kernels/), and the sources and CMake
    files of worker/, router/ and tools/."""
    shutil.copytree(root / "deploy", scratch / "deploy")
    files = ["docs/metrics.md", "scripts/setup.sh", "scripts/fetch_model.sh",
             "model/default_model.h", "kernels/CMakeLists.txt", "kernels/backend_factory.cc"]
    for folder in ("worker", "router", "tools"):
        for pattern in ("*.cc", "*.h", "*.cmake", "CMakeLists.txt"):
            files += [str(p.relative_to(root)) for p in (root / folder).glob(pattern)]
    for file in files:
        (scratch / file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / file, scratch / file)


def run_check(script, scratch, env=None):
    result = subprocess.run([sys.executable, str(HERE / script), str(scratch)],
                            capture_output=True, text=True, timeout=300, env=env)
    return result.returncode, result.stdout + result.stderr


def expect_failure(failures, what, scratch, script, expected, write=None, env=None):
    """Runs `script` with the files of `write` in place (then restored); it must fail."""
    originals = {}
    for file, text in (write or {}).items():
        path = scratch / file
        originals[path] = path.read_text(encoding="utf-8") if path.exists() else None
        path.write_text(text, encoding="utf-8")
    code, output = run_check(script, scratch, env)
    for path, text in originals.items():
        if text is None:
            path.unlink()
        else:
            path.write_text(text, encoding="utf-8")
    caught = code != 0 and expected in output
    print(f"{'caught' if caught else 'MISSED'}: {what} ({script} exit {code})")
    failures.check(caught, f"{script} did not catch '{what}' (exit {code}, expected "
                           f"'{expected}'):\n{output}")


def main():
    root = source_root()
    failures = Failures("deploy_checks_catch_breakage")
    cases = list(CASES)
    if shutil.which("kustomize") or shutil.which("kubectl"):
        cases += KUSTOMIZE_CASES
    with tempfile.TemporaryDirectory() as tmp:
        scratch = pathlib.Path(tmp)
        copy_tree(root, scratch)
        for script in sorted({case[4] for case in cases}):
            code, output = run_check(script, scratch)
            failures.check(code == 0, f"{script} fails on the unbroken copy:\n{output}")
        for what, file, old, new, script, expected in cases:
            original = (scratch / file).read_text(encoding="utf-8")
            if failures.check(original.count(old) == 1,
                              f"case '{what}': '{old.strip()}' is not once in {file}; "
                              "update the case"):
                expect_failure(failures, what, scratch, script, expected,
                               write={file: original.replace(old, new)})
        expect_failure(failures, "a YAML file no kustomization uses", scratch,
                       "check_manifests.py", "stray.yaml is referenced by no kustomization.yaml",
                       write={f"{K8S}/base/stray.yaml": "apiVersion: v1\nkind: ConfigMap\n"
                                                         "metadata:\n  name: stray\n"})
        kustomization = (scratch / K8S / "base" / "kustomization.yaml").read_text(encoding="utf-8")
        expect_failure(failures, "the old autoscaling: routers on queue depth, no worker HPA",
                       scratch, "check_manifests.py",
                       "scales kvserve-router on Pods kvserve_router_queue_depth",
                       write={f"{K8S}/base/kustomization.yaml":
                              kustomization.replace("worker-hpa.yaml", "router-hpa.yaml"),
                              f"{K8S}/base/router-hpa.yaml": OLD_ROUTER_HPA})
        # promtool missing must fail, not skip.
        expect_failure(failures, "promtool missing", scratch, "check_rules.py",
                       "promtool not found", env=dict(os.environ, PATH=str(scratch / "no-bin")))
    return failures.report(f"{len(cases) + 3} breakages")


if __name__ == "__main__":
    sys.exit(main())
