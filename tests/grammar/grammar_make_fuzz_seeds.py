#!/usr/bin/env python3
"""Writes seed inputs for tests/grammar/grammar_fuzz.cc: constraints of every form (JSON schema,
json_object, regex, choice, EBNF grammar), valid ones and some that must fail to compile, each
followed by a walk. Where a seed has a text the constraint accepts, the walk spells it token by
token and then asks for the stop token, rolls back and goes on at random, so the fuzzer starts
from walks that reach the end of the grammar; the others walk at random among allowed tokens.

Input format (see the fuzz target): byte 0 -> form (% 5: json_schema, json_object, regex, choice,
grammar) and the JSON whitespace options (/ 5 % 3); the constraint's text up to a NUL byte
(choices separated by 0x1F); then (kind, argument) byte pairs.

Usage: python3 tests/grammar/grammar_make_fuzz_seeds.py OUT_DIR
"""
import json
import os
import random
import sys

JSON_SCHEMA, JSON_OBJECT, REGEX, CHOICE, GRAMMAR = range(5)
CHOICE_SEPARATOR = "\x1f"
# Step kinds (grammar_fuzz.cc, Walk::Step): 0-3 an allowed token, 4 any id, 5 the stop token,
# 6 a rollback, 7 an allowed token with a rollback round trip.
ANY_ID, STOP, ROLLBACK, ALLOWED_ROUND_TRIP = 4, 5, 6, 7

TEN_FIELD_SCHEMA = os.path.join(os.path.dirname(__file__), "..", "..", "bench",
                                "ten_field_schema.json")
TEN_FIELD_DOCUMENT = (
    '{"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", "score": 97.5, '
    '"active": true, "tags": ["math", "engines", "poetry"], "role": "editor", '
    '"address": {"street": "12 St James\'s Square", "city": "London", "zip": "10001"}, '
    '"manager": null, "notes": "Wrote the first published algorithm for a machine."}')

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 8},
                   "age": {"type": "integer", "minimum": 0, "maximum": 150}},
    "required": ["name", "age"],
}
# (schema, a text it accepts or None)
SCHEMAS = [
    (PERSON, '{"name": "Bo", "age": 7}'),
    ({"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 3}, "[1, 2.5e3]"),
    ({"enum": ["red", "green", 3, None, "\u00e9"]}, '"green"'),
    ({"const": {"a": [1, "x"]}}, None),
    ({"anyOf": [{"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"}, {"type": "boolean"}]},
     '"AB123"'),
    ({"oneOf": [{"type": "integer", "exclusiveMinimum": 0}, {"type": "null"}]}, "null"),
    ({"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}}]}, None),
    ({"$defs": {"node": {"type": "object",
                         "properties": {"v": {"type": "integer"},
                                        "next": {"anyOf": [{"$ref": "#/$defs/node"},
                                                           {"type": "null"}]}},
                         "required": ["v", "next"]}},
      "$ref": "#/$defs/node"}, '{"v": 1, "next": {"v": 2, "next": null}}'),
    ({"type": "string", "format": "date-time"}, None),
    ({"type": "string", "format": "email"}, None),
    ({"type": "object", "additionalProperties": {"type": "integer"}}, '{"k": 1}'),
    ({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]}, None),
    ({"type": "string", "minLength": 2, "maxLength": 4}, '"a\\tb"'),
    ({"type": "number", "minimum": -1.5, "maximum": 2}, "0.5"),
    ({"type": "integer", "minimum": -100, "maximum": 100}, "-42"),
    ({}, None),
    ({"type": "null"}, "null"),
]
BAD_SCHEMAS = ['not json', '{"type": "strin"}', '{"$ref": "#/$defs/missing"}', '[]',
               '{"type": "string", "pattern": "("}', '{"type": "integer", "minimum": "x"}',
               '{"type": "integer", "minimum": 5, "maximum": 1}', '{"type": "array", "items": 3}',
               '{"$ref": "#"}', '']
REGEXES = [(r"[a-z]+@[a-z]+\.com", "ada@example.com"), (r"(ab|cd)*e{2,3}", "abcdee"),
           (r"\d{3}-\d{4}", "555-1234"), (r'[^"]*', None), ("\u00e9+\u4e2d?", None),
           (r"\w+\s\S", None), (r".*", "anything"), (r"(a|b)?c+", "acc"), (r"[\x00-\x1f]x", None)]
BAD_REGEXES = ["(", "[z-a]", "a{3,2}", "\\", "*a", "a)"]
CHOICES = [(["yes", "no"], "no"), (["a", "ab", "abc"], "ab"), (["", "x"], "x"),
           (['quote"back\\slash', "tab\tnl\n"], 'quote"back\\slash'),
           (["\u00e9", "\u4e2d\u6587"], None), (["{}", "[]", "null"], "[]")]
GRAMMARS = [
    ('root ::= "a" | "b" root', "bba"),
    ('root ::= word ("," word)*\nword ::= [a-z]+', "ab,c"),
    ('root ::= "x"{2,5}', "xxx"),
    ('root ::= [^abc\\n]+ "\\n"', None),
    ('root ::= obj\nobj ::= "{" (pair ("," pair)*)? "}"\npair ::= str ":" val\n'
     'val ::= str | [0-9]+ | obj\nstr ::= "\\"" [a-z]* "\\""', '{"a":1,"b":{"c":"d"}}'),
    ('root ::= a b\na ::= "a" (= "b")\nb ::= "b"', "ab"),
    ('root ::= ("\\u00e9" | [\\u4e00-\\u9fff])+', None),
    ('root ::= "" | "a" root "b"', "aabb"),
]
BAD_GRAMMARS = ["root ::= ", "root ::= undefined_rule", 'foo ::= "a"', 'root ::= "a" |',
                "root ::= [", 'root ::= "unterminated', "::= x", 'root ::= "a"{3,1}']


def token_id(char):
    """The id of a one-character token of SyntheticVocabulary (tests/grammar/
    synthetic_vocabulary.h): printable ASCII from 0, then newline (95) and tab (96)."""
    if char == "\n":
        return 95
    if char == "\t":
        return 96
    code = ord(char)
    assert 0x20 <= code < 0x7F, char
    return code - 0x20


def spell(text):
    """Steps that accept `text` one ASCII character at a time, then the stop token."""
    steps = bytearray()
    for char in text:
        steps += bytes([ANY_ID, token_id(char)])
    steps += bytes([STOP, 0])
    return steps


def random_steps(rng, count):
    steps = bytearray()
    for _ in range(count):
        kind = rng.choice([0, 1, 2, 3, 0, 1, ANY_ID, STOP, ROLLBACK, ALLOWED_ROUND_TRIP])
        steps += bytes([kind, rng.randrange(256)])
    return steps


def seed(form, whitespace, text, steps):
    return bytes([form + 5 * whitespace]) + text.encode("utf-8") + b"\0" + bytes(steps)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = random.Random(20241205)
    seeds = {}

    def add(name, form, text, accepted=None, whitespace=0):
        steps = bytearray()
        if accepted is not None and all(c in "\n\t" or 0x20 <= ord(c) < 0x7F for c in accepted):
            steps += spell(accepted) + bytes([ROLLBACK, 3])
        steps += random_steps(rng, 48)
        seeds[name] = seed(form, whitespace, text, steps)

    with open(TEN_FIELD_SCHEMA) as f:
        ten_field = f.read()
    for whitespace in range(3):
        add(f"schema_ten_field_ws{whitespace}", JSON_SCHEMA, ten_field, TEN_FIELD_DOCUMENT,
            whitespace)
    for i, (schema, accepted) in enumerate(SCHEMAS):
        add(f"schema_{i:02d}", JSON_SCHEMA, json.dumps(schema), accepted, whitespace=i % 3)
    for i, text in enumerate(BAD_SCHEMAS):
        add(f"schema_bad_{i:02d}", JSON_SCHEMA, text)
    add("json_object", JSON_OBJECT, "", '{"a": [1, 2.5e3, "x\\n"], "b": {"c": null}}')
    add("json_object_compact", JSON_OBJECT, "", '{"a":true}', whitespace=1)
    add("json_object_random", JSON_OBJECT, "", None, whitespace=2)
    for i, (regex, accepted) in enumerate(REGEXES):
        add(f"regex_{i:02d}", REGEX, regex, accepted)
    for i, regex in enumerate(BAD_REGEXES):
        add(f"regex_bad_{i:02d}", REGEX, regex)
    for i, (choices, accepted) in enumerate(CHOICES):
        add(f"choice_{i:02d}", CHOICE, CHOICE_SEPARATOR.join(choices), accepted)
    for i, (grammar, accepted) in enumerate(GRAMMARS):
        add(f"grammar_{i:02d}", GRAMMAR, grammar, accepted)
    for i, grammar in enumerate(BAD_GRAMMARS):
        add(f"grammar_bad_{i:02d}", GRAMMAR, grammar)
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"{len(seeds)} seeds in {out}")


if __name__ == "__main__":
    main()
