#!/usr/bin/env python3
"""Writes the chat template goldens with Python's Jinja2, rendered as transformers does it.

kvserve renders chat templates with minja (C++); chat_template_golden_test.cc renders the same
templates and conversations and must match these files byte for byte. Inputs, all under
tests/tokenizer/testdata/chat_templates/:
  *.jinja             real model templates (README.md there says where each comes from)
  conversations.json  the conversations, the tools and the fixed date strftime_now formats
Output: goldens/<template stem>.json, one case per conversation x add_generation_prompt:
  {"conversation", "add_generation_prompt", "text"} or, when Jinja2 refuses,
  {"conversation", "add_generation_prompt", "error", "raised"} (raised: by the template's
  raise_exception, whose message kvserve returns as it is; else another Jinja2 error).

  python3 tests/tokenizer/chat_template_goldens.py           # rewrite goldens/
  python3 tests/tokenizer/chat_template_goldens.py --check   # exit 1 and a diff when stale

The environment is transformers' (utils/chat_template_utils.py, _compile_jinja_template):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with loop controls, its
json.dumps `tojson` filter, raise_exception and strftime_now globals. render() gets the
variables kvserve passes: messages, add_generation_prompt, bos_token, eos_token, and tools only
when there are some. (transformers passes tools=None and documents=None instead; minja cannot
tell None from undefined, and the two differ only for a template that loops over tools without
checking them, e.g. Hermes' tool_use variant: transformers refuses it without tools, kvserve
renders an empty tool list.) Tool call arguments follow kvserve's rule
(tokenizer/chat_template.h): JSON text, parsed into an object for templates that only render
object arguments (one probe rendering decides). Needs Jinja2 (scripts/setup.sh pins it).
"""

import argparse
import copy
import datetime
import difflib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "testdata", "chat_templates")
GOLDENS = os.path.join(DATA, "goldens")

# (template file, bos_token, eos_token): the special tokens of each model's tokenizer
# (tokenizer_config.json; SmolLM2's GGUF metadata). "" where the model has none (Qwen).
TEMPLATES = [
    ("HuggingFaceTB-SmolLM2-135M-Instruct.jinja", "<|im_start|>", "<|im_end|>"),
    ("Qwen-Qwen2.5-7B-Instruct.jinja", "", "<|im_end|>"),
    ("Qwen-Qwen3-0.6B.jinja", "", "<|im_end|>"),
    ("meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    ("meta-llama-Llama-3.2-3B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>"),
    ("microsoft-Phi-3.5-mini-instruct.jinja", "<s>", "<|endoftext|>"),
    ("google-gemma-2-2b-it.jinja", "<bos>", "<eos>"),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "<|begin_of_text|>", "<|im_end|>"),
]

# The probe of ChatTemplate::FromJinja (tokenizer/chat_template.cc): does the template render
# tool call arguments given as JSON text, or only given as an object?
PROBE_ARGUMENTS = '{"argument_needle": "probe"}'


def make_environment(now):
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return now.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(compiled, messages, tools, add_generation_prompt, bos_token, eos_token):
    variables = {
        "messages": messages,
        "add_generation_prompt": add_generation_prompt,
        "bos_token": bos_token,
        "eos_token": eos_token,
    }
    if tools:
        variables["tools"] = tools
    return compiled.render(**variables)


def template_messages(messages, object_arguments):
    """The messages as ChatTemplate::Render hands them to the template."""
    out = []
    for m in messages:
        t = {"role": m["role"], "content": m.get("content")}
        if m.get("tool_calls"):
            calls = []
            for call in m["tool_calls"]:
                arguments = call["function"]["arguments"]
                if object_arguments:
                    try:
                        parsed = json.loads(arguments)
                        if isinstance(parsed, dict):
                            arguments = parsed
                    except ValueError:
                        pass
                c = {"id": call["id"]} if call.get("id") else {}
                c["type"] = "function"
                c["function"] = {"name": call["function"]["name"], "arguments": arguments}
                calls.append(c)
            t["tool_calls"] = calls
        if m.get("tool_call_id"):
            t["tool_call_id"] = m["tool_call_id"]
        if m.get("name"):
            t["name"] = m["name"]
        out.append(t)
    return out


def wants_object_arguments(compiled, bos_token, eos_token):
    def renders(arguments):
        messages = [
            {"role": "user", "content": "probe"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "probe0001", "type": "function", "function": {"name": "probe_tool", "arguments": arguments}}
                ],
            },
        ]
        try:
            text = render(compiled, messages, None, False, bos_token, eos_token)
        except Exception:
            return False
        return '"argument_needle":' in text or "'argument_needle':" in text

    return not renders(PROBE_ARGUMENTS) and renders(json.loads(PROBE_ARGUMENTS))


def goldens():
    """{file name: text} of every golden."""
    import jinja2

    with open(os.path.join(DATA, "conversations.json"), encoding="utf-8") as f:
        inputs = json.load(f)
    env = make_environment(datetime.datetime.fromisoformat(inputs["fixed_now"]))
    out = {}
    for name, bos_token, eos_token in TEMPLATES:
        with open(os.path.join(DATA, name), encoding="utf-8") as f:
            source = f.read()
        if "generation %}" in source:
            raise SystemExit(f"{name}: {{% generation %}} blocks need transformers' AssistantTracker")
        compiled = env.from_string(source)
        object_arguments = wants_object_arguments(compiled, bos_token, eos_token)
        cases = []
        for conversation in inputs["conversations"]:
            messages = template_messages(conversation["messages"], object_arguments)
            tools = copy.deepcopy(inputs["tools"]) if conversation.get("tools") else None
            for add_generation_prompt in (True, False):
                case = {"conversation": conversation["name"], "add_generation_prompt": add_generation_prompt}
                try:
                    case["text"] = render(
                        compiled, copy.deepcopy(messages), tools, add_generation_prompt, bos_token, eos_token
                    )
                except jinja2.exceptions.TemplateError as e:
                    # raise_exception raises TemplateError itself; Jinja2's own errors subclass it.
                    case["error"] = str(e) if type(e) is jinja2.exceptions.TemplateError else f"{type(e).__name__}: {e}"
                    case["raised"] = type(e) is jinja2.exceptions.TemplateError
                except Exception as e:  # TypeError, KeyError, ... from Python itself
                    case["error"] = f"{type(e).__name__}: {e}"
                    case["raised"] = False
                cases.append(case)
        golden = {
            "template": name,
            "bos_token": bos_token,
            "eos_token": eos_token,
            "object_arguments": object_arguments,
            "cases": cases,
        }
        stem = name[: -len(".jinja")]
        out[stem + ".json"] = json.dumps(golden, ensure_ascii=False, indent=1) + "\n"
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare with the committed goldens, write nothing")
    args = parser.parse_args()
    try:
        import jinja2  # noqa: F401
    except ImportError:
        print("chat_template_goldens: needs Jinja2 (scripts/setup.sh installs it)", file=sys.stderr)
        return 1
    wanted = goldens()
    if not args.check:
        os.makedirs(GOLDENS, exist_ok=True)
        for name, text in wanted.items():
            with open(os.path.join(GOLDENS, name), "w", encoding="utf-8") as f:
                f.write(text)
        print(f"wrote {len(wanted)} goldens to {os.path.relpath(GOLDENS)}")
        return 0
    stale = 0
    present = set(os.listdir(GOLDENS)) if os.path.isdir(GOLDENS) else set()
    for name in sorted(present - set(wanted)):
        print(f"goldens/{name}: no template in TEMPLATES writes it")
        stale += 1
    for name, text in sorted(wanted.items()):
        path = os.path.join(GOLDENS, name)
        committed = open(path, encoding="utf-8").read() if name in present else ""
        if committed != text:
            stale += 1
            sys.stdout.writelines(
                difflib.unified_diff(
                    committed.splitlines(True), text.splitlines(True), f"committed/{name}", f"jinja2/{name}"
                )
            )
    if stale:
        print(f"{stale} golden(s) differ from Jinja2; rerun tests/tokenizer/chat_template_goldens.py")
        return 1
    cases = sum(len(json.loads(t)["cases"]) for t in wanted.values())
    print(f"{len(wanted)} goldens, {cases} cases: all match Jinja2 {jinja2.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
