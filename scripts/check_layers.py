#!/usr/bin/env python3
"""Checks the dependency arrows of docs/architecture.md's folder map against the tree.

The map is a Markdown table (| folder | libraries | what it owns | may include |). A folder's files
may include only its own headers and those of the folders it lists ("any": anything), and its
CMake targets may link only the project libraries of those folders. Exit 0 when the tree keeps
the map, 1 with one line per crossing otherwise.

  scripts/check_layers.py [--root DIR]     # the tree (default: this checkout)
  scripts/check_layers.py --self-test      # the checker on a small tree with crossings in it
"""
import argparse
import os
import re
import sys
import tempfile

SOURCE = re.compile(r"\.(h|cc|cu|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"(\w+)/', re.M)
LINK = re.compile(r"target_link_libraries\(\s*([\w-]+)(.*?)\)", re.S)
LIBRARY = re.compile(r"\b(kvserve_\w+)\b")
# Generated protobuf headers are included as "kvserve/v1/...": they belong to proto/.
INCLUDE_ALIASES = {"kvserve": "proto"}


def read_map(root):
    """{folder: (set of libraries, set of folders it may include or None for any)}."""
    text = open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8").read()
    section = text.split("## Folder map", 1)
    if len(section) != 2:
        raise SystemExit("docs/architecture.md has no '## Folder map' section")
    folders = {}
    for line in section[1].split("\n## ", 1)[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        m = re.fullmatch(r"`(\w+)/`", cells[0]) if len(cells) == 4 else None
        if not m:
            continue
        libraries = set(LIBRARY.findall(cells[1]))
        may = cells[3]
        allowed = None if may == "any" else {w.strip() for w in may.split(",") if w.strip() not in ("", "—")}
        folders[m.group(1)] = (libraries, allowed)
    if not folders:
        raise SystemExit("docs/architecture.md's folder map has no rows")
    return folders


def check(root):
    folders = read_map(root)
    order = list(folders)  # the rows as the table lists them, lowest layer first
    owner = {lib: folder for folder, (libs, _) in folders.items() for lib in libs}
    problems = []
    for folder, (_, allowed) in sorted(folders.items()):
        for name in sorted(allowed or ()):
            if name not in folders:
                problems.append(f"docs/architecture.md: {folder}/ may include '{name}', which is not in the map")
            elif order.index(name) > order.index(folder):
                problems.append(f"docs/architecture.md: {folder}/ may include {name}/, a row below it")
        if allowed is None or not os.path.isdir(os.path.join(root, folder)):
            continue
        ok = allowed | {folder}
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            for name in sorted(names):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                if SOURCE.search(name):
                    text = open(path, encoding="utf-8", errors="replace").read()
                    for m in INCLUDE.finditer(text):
                        target = INCLUDE_ALIASES.get(m.group(1), m.group(1))
                        if target in folders and target not in ok:
                            line = text.count("\n", 0, m.start()) + 1
                            problems.append(f"{rel}:{line}: {folder}/ includes {target}/ (allowed: "
                                            f"{', '.join(sorted(allowed)) or 'none'})")
                elif name == "CMakeLists.txt" or name.endswith(".cmake"):
                    text = open(path, encoding="utf-8").read()
                    for m in LINK.finditer(text):
                        for lib in LIBRARY.findall(m.group(2)):
                            target = owner.get(lib)
                            if target is not None and target not in ok:
                                line = text.count("\n", 0, m.start()) + 1
                                problems.append(f"{rel}:{line}: {m.group(1)} links {lib} ({target}/), "
                                                f"which {folder}/ may not use")
    return problems


def self_test():
    """A small tree with an include and a link across the map, and a map row naming a row below it:
    all three must be reported."""
    with tempfile.TemporaryDirectory() as root:
        def write(rel, text):
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            open(os.path.join(root, rel), "w", encoding="utf-8").write(text)
        write("docs/architecture.md", "## Folder map\n\n| folder | libraries | owns | may include |\n"
              "| --- | --- | --- | --- |\n| `low/` | kvserve_low | x | — |\n| `side/` | kvserve_side | w | high |\n"
              "| `high/` | kvserve_high | y | low |\n| `tests/` | (tests) | z | any |\n")
        write("low/a.h", '#include "low/b.h"\n#include "high/c.h"\n#include "absl/status/status.h"\n')
        write("low/CMakeLists.txt", "add_library(kvserve_low a.cc)\n"
              "target_link_libraries(kvserve_low PUBLIC absl::status kvserve_high)\n")
        write("high/c.h", '#include "low/a.h"\n')
        write("high/CMakeLists.txt", "target_link_libraries(kvserve_high PUBLIC kvserve_low)\n")
        write("tests/t.cc", '#include "high/c.h"\n#include "low/a.h"\n')
        problems = check(root)
    want = ["low/a.h:2: low/ includes high/", "low/CMakeLists.txt:2: kvserve_low links kvserve_high",
            "docs/architecture.md: side/ may include high/, a row below it"]
    missing = [w for w in want if not any(p.startswith(w) for p in problems)]
    if missing or len(problems) != len(want):
        print("self-test failed: want", want, "got", problems)
        return 1
    print("self-test: all three crossings reported")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    problems = check(args.root)
    for p in problems:
        print(p)
    folders = read_map(args.root)
    print(f"check_layers: {len(folders)} folders, {len(problems)} crossings")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
