#!/usr/bin/env python3
"""ctest deploy_kustomize_build: kustomize renders deploy/k8s/base, every overlay, and the base
with each component, and the rendered objects (patches applied) still pass the container checks
of check_manifests.py; the flags each kvserve container gets through --flagfile (read from the
rendered ConfigMap) are flags its binary defines and fit the pod they land in (a CUDA worker holds
a GPU and /dev/shm, a CPU worker holds no GPU); HPAs scale what check_manifests.py allows, and
their targets set no replica count.

Needs `kustomize` or `kubectl` (its built-in kustomize). Neither is installed by
scripts/setup.sh, so without them this check exits 77, which ctest reports as skipped;
check_manifests.py covers the same ground from the files when it cannot run.

  python3 tests/deploy/check_kustomize.py <source root>
"""
import os
import shutil
import subprocess
import sys
import tempfile

import yaml
from check_manifests import (WORKLOADS, check_autoscaling, check_container, check_metadata,
                             check_worker_flag_file, pod_spec_of)
from deploy_common import (ABSL_BUILTIN_FLAGS, BINARIES, Failures, defined_flags,
                           parse_flag_lines, source_root)

SKIP = 77


def kustomize_command():
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    return None


def render(failures, command, directory, label):
    result = subprocess.run(command + [str(directory)], capture_output=True, text=True,
                            timeout=120)
    if not failures.check(result.returncode == 0,
                          f"{label}: kustomize failed: {result.stderr.strip()}"):
        return []
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]


def check_rendered(failures, label, docs, flags):
    config_maps = {d["metadata"]["name"]: d.get("data") or {} for d in docs
                   if d.get("kind") == "ConfigMap"}
    workloads = 0
    for doc in docs:
        where = f"{label}: {doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"
        if not check_metadata(failures, where, doc) or doc["kind"] not in WORKLOADS:
            continue
        workloads += 1
        pod_spec = pod_spec_of(doc)
        for container in pod_spec.get("containers") or []:
            flagfiles = []
            check_container(failures, where, container, pod_spec, flags, flagfiles)
            for name, _, _, binary, config_map, key in flagfiles:
                data = config_maps.get(config_map, {})
                if not failures.check(key in data, f"{name}: rendered ConfigMap {config_map} "
                                                   f"has no key {key}"):
                    continue
                parsed, bad = parse_flag_lines(data[key])
                failures.check(not bad, f"{name}: {config_map}/{key} has non-flag lines {bad}")
                for flag_name, _ in parsed:
                    failures.check(flag_name in flags[binary],
                                   f"{name}: {config_map}/{key}: {binary} defines no flag "
                                   f"--{flag_name}")
                if binary == "kvserve-worker":
                    check_worker_flag_file(failures, name, container, pod_spec, dict(parsed),
                                           f"{label}: {config_map}/{key}", rendered=True)
    failures.check(workloads > 0, f"{label}: renders no workload")
    check_autoscaling(failures, [(label, doc) for doc in docs], require_worker_hpa=False)


def main():
    root = source_root()
    failures = Failures("deploy_kustomize_build")
    command = kustomize_command()
    if command is None:
        print("deploy_kustomize_build: SKIPPED: neither kustomize nor kubectl is installed")
        return SKIP
    flags = {b: defined_flags(root, b) | ABSL_BUILTIN_FLAGS for b in BINARIES}
    k8s = root / "deploy" / "k8s"
    targets = [("base", k8s / "base")]
    targets += [(f"overlays/{d.name}", d) for d in sorted((k8s / "overlays").iterdir())
                if (d / "kustomization.yaml").exists()]
    components = [d for d in sorted((k8s / "components").iterdir())
                  if (d / "kustomization.yaml").exists()] if (k8s / "components").exists() else []
    with tempfile.TemporaryDirectory() as scratch:
        for component in components:
            # A kustomization outside the tree that applies the component to the base.
            directory = tempfile.mkdtemp(dir=scratch)
            with open(f"{directory}/kustomization.yaml", "w", encoding="utf-8") as f:
                yaml.safe_dump({"apiVersion": "kustomize.config.k8s.io/v1beta1",
                                "kind": "Kustomization",
                                # kustomize wants relative paths
                                "resources": [os.path.relpath(k8s / "base", directory)],
                                "components": [os.path.relpath(component, directory)]}, f)
            targets.append((f"base + components/{component.name}", directory))
        for label, directory in targets:
            docs = render(failures, command, directory, label)
            print(f"{label}: {len(docs)} objects: "
                  f"{', '.join(sorted({d.get('kind', '?') for d in docs}))}")
            check_rendered(failures, label, docs, flags)
    return failures.report(f"{len(targets)} builds with {' '.join(command)}")


if __name__ == "__main__":
    sys.exit(main())
