#!/usr/bin/env python3
"""Writes the tokenizer test fixtures with an independent implementation (Hugging Face `tokenizers`).

Dev-time only: CI reads the committed files and never runs this script. Needs (pip):
  tokenizers==0.23.3  gguf==0.19.0  Jinja2==3.1.6  (numpy comes with gguf)

  python3 tests/tokenizer/make_tokenizer_fixtures.py [--model PATH] [--unicode-tables]

What it writes under tests/tokenizer/fixtures/:
  tokenizer_bytelevel_<regime>.jsonl   {text, ids, decoded} for the default model's vocabulary and merges
                                       split by each supported pre-tokenizer regime (smollm is the
                                       model's own; llama-bpe and qwen2 use the same vocabulary to
                                       pin our split code against the reference regex engine).
  tokenizer_bytelevel_small/           a small byte-level BPE trained here with the default model's
    tokenizer.json, tokenizer_config.json  pre-tokenizer, specials and chat template (the model's
                                       own export is 3.5 MB: --export-smollm2 DIR writes it
                                       elsewhere for a check by hand).
  tokenizer_bytelevel_small.jsonl      {text, ids} for it.
  tokenizer_spm/tokenizer.json         a small SentencePiece-style BPE (byte fallback, "▁" spaces)
  tokenizer_spm/tokenizer_config.json  trained here on a small multilingual text.
  tokenizer_spm.jsonl                  {text, ids, decoded} for it.
  tokenizer_spm_metaspace/, tokenizer_spm_metaspace.jsonl
                                       the same model with a Metaspace pre-tokenizer and decoder.
  tokenizer_chat_smollm2.jsonl         {messages, add_generation_prompt, text}: the model's jinja
                                       chat template rendered by jinja2.
  tokenizer_chat_llama3.jsonl          the same for a Llama 3 style template (first line holds it).
With --unicode-tables it also regenerates tokenizer/unicode_tables.cc from Python's unicodedata.
"""

import argparse
import json
import os
import subprocess
import sys
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(HERE, "fixtures")

# Our own varied text set: scripts, whitespace runs, numbers, code, emoji, specials inline.
TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    " leading space and trailing space ",
    "  two leading spaces",
    "multiple   spaces    between     words",
    "tabs\tand\t\ttabs\t",
    "new\nlines\n\nand\n\n\nmore\n",
    "mixed \t\n whitespace \n\t run",
    "\n\n\nstarts with newlines",
    "ends with spaces    ",
    "",
    " ",
    "\t",
    "numbers 1 22 333 4444 55555 1234567890 3.14159 -42 1e-9 0x1F",
    "year 2024, price $1,299.99, 50% off, 7th place",
    "안녕하세요, 세계! 한국어 문장을 토큰화합니다.",
    "你好，世界！这是一个中文句子，用于测试分词器。",
    "日本語のテキストも少し：東京は晴れです。",
    "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇰🇷 ❤️",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))  # 5\n",
    "for (int i = 0; i < n; ++i) { sum += v[i]; }",
    '{"key": "value", "list": [1, 2, 3], "nested": {"x": null}}',
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>",
    "text before <|endoftext|> text after",
    "<|im_start|><|im_end|><|endoftext|>",
    "not special: <|im_star|> <im_start> <|im_end",
    "Punctuation!!! ??? ... --- ;;; ::: \"quotes\" 'single' (parens) [brackets] {braces}",
    "It's they're we've I'm you'll he'd IT'S THEY'RE",
    "Mixed scripts: English, 한국어, 中文, Русский, العربية, हिन्दी, Ελληνικά.",
    "Accents: café naïve résumé façade Ångström Øre",
    "Zero\u200bwidth\u200djoiner and non\u00a0breaking\u00a0space",
    "URL https://example.com/path?q=1&r=2#frag and email a.b@c.org",
    "CamelCaseIdentifier snake_case_name kebab-case-name SCREAMING_CASE",
    "a\r\nwindows\r\nline endings\r\n",
    "Math: ∑ x² + √y ≤ ∞, α β γ δ ε",
    "😀" * 5 + "abc" + "한" * 7,
    "Repeated aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "   \n   \n",
    "x" + " " * 20 + "y",
    "٣٤٥ Arabic-Indic digits and ½ ¾ fractions, Ⅻ roman",
]

SMOLLM2_CONVERSATIONS = [
    ([{"role": "user", "content": "Hello!"}], True),
    ([{"role": "user", "content": "Hello!"}], False),
    ([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}], True),
    (
        [
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "4"},
            {"role": "user", "content": "And 3+3?\nExplain."},
        ],
        True,
    ),
    ([{"role": "user", "content": "안녕하세요 😀 multi\nline\n\n  spaces  "}], True),
    ([{"role": "system", "content": ""}, {"role": "user", "content": ""}], False),
    ([{"role": "assistant", "content": "I speak first."}], True),
]

# A Llama 3 style template written for this test (same output format as the Llama 3 models).
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)


def default_model_path():
    if os.environ.get("KVSERVE_MODEL"):
        return os.environ["KVSERVE_MODEL"]
    cache = os.environ.get("KVSERVE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kvserve")
    return os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def read_gguf_tokenizer(path):
    import gguf

    reader = gguf.GGUFReader(path)

    def field(name):
        f = reader.fields.get(name)
        if f is None:
            return None
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            if f.types[-1] == gguf.GGUFValueType.STRING:
                return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
            return [f.parts[i].tolist()[0] for i in f.data]
        if f.types[0] == gguf.GGUFValueType.STRING:
            return bytes(f.parts[f.data[0]]).decode("utf-8")
        return f.parts[f.data[0]].tolist()[0]

    return {
        "tokens": field("tokenizer.ggml.tokens"),
        "token_type": field("tokenizer.ggml.token_type"),
        "merges": field("tokenizer.ggml.merges"),
        "bos": field("tokenizer.ggml.bos_token_id"),
        "eos": field("tokenizer.ggml.eos_token_id"),
        "chat_template": field("tokenizer.chat_template"),
        "pre": field("tokenizer.ggml.pre"),
    }


# Split regexes of the regimes as Hugging Face tokenizers write them (Split + ByteLevel without
# its own regex). smollm: individual digits, then the GPT-2 split (the model's tokenizer.json).
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def byte_level_tokenizer(vocab_info, regime):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {tok: i for i, tok in enumerate(vocab_info["tokens"])}
    merges = [tuple(m.split(" ")) for m in vocab_info["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    if regime == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    else:
        split = {"llama-bpe": LLAMA3_SPLIT, "qwen2": QWEN2_SPLIT}[regime]
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(split), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    tok.decoder = decoders.ByteLevel()
    specials = [
        AddedToken(t, normalized=False, special=True)
        for t, ty in zip(vocab_info["tokens"], vocab_info["token_type"])
        if ty == 3
    ]
    tok.add_special_tokens(specials)
    return tok


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {path} ({len(rows)} rows)")


def id_fixture(tok, texts):
    rows = []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False).ids
        # Decoding is not always the inverse (a SentencePiece "▁" after each special token).
        rows.append({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
    return rows


def write_hf_dir(tok, directory, config):
    os.makedirs(directory, exist_ok=True)
    tok.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
    size = os.path.getsize(os.path.join(directory, "tokenizer.json"))
    print(f"wrote {directory}/tokenizer.json ({size} bytes)")


SPM_CORPUS = [
    "The quick brown fox jumps over the lazy dog. A tokenizer splits text into pieces.",
    "Language models read tokens; the paged KV cache keeps their keys and values.",
    "Hello world, hello again. Numbers like 123 and 4567 appear here and there.",
    "def main():\n    print('hello')\n    return 0\n",
    "안녕하세요. 오늘 날씨가 좋네요. 한국어 문장도 조금 있습니다.",
    "你好。今天天气很好。这里也有一些中文句子。",
    "Bonjour le monde. Ceci est une phrase en français avec des accents: é è à ç.",
    "Привет, мир. Это предложение на русском языке.",
]


def small_byte_level_tokenizer():
    """A small GPT-2 style byte-level BPE with the default model's pre-tokenizer and specials."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=900,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(SPM_CORPUS * 20, trainer=trainer)
    return tok


def spm_tokenizer():
    """A small Llama 2 style tokenizer: BPE over "▁"-spelled text with <0xXX> byte fallback."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    trainer_tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    trainer_tok.normalizer = normalizers.Sequence(
        [normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]
    )
    trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never", split=True)
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    trainer_tok.train_from_iterator(SPM_CORPUS * 20, trainer=trainer)
    trained = json.loads(trainer_tok.to_str())

    # Llama 2 layout: <unk> <s> </s>, then the 256 byte tokens, then the learned pieces.
    learned = sorted(trained["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece, _ in learned:
        if piece not in vocab:
            vocab[piece] = len(vocab)
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in trained["model"]["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.pre_tokenizer = None
    tok.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    from tokenizers import AddedToken

    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in ["<unk>", "<s>", "</s>"]])
    return tok


def render_chat(template, conversations, bos_token=""):
    import jinja2

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    compiled = env.from_string(template)
    rows = []
    for messages, add_generation_prompt in conversations:
        text = compiled.render(messages=messages, add_generation_prompt=add_generation_prompt, bos_token=bos_token)
        rows.append({"messages": messages, "add_generation_prompt": add_generation_prompt, "text": text})
    return rows


def category_ranges(predicate):
    ranges = []
    start = None
    for cp in range(0x110000):
        if predicate(cp):
            if start is None:
                start = cp
        elif start is not None:
            ranges.append((start, cp - 1))
            start = None
    if start is not None:
        ranges.append((start, 0x10FFFF))
    return ranges


def write_unicode_tables():
    letters = category_ranges(lambda cp: unicodedata.category(chr(cp)).startswith("L"))
    numbers = category_ranges(lambda cp: unicodedata.category(chr(cp)).startswith("N"))

    def table(name, ranges):
        lines = [f"const CodepointRange {name}[] = {{"]
        row = []
        for lo, hi in ranges:
            row.append(f"{{0x{lo:X}, 0x{hi:X}}},")
            if len(row) == 5:
                lines.append("    " + " ".join(row))
                row = []
        if row:
            lines.append("    " + " ".join(row))
        lines.append("};")
        lines.append(f"const size_t {name}Size = sizeof({name}) / sizeof({name}[0]);")
        return lines

    out = [
        "// Generated by tests/tokenizer/make_tokenizer_fixtures.py --unicode-tables from Python's",
        f"// unicodedata (Unicode {unicodedata.unidata_version}). Do not edit by hand.",
        '#include "tokenizer/unicode_tables.h"',
        "",
        "namespace kvserve::unicode_internal {",
        "",
        "// General category L (Lu Ll Lt Lm Lo).",
        *table("kLetterRanges", letters),
        "",
        "// General category N (Nd Nl No).",
        *table("kNumberRanges", numbers),
        "",
        "}  // namespace kvserve::unicode_internal",
        "",
    ]
    path = os.path.join(ROOT, "model", "unicode_tables.cc")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out))
    subprocess.run(["clang-format", "-i", path], check=False)  # the committed file is formatted
    print(f"wrote {path} ({len(letters)} letter ranges, {len(numbers)} number ranges)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=default_model_path())
    parser.add_argument("--unicode-tables", action="store_true")
    parser.add_argument("--export-smollm2", metavar="DIR", help="also write the full model tokenizer.json there")
    args = parser.parse_args()
    if args.unicode_tables:
        write_unicode_tables()
    if not os.path.exists(args.model):
        sys.exit(f"model not found: {args.model} (run scripts/setup.sh)")
    os.makedirs(FIXTURES, exist_ok=True)

    info = read_gguf_tokenizer(args.model)
    for regime in ("smollm", "llama-bpe", "qwen2"):
        tok = byte_level_tokenizer(info, regime)
        rows = id_fixture(tok, TEXTS)
        for row in rows:
            assert tok.decode(row["ids"], skip_special_tokens=False) == row["text"], row["text"]
        write_jsonl(os.path.join(FIXTURES, f"tokenizer_bytelevel_{regime}.jsonl"), rows)
        if regime == "smollm":
            bos = info["tokens"][info["bos"]]
            eos = info["tokens"][info["eos"]]
            smollm2_config = {
                "add_bos_token": False,
                "bos_token": bos,
                "eos_token": eos,
                "chat_template": info["chat_template"],
            }
            if args.export_smollm2:  # 3.5 MB: too big to commit; for a one-off check by hand
                write_hf_dir(tok, args.export_smollm2, smollm2_config)

    small = small_byte_level_tokenizer()
    write_hf_dir(small, os.path.join(FIXTURES, "tokenizer_bytelevel_small"), smollm2_config)
    write_jsonl(os.path.join(FIXTURES, "tokenizer_bytelevel_small.jsonl"), id_fixture(small, TEXTS))

    spm = spm_tokenizer()
    write_hf_dir(
        spm,
        os.path.join(FIXTURES, "tokenizer_spm"),
        {"add_bos_token": True, "bos_token": {"content": "<s>"}, "eos_token": "</s>"},
    )
    spm_texts = [t for t in TEXTS if "<|" not in t] + ["<s>special inside</s> text", "hi <s> there"]
    write_jsonl(os.path.join(FIXTURES, "tokenizer_spm.jsonl"), id_fixture(spm, spm_texts))

    # The same model spelled the newer way: a Metaspace pre-tokenizer and decoder instead of the
    # Prepend/Replace normalizer ("▁" only before the first segment, and not before a space).
    from tokenizers import decoders, pre_tokenizers

    spm.normalizer = None
    spm.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    spm.decoder = decoders.Sequence(
        [
            decoders.ByteFallback(),
            decoders.Metaspace(replacement="\u2581", prepend_scheme="first", split=False),
        ]
    )
    write_hf_dir(
        spm,
        os.path.join(FIXTURES, "tokenizer_spm_metaspace"),
        {"add_bos_token": True, "bos_token": "<s>", "eos_token": "</s>"},
    )
    write_jsonl(os.path.join(FIXTURES, "tokenizer_spm_metaspace.jsonl"), id_fixture(spm, spm_texts))

    write_jsonl(
        os.path.join(FIXTURES, "tokenizer_chat_smollm2.jsonl"), render_chat(info["chat_template"], SMOLLM2_CONVERSATIONS)
    )
    llama3_rows = render_chat(LLAMA3_TEMPLATE, SMOLLM2_CONVERSATIONS, bos_token="<|begin_of_text|>")
    write_jsonl(os.path.join(FIXTURES, "tokenizer_chat_llama3.jsonl"), [{"template": LLAMA3_TEMPLATE}] + llama3_rows)


if __name__ == "__main__":
    main()
