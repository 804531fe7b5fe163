#!/usr/bin/env python3
"""ctest deploy_prometheus_rules: promtool accepts deploy/prometheus/rules.yml and its unit tests
(deploy/prometheus/rules_test.yml) pass. promtool (Debian package `prometheus`, installed by
scripts/setup.sh) is required: without it this check fails, it does not skip.

  python3 tests/deploy/check_rules.py <source root>
"""
import shutil
import subprocess
import sys

from deploy_common import Failures, source_root


def run(failures, args, cwd):
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120)
    output = (result.stdout + result.stderr).strip()
    print(f"$ {' '.join(args)}\n{output}")
    failures.check(result.returncode == 0, f"{' '.join(args)} exited {result.returncode}")


def main():
    root = source_root()
    failures = Failures("deploy_prometheus_rules")
    promtool = shutil.which("promtool")
    if promtool is None:
        failures.add("promtool not found on PATH (apt-get install prometheus)")
        return failures.report("nothing")
    prometheus_dir = root / "deploy" / "prometheus"
    run(failures, [promtool, "check", "rules", "rules.yml"], prometheus_dir)
    run(failures, [promtool, "test", "rules", "rules_test.yml"], prometheus_dir)
    return failures.report("rules.yml, rules_test.yml")


if __name__ == "__main__":
    sys.exit(main())
