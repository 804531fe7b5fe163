"""Every kvserve binary's --help lists its own flags (abseil printed "No flags matched" while
the flags lived in main.cc files not named after the binary; api/program_usage.h).

  python3 help_e2e_test.py build/worker/kvserve-worker:--fault_fail_step \
      build/router/kvserve-router:--workers ...
"""

import subprocess
import sys


def main(argv):
    failures = []
    for spec in argv[1:]:
        binary, flag = spec.rsplit(":", 1)
        result = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60)
        output = result.stdout + result.stderr
        if "No flags matched" in output or flag.lstrip("-") not in output:
            failures.append(f"{binary} --help does not list {flag}:\n{output[:2000]}")
        else:
            print(f"{binary} --help lists {flag}")
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
