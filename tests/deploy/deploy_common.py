"""Shared helpers of the deploy/ checks: the source tree, the flags the binaries define, the
metrics the docs and the code name, absl flag files, and a PromQL metric-name extractor.

Every check takes the source root as its first argument (ctest passes the checkout), so the
breakage test can run the same checks on a modified copy of the tree.
"""
import pathlib
import re
import sys

try:
    import yaml
except ImportError:  # PyYAML is a test dependency: scripts/setup.sh installs it.
    sys.exit("deploy checks need PyYAML (pip install PyYAML==6.0.3)")

# The binaries the manifests run, and the source folder whose ABSL_FLAG definitions they link.
BINARIES = {"kvserve-worker": "worker", "kvserve-router": "router"}
# Flags absl itself defines that the manifests use.
ABSL_BUILTIN_FLAGS = {"flagfile"}


class Failures:
    """Collects failure messages; report() prints them and gives the exit status."""

    def __init__(self, name):
        self.name = name
        self.messages = []

    def add(self, message):
        self.messages.append(message)

    def check(self, condition, message):
        if not condition:
            self.add(message)
        return condition

    def report(self, checked):
        for message in self.messages:
            print(f"FAIL: {message}")
        if self.messages:
            print(f"{self.name}: {len(self.messages)} problem(s) in {checked}")
            return 1
        print(f"{self.name}: OK ({checked})")
        return 0


def source_root():
    if len(sys.argv) < 2:
        sys.exit(f"usage: {sys.argv[0]} <kvserve source root>")
    return pathlib.Path(sys.argv[1]).resolve()


def load_yaml_documents(path):
    """Every document of a YAML file (empty ones dropped); raises yaml.YAMLError."""
    with open(path, encoding="utf-8") as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


_ABSL_FLAG = re.compile(r"ABSL_FLAG\(\s*[^,]+?,\s*([A-Za-z_][A-Za-z0-9_]*)\s*,")


def defined_flags(root, binary):
    """Names of the flags `binary` defines: ABSL_FLAG(type, name, ...) in its folder's sources."""
    folder = root / BINARIES[binary]
    names = set()
    for source in sorted(folder.glob("*.cc")) + sorted(folder.glob("*.h")):
        names.update(_ABSL_FLAG.findall(source.read_text(encoding="utf-8")))
    return names


_FLAG = re.compile(r"^--([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?$")


def parse_flag(text):
    """("name", "value" or None) of "--name=value" / "--name"; None when not a flag."""
    match = _FLAG.match(text.strip())
    return (match.group(1), match.group(2)) if match else None


def parse_flag_lines(text):
    """The flags of an absl flag file: one per line; blank lines and # comments skipped.
    Returns (flags as [(name, value)], lines that are not flags)."""
    flags, bad = [], []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        flag = parse_flag(line)
        if flag:
            flags.append(flag)
        else:
            bad.append(line)
    return flags, bad


_DOC_ROW = re.compile(r"^\|\s*`(kvserve_[a-z0-9_]+)`\s*\|\s*([a-z]+)\s*\|", re.MULTILINE)


def documented_metrics(root):
    """{name: type} of every metric in a table of docs/metrics.md."""
    text = (root / "docs" / "metrics.md").read_text(encoding="utf-8")
    return dict(_DOC_ROW.findall(text))


def registered_in_code(root, name):
    """True when a worker/ or router/ .cc file holds the metric name as a string literal."""
    needle = f'"{name}"'
    for folder in ("worker", "router"):
        for source in (root / folder).glob("*.cc"):
            if needle in source.read_text(encoding="utf-8"):
                return True
    return False


# PromQL words that are not metric names.
_PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
                    "unless", "bool", "offset", "inf", "nan", "atan2"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_VARIABLE = re.compile(r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*")
_IDENT = re.compile(r"(?<![A-Za-z0-9_:.])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?")


def promql_metric_names(expr):
    """The metric names a PromQL expression selects (functions, keywords and labels removed).
    Grafana variables ($x, ${x}) are removed first."""
    text = _VARIABLE.sub(" ", expr)
    text = _STRING.sub(" ", text)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    names = []
    for ident, call in _IDENT.findall(text):
        if call or ident.lower() in _PROMQL_KEYWORDS:
            continue
        names.append(ident)
    return names


HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


_QUANTITY = re.compile(r"^([0-9.]+)([A-Za-z]*)$")
_QUANTITY_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10,
                   "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "m": 10**-3}


def parse_quantity(text):
    """A Kubernetes resource quantity ("16Gi", "500m", "2") as a number; None when malformed."""
    match = _QUANTITY.match(str(text).strip())
    if not match or match.group(2) not in _QUANTITY_UNITS:
        return None
    return float(match.group(1)) * _QUANTITY_UNITS[match.group(2)]


def is_worker_metric(name):
    """A metric every kvserve-worker pod exports (the router's are kvserve_router_*)."""
    return name.startswith("kvserve_") and not name.startswith("kvserve_router_")
