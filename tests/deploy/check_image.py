#!/usr/bin/env python3
"""ctest deploy_image_consistency: deploy/docker/Dockerfile agrees with the tree and with the
Kubernetes manifests (docker cannot build here; this is what can be checked without it):
  - the files it COPYs and runs exist; the programs it builds are CMake targets, installed from
    the build folder of the CMake file that defines them;
  - it installs every -dev package of scripts/setup.sh (but the ones named in NOT_FOR_IMAGE);
  - KVSERVE_MODEL is the default model file (model/default_model.h) and the path every flag file
    passes as --model;
  - its USER is the runAsUser / runAsGroup of every pod; every program a manifest runs is
    installed in /opt/kvserve/bin; it EXPOSEs the ports the flag files listen on;
  - Dockerfile.dockerignore keeps .git and the build folders out of the context;
  - where the tree builds the CUDA backend as a module (kernels/: kvserve_cuda, dlopened by
    kvserve-worker from ../lib beside its binary), the cuda variant builds it and installs it in
    /opt/kvserve/lib;
  - two variants (ARG VARIANT): cuda builds on a CUDA devel image with KVSERVE_CUDA=ON and runs
    on a CUDA runtime image; cpu builds and runs on images without CUDA, KVSERVE_CUDA=OFF;
  - the image each kustomization deploys fits its workers: a tag ending in -cpu (the cpu
    variant) exactly where the worker flag file says --device=cpu (or names no device).

  python3 tests/deploy/check_image.py <source root>
"""
import re
import sys

from deploy_common import Failures, load_yaml_documents, parse_flag_lines, source_root

# setup.sh packages the image does not need: the fuzzing runtime.
NOT_FOR_IMAGE = {"libclang-rt-14-dev"}


def dockerfile_instructions(text):
    """[(INSTRUCTION, arguments)] with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(l for l in text.splitlines()
                                            if not l.lstrip().startswith("#")))
    result = []
    for line in joined.splitlines():
        parts = line.strip().split(None, 1)
        if parts:
            result.append((parts[0].upper(), parts[1] if len(parts) > 1 else ""))
    return result


# stage name -> (what its FROM image must contain, must not contain, KVSERVE_CUDA it sets or None)
VARIANT_STAGES = {
    "build-base-cuda": ("nvidia/cuda:", None, "ON"),
    "build-base-cpu": (None, "cuda", "OFF"),
    "runtime-base-cuda": ("nvidia/cuda:", None, None),
    "runtime-base-cpu": (None, "cuda", None),
}


def dockerfile_stages(instructions):
    """{stage name: (FROM image, [(INSTRUCTION, arguments)] of the stage)}."""
    stages, current = {}, None
    for op, args in instructions:
        if op == "FROM":
            words = args.split()
            name = words[-1] if len(words) >= 3 and words[-2].upper() == "AS" else None
            current = []
            if name:
                stages[name] = (words[0], current)
        elif current is not None:
            current.append((op, args))
    return stages


def check_variants(failures, instructions):
    """ARG VARIANT (default cuda) picks the build and runtime bases; the CUDA ones build with CUDA
    on and run on a CUDA runtime image, the CPU ones have no CUDA at all."""
    args = [a for op, a in instructions if op == "ARG"]
    failures.check("VARIANT=cuda" in args, "Dockerfile: no ARG VARIANT=cuda (variants cuda, cpu)")
    stages = dockerfile_stages(instructions)
    for name, (must, must_not, cuda) in VARIANT_STAGES.items():
        if not failures.check(name in stages, f"Dockerfile: no stage {name}"):
            continue
        image, body = stages[name]
        failures.check(must is None or must in image, f"Dockerfile: {name} is FROM {image}, not "
                                                      f"a {must} image")
        failures.check(must_not is None or must_not not in image.lower(),
                       f"Dockerfile: {name} is FROM {image}: the cpu variant needs no CUDA base")
        if name == "runtime-base-cuda":
            failures.check("-runtime-" in image, f"Dockerfile: {name} is FROM {image}, not a "
                                                 "CUDA runtime image")
        if cuda:
            env = " ".join(a for op, a in body if op == "ENV")
            failures.check(f"KVSERVE_CUDA={cuda}" in env,
                           f"Dockerfile: {name} must set ENV KVSERVE_CUDA={cuda}")
    for stage, base in (("build", "build-base-${VARIANT}"), ("runtime", "runtime-base-${VARIANT}")):
        failures.check(stages.get(stage, ("",))[0] == base,
                       f"Dockerfile: stage {stage} must be FROM {base}")
    build_runs = " ".join(a for op, a in stages.get("build", ("", []))[1] if op == "RUN")
    failures.check('-DKVSERVE_CUDA="${KVSERVE_CUDA}"' in build_runs,
                   "Dockerfile: the build stage must configure -DKVSERVE_CUDA=\"${KVSERVE_CUDA}\" "
                   "(set by the variant's base)")


def check_cuda_module(failures, root, runs):
    """The worker dlopens the CUDA backend for --device=cuda: the image must ship the module
    where the worker looks for it (../lib/ beside /opt/kvserve/bin/kvserve-worker)."""
    kernels_cmake = (root / "kernels" / "CMakeLists.txt").read_text(encoding="utf-8")
    if "add_library(kvserve_cuda SHARED" not in kernels_cmake:
        return
    factory = (root / "kernels" / "backend_factory.cc").read_text(encoding="utf-8")
    failures.check('"../lib/libkvserve_cuda.so"' in factory,
                   "kernels/backend_factory.cc no longer looks for the CUDA module in ../lib beside "
                   "the executable, where the image installs it")
    failures.check(re.search(r"--target\s+kvserve_cuda\b", runs) is not None,
                   "Dockerfile: the cuda variant does not build the CUDA module (--target "
                   "kvserve_cuda); kvserve-worker --device=cuda would fail to load it")
    failures.check(re.search(r"install\s[^&]*/build/kernels/libkvserve_cuda\.so\s+"
                             r"/opt/kvserve/lib/?", runs) is not None,
                   "Dockerfile: libkvserve_cuda.so is not installed in /opt/kvserve/lib, where "
                   "kvserve-worker looks for it (../lib beside its binary)")


def kustomization_image_tag(kustomization):
    for image in kustomization.get("images") or []:
        if image.get("name") == "kvserve":
            return image.get("newTag")
    return None


def worker_device(flags_file):
    for name, value in parse_flag_lines(flags_file.read_text(encoding="utf-8"))[0]:
        if name == "device":
            return value
    return "cpu"  # the worker's default


def check_overlay_images(failures, root):
    """Each kustomization that ships or inherits worker flags deploys the image variant they
    need: --device=cuda[:N] on the CUDA image, --device=cpu on the -cpu one."""
    k8s = root / "deploy" / "k8s"
    base = k8s / "base"
    base_tag = kustomization_image_tag(load_yaml_documents(base / "kustomization.yaml")[0])
    dirs = [base] + sorted(d for d in (k8s / "overlays").iterdir()
                           if (d / "kustomization.yaml").exists())
    for directory in dirs:
        kustomization = load_yaml_documents(directory / "kustomization.yaml")[0]
        tag = kustomization_image_tag(kustomization) or base_tag
        flags = directory / "config" / "worker.flags"
        if not flags.exists():
            flags = base / "config" / "worker.flags"
        device = worker_device(flags)
        where = f"{directory.relative_to(root)}/kustomization.yaml"
        if not failures.check(tag, f"{where}: no image tag for kvserve"):
            continue
        if device.startswith("cuda"):
            failures.check(not tag.endswith("-cpu"), f"{where}: workers run --device={device} "
                                                     f"({flags.relative_to(root)}) on the CPU "
                                                     f"image {tag}")
        else:
            failures.check(tag.endswith("-cpu"), f"{where}: workers run --device={device} "
                                                 f"({flags.relative_to(root)}): use the CPU "
                                                 f"image (tag ending -cpu), not {tag}")


def main():
    root = source_root()
    failures = Failures("deploy_image_consistency")
    docker = root / "deploy" / "docker"
    instructions = dockerfile_instructions((docker / "Dockerfile").read_text(encoding="utf-8"))
    runs = " ".join(args for op, args in instructions if op == "RUN")
    env = " ".join(args for op, args in instructions if op == "ENV")

    for op, args in instructions:
        if op == "COPY" and "--from=" not in args:
            for source in args.split()[:-1]:
                failures.check((root / source).exists(), f"Dockerfile: COPY {source}: no such file")
    for script in re.findall(r"(deploy/docker/[\w.]+\.sh)", runs):
        path = root / script
        failures.check(path.exists() and path.stat().st_mode & 0o111,
                       f"Dockerfile runs {script}, which is missing or not executable")

    targets = re.findall(r"--target\s+((?:[\w-]+\s*)+)", runs)
    targets = targets[0].split() if targets else []
    failures.check(targets, "Dockerfile builds no --target")
    installed = set()
    for target in targets:
        defined = [p for p in root.glob("*/*.cmake") if f"add_executable({target} " in
                   p.read_text(encoding="utf-8")]
        defined += [p for p in root.glob("*/CMakeLists.txt") if f"add_executable({target} " in
                    p.read_text(encoding="utf-8")]
        if failures.check(defined, f"Dockerfile builds {target}: no add_executable({target} ...)"):
            folder = defined[0].parent.name
            failures.check(f"/build/{folder}/{target}" in runs,
                           f"Dockerfile: {target} is built in /build/{folder}/, install it from "
                           "there")
            installed.add(target)

    setup = (root / "scripts" / "setup.sh").read_text(encoding="utf-8")
    packages = re.search(r"APT_PACKAGES=\(([^)]*)\)", setup)
    apt_line = re.search(r"apt-get install[^&]*", runs)
    image_packages = set(apt_line.group(0).split()) if apt_line else set()
    for package in (packages.group(1).split() if packages else []):
        if package.endswith("-dev") and package not in NOT_FOR_IMAGE:
            failures.check(package in image_packages,
                           f"scripts/setup.sh installs {package}; the Dockerfile's build stage "
                           "does not")

    model_file = re.search(r'kDefaultModelFile\[\] = "([^"]+)"',
                           (root / "model" / "default_model.h").read_text(encoding="utf-8"))
    model_env = re.search(r"KVSERVE_MODEL=(\S+)", env)
    if failures.check(model_env, "Dockerfile sets no KVSERVE_MODEL"):
        model_path = model_env.group(1)
        failures.check(model_file and model_path.endswith("/" + model_file.group(1)),
                       f"KVSERVE_MODEL {model_path} is not the default model file")
        for flags_file in sorted((root / "deploy" / "k8s").rglob("*.flags")):
            for name, value in parse_flag_lines(flags_file.read_text(encoding="utf-8"))[0]:
                if name == "model":
                    failures.check(value == model_path,
                                   f"{flags_file.relative_to(root)}: --model={value} is not the "
                                   f"image's model {model_path}")
                if name in ("listen", "metrics_listen"):
                    port = value.rpartition(":")[2]
                    failures.check(any(op == "EXPOSE" and port in args.split()
                                       for op, args in instructions),
                                   f"{flags_file.relative_to(root)}: --{name} port {port} is not "
                                   "EXPOSEd by the Dockerfile")

    user = [args for op, args in instructions if op == "USER"]
    uid, _, gid = (user[-1] if user else "").partition(":")
    failures.check(uid.isdigit(), "Dockerfile: USER must be a numeric uid (runAsNonRoot)")
    for path in sorted((root / "deploy" / "k8s").rglob("*.yaml")):
        for doc in load_yaml_documents(path):
            text = repr(doc)
            for key, want in (("runAsUser", uid), ("runAsGroup", gid or uid)):
                for value in re.findall(rf"'{key}': (\d+)", text):
                    failures.check(value == want, f"{path.relative_to(root)}: {key} {value} is "
                                                  f"not the image's {want}")
            for program in re.findall(r"/opt/kvserve/bin/([\w-]+)", text):
                failures.check(program in installed,
                               f"{path.relative_to(root)} runs {program}, which the image lacks")

    check_variants(failures, instructions)
    check_cuda_module(failures, root, runs)
    check_overlay_images(failures, root)

    ignore = (docker / "Dockerfile.dockerignore").read_text(encoding="utf-8").split()
    for pattern in (".git", "build", "build-*"):
        failures.check(pattern in ignore, f"Dockerfile.dockerignore does not exclude {pattern}")
    return failures.report(f"Dockerfile: {len(instructions)} instructions, targets "
                           f"{' '.join(targets)}")


if __name__ == "__main__":
    sys.exit(main())
