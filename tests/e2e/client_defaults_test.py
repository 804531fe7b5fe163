"""The two clients a new user tries first talk to the same server by default: the Python
example client's --target default equals the one kvserve-cli --help prints (the router's
address, 127.0.0.1:50051), as README.md's cluster starts it.

  python3 client_defaults_test.py build/tools/kvserve-cli clients/python/kvserve_client.py
"""

import ast
import re
import subprocess
import sys


def python_client_default(path):
    """The default= of the client's add_argument("--target", ...), read from its source (the
    client needs generated stubs to run)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"
                and node.args and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == "--target"):
            for keyword in node.keywords:
                if keyword.arg == "default":
                    return ast.literal_eval(keyword.value)
    raise AssertionError(f"{path}: no --target argument with a default")


def cli_default(binary):
    output = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60)
    text = output.stdout + output.stderr
    match = re.search(r"--target \(.*?\); default: \"([^\"]*)\"", text, re.S)
    if not match:
        raise AssertionError(f"{binary} --help shows no --target default:\n{text[:2000]}")
    return match.group(1)


def main(argv):
    cli, client = argv[1], argv[2]
    want, got = cli_default(cli), python_client_default(client)
    print(f"kvserve-cli --target default {want}; kvserve_client.py --target default {got}")
    if want != got or want != "127.0.0.1:50051":
        print("the clients' default targets differ (or are not the router's 127.0.0.1:50051)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
