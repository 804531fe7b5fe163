#!/usr/bin/env python3
"""ctest deploy_k8s_manifests: the kustomize tree under deploy/k8s is well formed and true to the
binaries, checked offline from the files themselves (no kustomize needed):
  - every kustomization.yaml references files and folders that exist, and every YAML file under
    deploy/k8s is a kustomization or is referenced by one;
  - every document parses and has apiVersion, kind and metadata.name (JSON patches: op and path);
  - every container has an image, cpu/memory requests, a memory limit, startup, readiness and
    liveness probes, and a non-root securityContext (runAsNonRoot, no uid 0, no privilege
    escalation, read-only root filesystem, capabilities drop ALL);
  - every flag passed to kvserve-worker / kvserve-router (args, JSON patches, and the flag files
    the ConfigMap generators ship, found through --flagfile and the volume it is mounted from)
    is one the binary defines with ABSL_FLAG;
  - probes and ports agree with --listen / --metrics_listen, the router's --workers_dns names the
    workers' headless Service and port, and terminationGracePeriodSeconds exceeds preStop plus
    --drain_timeout_s of every flag file the workload may get;
  - a container's memory limit exceeds the Memory emptyDirs it mounts (tmpfs counts against it);
  - kvserve-worker threads: OPENBLAS_NUM_THREADS=1, a CPU limit, --num_threads from it through
    the downward API (resourceFieldRef limits.cpu), and no --num_threads in the flag files;
  - a worker flag file with --device=cuda: the pod requests nvidia.com/gpu, mounts a Memory
    emptyDir on /dev/shm (NCCL) and sizes no KV pool by host memory (no --kv_memory_bytes > 0);
  - autoscaling: an HPA scales the worker StatefulSet on worker-side metrics (Pods metrics the
    workers export), no HPA scales the routers on anything but CPU, and a workload an HPA scales
    sets no spec.replicas.

  python3 tests/deploy/check_manifests.py <source root>
"""
import pathlib
import re
import sys

import yaml
from deploy_common import (ABSL_BUILTIN_FLAGS, BINARIES, Failures, defined_flags, is_worker_metric,
                           load_yaml_documents, parse_flag, parse_flag_lines, parse_quantity,
                           source_root)

WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}


class Tree:
    """The kustomize tree: which file plays which role, and the objects of the resources."""

    def __init__(self, root, failures):
        self.root = root
        self.k8s = root / "deploy" / "k8s"
        self.failures = failures
        self.resources = {}  # path -> [documents]
        self.patches = []  # (where, target or None, document or list of JSON patch ops)
        self.generators = []  # (where, configmap name, key, path)
        self.referenced = set()

    def rel(self, path):
        return str(pathlib.Path(path).relative_to(self.root))

    def load(self):
        kustomizations = sorted(self.k8s.rglob("kustomization.yaml"))
        self.failures.check(kustomizations, "no kustomization.yaml under deploy/k8s")
        for kfile in kustomizations:
            self.referenced.add(kfile)
            self.load_kustomization(kfile)
        for path in sorted(self.k8s.rglob("*.y*ml")):
            self.failures.check(path in self.referenced,
                                f"{self.rel(path)} is referenced by no kustomization.yaml")

    def exists(self, where, path, want_dir=None):
        ok = path.exists() and (want_dir is None or path.is_dir() == want_dir)
        self.failures.check(ok, f"{where}: references {path.name}, which does not exist "
                                f"({self.rel(path.parent)})")
        return ok

    def load_kustomization(self, kfile):
        where = self.rel(kfile)
        docs = self.parse(kfile)
        if len(docs) != 1:
            self.failures.add(f"{where}: want one document, got {len(docs)}")
            return
        k = docs[0]
        self.failures.check(k.get("kind") in ("Kustomization", "Component"),
                            f"{where}: kind must be Kustomization or Component")
        self.failures.check("apiVersion" in k, f"{where}: no apiVersion")
        base = kfile.parent
        for entry in k.get("resources", []):
            path = (base / entry).resolve()
            if self.exists(where, path):
                if path.is_dir():
                    self.exists(where, path / "kustomization.yaml")
                else:
                    self.referenced.add(path)
                    self.resources[path] = self.parse(path)
        for entry in k.get("components", []):
            path = (base / entry).resolve()
            if self.exists(where, path, want_dir=True):
                self.exists(where, path / "kustomization.yaml")
        for patch in k.get("patches", []) + k.get("patchesStrategicMerge", []):
            if isinstance(patch, str):
                patch = {"path": patch}
            target = patch.get("target")
            if "path" in patch:
                path = (base / patch["path"]).resolve()
                if self.exists(where, path):
                    self.referenced.add(path)
                    for doc in self.parse(path):
                        self.patches.append((self.rel(path), target, doc))
            elif "patch" in patch:
                try:
                    for doc in yaml.safe_load_all(patch["patch"]):
                        if doc is not None:
                            self.patches.append((f"{where} inline patch", target, doc))
                except yaml.YAMLError as error:
                    self.failures.add(f"{where}: inline patch does not parse: {error}")
        for generator in k.get("configMapGenerator", []) + k.get("secretGenerator", []):
            for entry in generator.get("files", []):
                key, _, file = entry.rpartition("=") if "=" in entry else (None, "", entry)
                path = (base / file).resolve()
                if self.exists(where, path):
                    self.generators.append((where, generator["name"], key or path.name, path))
            for entry in generator.get("envs", []):
                self.exists(where, (base / entry).resolve())

    def parse(self, path):
        try:
            return load_yaml_documents(path)
        except yaml.YAMLError as error:
            self.failures.add(f"{self.rel(path)}: does not parse: {error}")
            return []


def check_metadata(failures, where, doc):
    ok = isinstance(doc, dict)
    ok = ok and failures.check("apiVersion" in doc, f"{where}: no apiVersion")
    ok = ok and failures.check("kind" in doc, f"{where}: no kind")
    name = (doc.get("metadata") or {}).get("name") if isinstance(doc, dict) else None
    failures.check(bool(name), f"{where}: no metadata.name")
    return ok


def check_flag(failures, where, binary, text, flags):
    parsed = parse_flag(text)
    if parsed is None:
        return None
    failures.check(parsed[0] in flags[binary],
                   f"{where}: {binary} defines no flag --{parsed[0]} (ABSL_FLAG in "
                   f"{BINARIES[binary]}/)")
    return parsed


def port_of(address):
    return int(address.rpartition(":")[2])


def check_container(failures, where, container, pod_spec, flags, flagfiles):
    """Checks one container; returns (binary, configmap name, key) of its --flagfile or None."""
    name = f"{where} container {container.get('name')}"
    failures.check(bool(container.get("image")), f"{name}: no image")
    resources = container.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    failures.check("cpu" in requests and "memory" in requests,
                   f"{name}: resources.requests needs cpu and memory")
    failures.check("memory" in limits, f"{name}: resources.limits needs memory")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        failures.check(probe in container, f"{name}: no {probe}")
    pod_sc, sc = pod_spec.get("securityContext") or {}, container.get("securityContext") or {}
    failures.check(sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True,
                   f"{name}: runAsNonRoot must be true")
    failures.check(sc.get("runAsUser", pod_sc.get("runAsUser")) != 0, f"{name}: runAsUser 0")
    failures.check(sc.get("allowPrivilegeEscalation") is False,
                   f"{name}: allowPrivilegeEscalation must be false")
    failures.check(sc.get("readOnlyRootFilesystem") is True,
                   f"{name}: readOnlyRootFilesystem must be true")
    failures.check("ALL" in ((sc.get("capabilities") or {}).get("drop") or []),
                   f"{name}: capabilities.drop must include ALL")
    check_memory_volumes(failures, name, container, pod_spec)
    command = container.get("command") or []
    binary = pathlib.PurePosixPath(command[0]).name if command else None
    if binary not in BINARIES:
        return None
    if binary == "kvserve-worker":
        check_worker_threads(failures, name, container)
    env_names = {e.get("name") for e in container.get("env") or []}
    flagfile = None
    for arg in container.get("args") or []:
        parsed = check_flag(failures, name, binary, str(arg), flags)
        failures.check(parsed is not None, f"{name}: argument '{arg}' is not --flag=value")
        for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", str(arg)):
            failures.check(var in env_names, f"{name}: '{arg}' uses $({var}), not in env")
        if parsed and parsed[0] == "flagfile":
            flagfile = parsed[1]
    if flagfile is None:
        return None
    volumes = {v.get("name"): v for v in pod_spec.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        prefix = mount["mountPath"].rstrip("/") + "/"
        if flagfile.startswith(prefix):
            config_map = (volumes.get(mount["name"]) or {}).get("configMap") or {}
            if failures.check("name" in config_map,
                              f"{name}: --flagfile {flagfile} is not on a ConfigMap volume"):
                flagfiles.append((name, container, pod_spec, binary, config_map["name"],
                                  flagfile[len(prefix):]))
            return
    failures.add(f"{name}: --flagfile={flagfile} lies in no volumeMount")


def memory_volumes(container, pod_spec):
    """{mountPath: sizeLimit or None} of the Memory emptyDirs the container mounts."""
    volumes = {v.get("name"): v for v in pod_spec.get("volumes") or []}
    mounted = {}
    for mount in container.get("volumeMounts") or []:
        empty_dir = (volumes.get(mount.get("name")) or {}).get("emptyDir")
        if isinstance(empty_dir, dict) and empty_dir.get("medium") == "Memory":
            mounted[mount.get("mountPath")] = empty_dir.get("sizeLimit")
    return mounted


def check_memory_volumes(failures, name, container, pod_spec):
    """A Memory emptyDir (tmpfs) is charged to the container's memory: the limit must hold it."""
    limit = parse_quantity(((container.get("resources") or {}).get("limits") or {})
                           .get("memory", ""))
    for path, size in memory_volumes(container, pod_spec).items():
        if not failures.check(size is not None, f"{name}: Memory emptyDir on {path} has no "
                                                "sizeLimit"):
            continue
        failures.check(limit is None or limit > parse_quantity(size),
                       f"{name}: memory limit is not above the {size} Memory emptyDir on {path} "
                       "(tmpfs pages count against the limit)")


def check_worker_threads(failures, name, container):
    """Thread pools sized from the container's CPU limit, not the node's cores: OpenBLAS runs no
    pool of its own, and --num_threads comes from limits.cpu through the downward API."""
    env = {e.get("name"): e for e in container.get("env") or []}
    failures.check((env.get("OPENBLAS_NUM_THREADS") or {}).get("value") == "1",
                   f"{name}: env OPENBLAS_NUM_THREADS must be \"1\" (the worker sizes its own "
                   "thread pool; OpenBLAS would start one per node core beside it)")
    limits = (container.get("resources") or {}).get("limits") or {}
    failures.check("cpu" in limits, f"{name}: resources.limits needs cpu (the worker's "
                                    "--num_threads is taken from it)")
    from_limit = None
    for arg in container.get("args") or []:
        parsed = parse_flag(str(arg))
        if parsed and parsed[0] == "num_threads":
            match = re.fullmatch(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", parsed[1] or "")
            field = ((env.get(match.group(1)) or {}).get("valueFrom") or {}).get(
                "resourceFieldRef") if match else None
            from_limit = bool(field) and field.get("resource") == "limits.cpu" and \
                field.get("containerName", container.get("name")) == container.get("name")
    failures.check(from_limit, f"{name}: --num_threads must come from the container's CPU "
                               "limit: --num_threads=$(VAR) with VAR from resourceFieldRef "
                               "limits.cpu")


def check_worker_flag_file(failures, name, container, pod_spec, values, text_where, rendered):
    """What a worker flag file demands of its pod. `rendered`: the pod is the final object
    (kustomize output), so a CPU worker must also not hold a GPU; from the files alone the base
    pod stands for every overlay's, so only the CUDA direction is checked."""
    failures.check("num_threads" not in values,
                   f"{text_where}: sets --num_threads; the manifest passes it from the "
                   "container's CPU limit")
    device = values.get("device") or "cpu"
    resources = container.get("resources") or {}
    gpus = ((resources.get("limits") or {}).get("nvidia.com/gpu"))
    if device.startswith("cuda"):
        failures.check(gpus is not None and int(gpus) > 0,
                       f"{name}: --device={device} ({text_where}) but no nvidia.com/gpu limit")
        failures.check("/dev/shm" in memory_volumes(container, pod_spec),
                       f"{name}: --device={device} ({text_where}) needs a Memory emptyDir on "
                       "/dev/shm for NCCL")
        budget = values.get("kv_memory_bytes")
        failures.check(budget is None or int(budget) == 0,
                       f"{text_where}: --device={device} with --kv_memory_bytes={budget} sizes "
                       "the KV pool by a fixed host budget; size it from the GPU "
                       "(--gpu_memory_utilization, --kv_memory_bytes=0)")
    elif rendered:
        failures.check(gpus is None, f"{name}: --device={device} ({text_where}) but the pod "
                                     f"holds nvidia.com/gpu: {gpus}")


def check_autoscaling(failures, objects, require_worker_hpa):
    """objects: [(where, document)]. Workers scale on worker-side signals; routers do not scale
    on load metrics (more routers add no KV capacity); an HPA's target sets no replica count."""
    workloads = {}
    for where, doc in objects:
        if isinstance(doc, dict) and doc.get("kind") in WORKLOADS:
            for container in pod_spec_of(doc).get("containers") or []:
                command = container.get("command") or [""]
                binary = pathlib.PurePosixPath(command[0]).name
                if binary in BINARIES:
                    workloads[(doc["kind"], doc["metadata"]["name"])] = (where, doc, binary)
    worker_hpa = False
    for where, doc in objects:
        if not isinstance(doc, dict) or doc.get("kind") != "HorizontalPodAutoscaler":
            continue
        hpa = f"{where} HorizontalPodAutoscaler/{doc['metadata'].get('name')}"
        spec = doc.get("spec") or {}
        ref = spec.get("scaleTargetRef") or {}
        target = workloads.get((ref.get("kind"), ref.get("name")))
        if not failures.check(target, f"{hpa}: scales {ref.get('kind')}/{ref.get('name')}, "
                                      "which runs no kvserve binary here"):
            continue
        target_where, target_doc, binary = target
        failures.check("replicas" not in (target_doc.get("spec") or {}),
                       f"{target_where}: {ref.get('kind')}/{ref.get('name')} sets spec.replicas "
                       f"while {hpa} scales it (kubectl apply would reset the HPA's count)")
        metrics = spec.get("metrics") or []
        names = []
        for metric in metrics:
            kind = metric.get("type")
            body = metric.get(kind[0].lower() + kind[1:] if kind else "") or {}
            names.append((kind, (body.get("metric") or {}).get("name") or
                          body.get("name")))
        if binary == "kvserve-router":
            for kind, metric_name in names:
                failures.check(kind == "Resource" and metric_name == "cpu",
                               f"{hpa}: scales kvserve-router on {kind} {metric_name}: more routers "
                               "add no KV capacity; scale the workers, and the routers at most on "
                               "CPU")
        if binary == "kvserve-worker":
            worker_hpa = True
            failures.check(ref.get("kind") == "StatefulSet",
                           f"{hpa}: the workers are a StatefulSet, not a {ref.get('kind')}")
            for kind, metric_name in names:
                if kind == "Pods":
                    failures.check(is_worker_metric(metric_name or ""),
                                   f"{hpa}: {metric_name} is not a metric of kvserve-worker pods")
            failures.check(any(kind == "Pods" and is_worker_metric(n or "") for kind, n in names),
                           f"{hpa}: scales the workers on no worker-side signal (a Pods metric "
                           "such as kvserve_kv_cache_usage_ratio or kvserve_requests_waiting)")
    if require_worker_hpa:
        failures.check(worker_hpa, "no HorizontalPodAutoscaler scales the kvserve-worker "
                                   "StatefulSet on worker-side signals")


def pod_spec_of(doc):
    spec = doc.get("spec") or {}
    return ((spec.get("template") or {}).get("spec")) or {}


def check_services(failures, tree, services):
    """A StatefulSet's serviceName is a headless Service; a ServiceMonitor's endpoint ports are
    ports of the Services it selects."""
    for path, docs in tree.resources.items():
        for doc in docs:
            if not isinstance(doc, dict):
                continue
            where = f"{tree.rel(path)} {doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"
            spec = doc.get("spec") or {}
            if doc.get("kind") == "StatefulSet":
                service = services.get(spec.get("serviceName"))
                failures.check(service is not None and service["spec"].get("clusterIP") == "None",
                               f"{where}: serviceName {spec.get('serviceName')} is no headless "
                               f"Service of the base")
            if doc.get("kind") == "ServiceMonitor":
                wanted = (spec.get("selector") or {}).get("matchLabels") or {}
                selected = [s for s in services.values()
                            if wanted.items() <= ((s["metadata"].get("labels") or {}).items())]
                failures.check(selected, f"{where}: selects no Service")
                for endpoint in spec.get("endpoints") or []:
                    for service in selected:
                        names = [p.get("name") for p in service["spec"].get("ports", [])]
                        failures.check(endpoint.get("port") in names,
                                       f"{where}: Service {service['metadata']['name']} has no "
                                       f"port named {endpoint.get('port')}")


def main():
    root = source_root()
    failures = Failures("deploy_k8s_manifests")
    flags = {b: defined_flags(root, b) | ABSL_BUILTIN_FLAGS for b in BINARIES}
    for binary, names in flags.items():
        failures.check(len(names) > len(ABSL_BUILTIN_FLAGS), f"no ABSL_FLAG found for {binary}")
    tree = Tree(root, failures)
    tree.load()

    flagfiles, target_binary, services = [], {}, {}
    for path, docs in tree.resources.items():
        for i, doc in enumerate(docs):
            where = f"{tree.rel(path)}[{i}]"
            if not check_metadata(failures, where, doc):
                continue
            kind, obj_name = doc["kind"], doc["metadata"].get("name")
            if kind == "Service":
                services[obj_name] = doc
            if kind not in WORKLOADS:
                continue
            pod_spec = pod_spec_of(doc)
            failures.check(pod_spec.get("containers"), f"{where}: no containers")
            for container in pod_spec.get("containers") or []:
                check_container(failures, f"{where} {kind}/{obj_name}", container, pod_spec,
                                flags, flagfiles)
                command = container.get("command") or [""]
                if pathlib.PurePosixPath(command[0]).name in BINARIES:
                    target_binary[(kind, obj_name)] = pathlib.PurePosixPath(command[0]).name
            for container in pod_spec.get("initContainers") or []:
                check_container(failures, f"{where} {kind}/{obj_name} init", container, pod_spec,
                                flags, flagfiles)

    for where, target, doc in tree.patches:
        if isinstance(doc, list):
            binary = target_binary.get(((target or {}).get("kind"), (target or {}).get("name")))
            for op in doc:
                if not failures.check(isinstance(op, dict) and "op" in op and "path" in op,
                                      f"{where}: JSON patch entry without op/path: {op}"):
                    continue
                values = op.get("value")
                for value in values if isinstance(values, list) else [values]:
                    if isinstance(value, str) and value.startswith("--"):
                        if failures.check(binary, f"{where}: flag {value} patched into a "
                                                  f"target that runs no kvserve binary"):
                            check_flag(failures, where, binary, value, flags)
        elif check_metadata(failures, where, doc) and doc.get("$patch") != "delete":
            key = (doc["kind"], doc["metadata"]["name"])
            if doc["kind"] in WORKLOADS:
                failures.check(key in target_binary,
                               f"{where}: patches {key[0]}/{key[1]}, which the base lacks")
            for container in pod_spec_of(doc).get("containers") or []:
                binary = target_binary.get(key)
                for arg in container.get("args") or []:
                    if binary:
                        check_flag(failures, where, binary, str(arg), flags)

    # The flag files: every generator of a ConfigMap a --flagfile points into.
    by_configmap = {}
    for where, name, key, path in tree.generators:
        by_configmap.setdefault((name, key), []).append((where, path))
    for name, container, pod_spec, binary, config_map, key in flagfiles:
        files = by_configmap.get((config_map, key), [])
        if not failures.check(files, f"{name}: no configMapGenerator makes {config_map}/{key}"):
            continue
        grace = pod_spec.get("terminationGracePeriodSeconds", 30)
        pre_stop = (((container.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {})
        pre_stop_command = pre_stop.get("command") or []
        sleep_s = float(pre_stop_command[-1]) if "sleep" in "".join(pre_stop_command[:1]) else 0
        for where, path in files:
            text_where = tree.rel(path)
            parsed, bad = parse_flag_lines(path.read_text(encoding="utf-8"))
            failures.check(not bad, f"{text_where}: lines that are not --flag=value: {bad}")
            values = {}
            for flag_name, value in parsed:
                check_flag(failures, text_where, binary, f"--{flag_name}", flags)
                values[flag_name] = value
            if binary == "kvserve-worker":
                check_worker_flag_file(failures, name, container, pod_spec, values, text_where,
                                       rendered=False)
            drain_s = float(values.get("drain_timeout_s", 30))
            failures.check(grace > sleep_s + drain_s,
                           f"{name}: terminationGracePeriodSeconds {grace} must exceed preStop "
                           f"{sleep_s:g} s + --drain_timeout_s {drain_s:g} s of {text_where}")
            ports = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}
            if "listen" in values:
                listen = port_of(values["listen"])
                failures.check(ports.get("grpc") == listen,
                               f"{name}: containerPort 'grpc' {ports.get('grpc')} is not "
                               f"--listen's {listen} ({text_where})")
                for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                    grpc = (container.get(probe) or {}).get("grpc")
                    if grpc:
                        failures.check(grpc.get("port") == listen,
                                       f"{name}: {probe} port {grpc.get('port')} is not "
                                       f"--listen's {listen}")
            if int(values.get("http_port", -1)) > 0:
                failures.check(ports.get("http") == int(values["http_port"]),
                               f"{name}: containerPort 'http' {ports.get('http')} is not "
                               f"--http_port's {values['http_port']} ({text_where})")
            if "metrics_listen" in values:
                failures.check(ports.get("metrics") == port_of(values["metrics_listen"]),
                               f"{name}: containerPort 'metrics' is not --metrics_listen's port")
            if "workers_dns" in values:
                host, _, port = values["workers_dns"].rpartition(":")
                service = services.get(host.split(".")[0])
                if failures.check(service is not None,
                                  f"{text_where}: --workers_dns names no Service of the base"):
                    spec = service["spec"]
                    failures.check(spec.get("clusterIP") == "None",
                                   f"{text_where}: --workers_dns Service {host} is not headless")
                    failures.check(int(port) in [p.get("port") for p in spec.get("ports", [])],
                                   f"{text_where}: --workers_dns port {port} is not a port of "
                                   f"Service {host}")
    failures.check(flagfiles, "no kvserve container reads a --flagfile")
    check_services(failures, tree, services)
    check_autoscaling(failures, [(tree.rel(path), doc) for path, docs in tree.resources.items()
                                 for doc in docs], require_worker_hpa=True)
    checked = (f"{len(tree.resources)} resource files, {len(tree.patches)} patches, "
               f"{len(tree.generators)} generated files")
    return failures.report(checked)


if __name__ == "__main__":
    sys.exit(main())
