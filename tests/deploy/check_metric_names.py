#!/usr/bin/env python3
"""ctest deploy_metric_names: every metric that deploy/ queries exists.

Sources of queries: the alert and recording rules (deploy/prometheus/rules.yml) and the series of
their unit tests (rules_test.yml), the Grafana dashboard's targets
(deploy/grafana/kvserve-dashboard.json), the prometheus-adapter rules and the custom metrics of
every HorizontalPodAutoscaler under deploy/k8s (each of which the adapter must serve). Each kvserve_* name (a histogram's _bucket/_sum/_count series named by its family) must
be
  - a metric documented in a table of docs/metrics.md, and
  - registered by the code: the name as a string literal in a worker/ or router/ .cc file;
a histogram must be read through its _bucket/_sum/_count series, never bare; a name with ':' must
be a recording rule of rules.yml; `up` (Prometheus' own) is the only other name allowed.
Also: the dashboard JSON is exactly what deploy/grafana/generate_dashboard.py writes.

  python3 tests/deploy/check_metric_names.py <source root>
"""
import json
import re
import subprocess
import sys

from deploy_common import (HISTOGRAM_SUFFIXES, Failures, documented_metrics, load_yaml_documents,
                           promql_metric_names, registered_in_code, source_root)

PROMETHEUS_BUILTINS = {"up"}


def rule_queries(rules_path):
    """[(where, expr)] of every rule, and the set of recording rule names."""
    queries, recorded = [], set()
    for doc in load_yaml_documents(rules_path):
        for group in doc.get("groups", []):
            for rule in group.get("rules", []):
                name = rule.get("record") or rule.get("alert")
                queries.append((f"rules.yml {name}", str(rule.get("expr", ""))))
                if "record" in rule:
                    recorded.add(rule["record"])
    return queries, recorded


def rule_test_series(test_path):
    names = []
    for doc in load_yaml_documents(test_path):
        for test in doc.get("tests", []):
            for series in test.get("input_series", []):
                names.append(("rules_test.yml input_series", series["series"].split("{")[0]))
            for expr_test in test.get("promql_expr_test", []):
                names.extend(("rules_test.yml promql_expr_test", n)
                             for n in promql_metric_names(expr_test["expr"]))
    return names


def dashboard_queries(dashboard):
    queries = []

    def visit(panels):
        for panel in panels:
            for target in panel.get("targets", []):
                queries.append((f"dashboard panel '{panel.get('title')}'", target.get("expr", "")))
            visit(panel.get("panels", []))

    visit(dashboard.get("panels", []))
    for variable in dashboard.get("templating", {}).get("list", []):
        query = variable.get("query")
        if isinstance(query, dict):
            query = query.get("query", "")
        if variable.get("type") == "query" and query:
            # label_values(<selector>, label): the selector is PromQL.
            match = re.match(r"label_values\((.*),\s*[A-Za-z_]+\)$", query.strip())
            queries.append((f"dashboard variable ${variable['name']}",
                            match.group(1) if match else query))
    return queries


def check_name(failures, root, documented, recorded, where, name):
    if ":" in name:
        failures.check(name in recorded, f"{where}: '{name}' is not a recording rule of rules.yml")
        return
    if name in PROMETHEUS_BUILTINS:
        return
    if not failures.check(name.startswith("kvserve_"), f"{where}: unknown metric '{name}'"):
        return
    family, suffix = name, ""
    if name not in documented:
        for candidate in HISTOGRAM_SUFFIXES:
            if name.endswith(candidate) and name[: -len(candidate)] in documented:
                family, suffix = name[: -len(candidate)], candidate
                break
    if not failures.check(family in documented,
                          f"{where}: '{name}' is not documented in docs/metrics.md"):
        return
    kind = documented[family]
    if suffix:
        failures.check(kind in ("histogram", "summary"),
                       f"{where}: '{name}': {family} is a {kind}, it has no {suffix} series")
    else:
        failures.check(kind != "histogram",
                       f"{where}: '{name}' is a histogram: query {name}_bucket/_sum/_count")
    failures.check(registered_in_code(root, family),
                   f"{where}: '{family}' is documented but no worker/ or router/ .cc file "
                   "registers it")


def main():
    root = source_root()
    failures = Failures("deploy_metric_names")
    deploy = root / "deploy"
    documented = documented_metrics(root)
    failures.check(len(documented) > 0, "docs/metrics.md documents no kvserve_ metric")

    queries, recorded = rule_queries(deploy / "prometheus" / "rules.yml")
    names = [(where, n) for where, expr in queries for n in promql_metric_names(expr)]
    names += rule_test_series(deploy / "prometheus" / "rules_test.yml")

    dashboard = json.loads((deploy / "grafana" / "kvserve-dashboard.json").read_text())
    dash_queries = dashboard_queries(dashboard)
    failures.check(len(dash_queries) > 0, "the dashboard has no queries")
    for where, expr in dash_queries:
        found = promql_metric_names(expr)
        failures.check(len(found) > 0, f"{where}: query selects no metric: {expr}")
        names += [(where, n) for n in found]

    adapter = load_yaml_documents(deploy / "prometheus" / "adapter-rules.yaml")[0]
    served = set()
    for rule in adapter["rules"]["custom"]:
        names += [("adapter-rules.yaml seriesQuery", n)
                  for n in promql_metric_names(rule["seriesQuery"])]
        served.add(rule["name"]["as"])
    for path in sorted((deploy / "k8s").rglob("*.yaml")):
        for doc in load_yaml_documents(path):
            if not isinstance(doc, dict) or doc.get("kind") != "HorizontalPodAutoscaler":
                continue
            where = str(path.relative_to(root))
            for metric in (doc.get("spec") or {}).get("metrics") or []:
                if metric.get("type") in ("Pods", "Object"):
                    hpa_name = metric[metric["type"].lower()]["metric"]["name"]
                    names.append((where, hpa_name))
                    failures.check(hpa_name in served,
                                   f"{where}: '{hpa_name}' is not served by adapter-rules.yaml")

    for where, name in names:
        check_name(failures, root, documented, recorded, where, name)

    generator = deploy / "grafana" / "generate_dashboard.py"
    result = subprocess.run([sys.executable, str(generator), "--check"], capture_output=True,
                            text=True, timeout=60)
    failures.check(result.returncode == 0,
                   f"kvserve-dashboard.json is not generate_dashboard.py's output: "
                   f"{result.stderr.strip()}")
    distinct = sorted({n for _, n in names})
    print(f"metric names checked: {' '.join(distinct)}")
    return failures.report(f"{len(names)} uses of {len(distinct)} names")


if __name__ == "__main__":
    sys.exit(main())
