#!/usr/bin/env python3
"""Tokenizer oracle: expected ids and texts from the Rust `tokenizers` library (PyPI).

Writes, under tests/fixtures/tokenizer/:
  bpe-tiny/        a byte-level BPE trained here with `tokenizers` in the Llama-3 layout
                   (Split(Llama-3 regex, isolated) + ByteLevel(use_regex=False), ByteLevel
                   decoder, ignore_merges, Llama-3 special tokens, TemplateProcessing BOS),
                   plus added tokens exercising lstrip / rstrip / single_word / normalized;
  sp-tiny/         a SentencePiece-style BPE with byte_fallback in the exact Llama-2
                   tokenizer.json structure (normalizer Prepend("▁") + Replace(" ", "▁"),
                   no pre-tokenizer, <0x00>..<0xFF> tokens, decoder Replace/ByteFallback/
                   Fuse/Strip, <s> by the post-processor), plus normalized added tokens;
  smollm2-tiny/, qwen2-tiny/, mistral-tiny/
                   byte-level and SentencePiece-style BPEs trained here in the exact
                   tokenizer.json layouts of real checkpoints (which cannot be downloaded
                   here): SmolLM2 (Sequence[Digits(individual), ByteLevel(regex)]), Qwen2 /
                   Qwen2.5 / Qwen3 (NFC, Split(Qwen regex) + ByteLevel), Mistral v0.3
                   (Metaspace(first, no split), byte_fallback, the Llama-2 decoder), with
                   their special tokens and chat templates (tests/fixtures/chat_templates);
  <variant>/       tokenizer.json-only variants for every other normalizer, pre-tokenizer
                   and decoder type (make_variants: one fixture each);
  llama3.json, bpe-tiny.json, sp-tiny.json, <name>.json, models.json
                   fixtures: for every test string its UTF-8 bytes (hex: cJSON strings stop
                   at NUL), ids without and with special tokens, decode results for chosen
                   and random id lists (skip_special both ways).

The real Llama-3 tokenizer is read from the shared data directory (not copied).
The tiny tokenizers are trained only when missing or with --retrain, so fixtures can be
regenerated without changing them. The variants are rewritten every time (they are derived
from the tiny tokenizers, not trained).

Regenerate (from the repository root):
    python3 tools/oracle/tokenizer_fixtures.py            # fixtures only
    python3 tools/oracle/tokenizer_fixtures.py --retrain  # also retrain the tiny tokenizers
Unicode sweep (manual, about a minute; every code point, the Llama-3 tokenizer or another):
    python3 tools/oracle/tokenizer_fixtures.py --sweep build/lazyattn [--sweep-dir DIR]
"""
import argparse
import json
import os
import random
import sys

import tokenizers
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer")
SHARED = os.environ.get("LA_SHARED_DIR") or os.path.join(ROOT, "..", "shared")
HOTPOT = os.path.join(SHARED, "data", "hotpotqa", "hotpotqa_dev_distractor_ircot_500.jsonl")
LLAMA3 = os.path.join(SHARED, "data", "tokenizers", "llama3")
COMMAND = "python3 tools/oracle/tokenizer_fixtures.py"
TEMPLATES = os.path.join(ROOT, "tests", "fixtures", "chat_templates")

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                   "<|end_header_id|>", "<|eot_id|>", "<|pad|>"]
LLAMA3_CHAT = ("{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
               "'<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}"
               "{% endfor %}{% if add_generation_prompt %}"
               "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
# Qwen2's pre-tokenizer regex (Qwen2 / Qwen2.5 / Qwen3 tokenizer.json): Llama 3's, with
# single digits.
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
SMOLLM2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>",
                    "<file_sep>", "<filename>", "<gh_stars>", "<issue_start>", "<issue_comment>",
                    "<issue_closed>", "<jupyter_start>", "<jupyter_text>", "<jupyter_code>",
                    "<jupyter_output>", "<jupyter_script>", "<empty_output>"]
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
                  "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
                  "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
                  "<|image_pad|>", "<|video_pad|>"]
QWEN2_ADDED = ["<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
               "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
               "<think>", "</think>"]
MISTRAL_CONTROL = ["[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                   "[TOOL_RESULTS]", "[/TOOL_RESULTS]"]


def chat_template(name):
    with open(os.path.join(TEMPLATES, name + ".jinja"), encoding="utf-8") as f:
        return f.read()


LLAMA2_CHAT = ("{% for message in messages %}{% if message['role'] == 'user' %}"
               "{{ bos_token + '[INST] ' + message['content'] + ' [/INST]' }}"
               "{% else %}{{ ' ' + message['content'] + eos_token }}{% endif %}{% endfor %}")


# ---- test strings ----------------------------------------------------------------------

def hotpot_passages(n_questions):
    out = []
    with open(HOTPOT, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i >= n_questions:
                break
            q = json.loads(line)
            out.append(q["question_text"])
            for c in q["contexts"]:
                out.append(c["title"] + "\n" + c["paragraph_text"])
    return out


def tricky_strings():
    s = []
    # whitespace runs, tabs, CR LF, trailing and leading spaces, newlines
    s += [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n",
          "\r", " \n", "\n ", " \n ", "a\tb", "a \tb", "a\t b", "a\r\nb", "a\r\n\r\nb",
          "a\n\nb", "a\n\n\nb", "trailing   ", "   leading", "  both  ", "x \n\n y",
          "tab\t\n", "a  b   c    d", "\u000b\u000c", "line1\nline2\r\nline3\rline4",
          "end with newline\n", "  \n\t \r\n  x", " " * 300 + "x", "x" + " " * 257,
          "\n" * 40 + "x", "a\t\t\t\tb", "word \t\n mixed \t\n ws"]
    # digits of every length 1..20, mixed
    digits = "12345678901234567890"
    for k in range(1, 21):
        s += [digits[:k], "a" + digits[:k], " " + digits[:k] + "x"]
    s += ["3.14159", "1,000,000", "12ab34", "v1.2.3", "0x1F", "2024-01-01", "+1 (555) 123-4567",
          "1e-10", "$19.99", "50%", "١٢٣٤٥", "１２３４５", "Ⅻ", "½ + ¼", "²³", "007 bond",
          "9" * 40]
    # contractions, upper case too, and look-alikes
    for c in ["s", "t", "re", "ve", "m", "ll", "d"]:
        s += ["x'" + c, "X'" + c.upper(), "it'" + c + " ok", "'" + c]
    s += ["it's", "don't", "we're", "I've", "I'm", "we'll", "he'd", "IT'S", "DON'T", "WE'RE",
          "I'VE", "I'M", "WE'LL", "HE'D", "It'S", "'sss", "x'\u017f", "x'\u212a", "don\u2019t",
          "rock'n'roll", "''", "'", "'''s", "'s'", "o'clock", "y'all'd've"]
    # accents and combining marks
    s += ["café", "cafe\u0301", "naïve", "Ångström", "Zürich", "ñandú", "e\u0301\u0302\u0303",
          "ǅemal", "ﬁnance", "İstanbul", "ß", "STRASSE ẞ", "Œuvre", "a\u0308\u0304",
          "\u0301alone", "Ž Š Č", "Việt Nam", "façade déjà vu"]
    # CJK, other scripts
    s += ["日本語のテキスト", "中文测试，标点。", "한국어 텍스트", "東京タワー 333m", "Hello世界",
          "漢字かなカナ", "ｶﾀｶﾅ", "مرحبا بالعالم", "العربية ١٢٣", "שלום עולם", "नमस्ते दुनिया",
          "สวัสดีครับ", "Привет, мир!", "Ελληνικά", "ქართული", "Հայերեն", "አማርኛ", "ᠮᠣᠩᠭᠣᠯ",
          "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟏𝟐𝟑", "ꙮ"]
    # emoji and ZWJ sequences
    s += ["😀", "👍🏽", "👨\u200d👩\u200d👧\u200d👦", "🏳️\u200d🌈", "🇯🇵🇺🇸", "❤️", "a😀b",
          "😀😀😀", "1️⃣", "🧑🏿\u200d🚀", " 😀 ", "emoji at end 🎉", "\u200d", "🫠🫡"]
    # odd spaces: U+180E (not White_Space), NBSP, thin space, ideographic space, ...
    for sp in ["\u180e", "\u00a0", "\u2009", "\u3000", "\u200b", "\ufeff", "\u2028", "\u0085",
               "\u1680", "\u202f", "\u205f", "\u2000", "\u200a"]:
        s += ["a" + sp + "b", "a " + sp + " b", sp + sp + "x", "x" + sp + sp, sp,
              "1" + sp + "2", "," + sp + "\n"]
    # special tokens inside text, partial ones
    s += ["<|begin_of_text|>hi<|eot_id|>", "<|eot_id", "<|eot_id|", "eot_id|>", "<|eot_id|>",
          "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>",
          "<|begin_of_text|><|begin_of_text|>", " <|eot_id|> ", "<|reserved_special_token_5|>",
          "<|pad|>", "<|eot_id|>x", "x<|eot_id|>", "<<|eot_id|>>", "<|EOT_ID|>",
          "<|end_of_text|>\n\n<|begin_of_text|>", "a<|eot_id|>b<|eot_id|>c", "<s>", "</s>",
          "<s>hello</s>", " <s> ", "<unk>", "<|eot_id|><s></s>"]
    # added tokens of the tiny tokenizers (lstrip, rstrip, single_word, normalized)
    s += ["a <mask> b", "a   <mask>", "<mask>", "x<mask>y", "\t<mask>\t<mask>", "<tool>   x",
          "<tool>\n\ny", "a<tool>b", "xyzzy", "axyzzy", "xyzzy!", "é xyzzy", "_xyzzy", "xyzzy_",
          "say xyzzy now", "x hi there y", " hi there", "[QA] what", "the [QA]", "x[QA]",
          "a <sep> b", "a  <sep>  b", "<sep>", "[QA]<sep>[QA]"]
    # long words, URLs, code
    s += ["pneumonoultramicroscopicsilicovolcanoconiosis", "a" * 300, "ab" * 200,
          "Supercalifragilisticexpialidocious", "https://example.com/path?query=1&x=2#frag",
          "mailto:first.last+tag@example.co.uk", "C:\\Users\\name\\file.txt",
          "________________", "----====----", "!!!???...", "…—–", "“quotes” ‘single’ «guillemets»"]
    s += ["def f(x):\n    return x ** 2  # square\n",
          "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
          '{"key": [1, 2.5, null, true], "nested": {"a": "b"}}',
          "<div class=\"x\">Hello &amp; <b>bye</b></div>",
          "\\begin{equation} E = mc^2 \\end{equation}",
          "cat file.txt | grep -E '^[a-z]+$' | sort -u > out.txt",
          "--- a/x.c\n+++ b/x.c\n@@ -1,3 +1,3 @@\n-old\n+new\n",
          "| col1 | col2 |\n|------|------|\n| 1    | 2    |",
          "for (int i = 0; i < n; ++i) { a[i] += b[i]; }",
          "    indented\n        twice\n\ttab",
          "SELECT * FROM t WHERE id IN (1, 2, 3);",
          "x = [i for i in range(10) if i % 2 == 0]",
          "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }"]
    # control characters, replacement char, extremes
    s += ["\x00", "a\x00b", "\x01\x02\x03", "\x7f", "\ufffd", "\U0010ffff", "\ue000",
          "\x1b[31mred\x1b[0m", "", "a", "A", "."]
    # every printable ASCII character alone
    s += [chr(c) for c in range(0x21, 0x7f)]
    return s


# ---- tiny tokenizers -----------------------------------------------------------------

def training_corpus():
    return hotpot_passages(300) + tricky_strings() * 3


def train_bpe_tiny(path):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=800, min_frequency=2, show_progress=False,
                                  special_tokens=LLAMA3_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_corpus(), trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
        special_tokens=[("<|begin_of_text|>", bos)])
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True, normalized=False)])
    tok.add_tokens([AddedToken("<tool>", rstrip=True, special=False, normalized=False),
                    AddedToken("xyzzy", single_word=True, special=False, normalized=True),
                    AddedToken(" hi there", special=False, normalized=False)])
    j = json.loads(tok.to_str())
    j["model"]["ignore_merges"] = True
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, indent=1)
    with open(os.path.join(path, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                   "pad_token": "<|pad|>", "clean_up_tokenization_spaces": True,
                   "model_max_length": 2048, "tokenizer_class": "PreTrainedTokenizerFast",
                   "chat_template": LLAMA3_CHAT}, f, ensure_ascii=False, indent=2)


def train_sp_tiny(path):
    bytes_tokens = ["<0x%02X>" % b for b in range(256)]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    # training only: split words at ▁ so merges never span words, as SentencePiece's
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    trainer = trainers.BpeTrainer(vocab_size=900, min_frequency=2, show_progress=False,
                                  limit_alphabet=150,
                                  special_tokens=["<unk>", "<s>", "</s>"] + bytes_tokens)
    tok.train_from_iterator(training_corpus(), trainer)
    j = json.loads(tok.to_str())
    # the Llama-2 layout: <0xNN> are plain vocab entries, only <unk> <s> </s> are added
    j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] in ("<unk>", "<s>", "</s>")]
    for a in j["added_tokens"]:
        a.update(single_word=False, lstrip=False, rstrip=False, normalized=False, special=True)
    j["pre_tokenizer"] = None
    j["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    j["model"]["ignore_merges"] = False
    tok = Tokenizer.from_str(json.dumps(j))
    tok.add_tokens([AddedToken("[QA]", normalized=True, special=False)])
    tok.add_special_tokens([AddedToken("<sep>", lstrip=True, rstrip=True, normalized=False,
                                       special=True)])
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(json.loads(tok.to_str()), f, ensure_ascii=False, indent=1)
    with open(os.path.join(path, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>",
                   "eos_token": "</s>", "unk_token": "<unk>", "legacy": True,
                   "clean_up_tokenization_spaces": False, "model_max_length": 4096,
                   "tokenizer_class": "LlamaTokenizerFast", "chat_template": LLAMA2_CHAT},
                  f, ensure_ascii=False, indent=2)


def save(path, tok, config):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(json.loads(tok.to_str()), f, ensure_ascii=False, indent=1)
    with open(os.path.join(path, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)


def train_byte_level(pre_tokenizer, specials, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_corpus(), trainer)
    return tok


def train_smollm2_tiny(path):
    """HuggingFaceTB/SmolLM2-*-Instruct's layout: no normalizer, Sequence[Digits(individual),
    ByteLevel(add_prefix_space=False, use_regex=True)], ByteLevel post-processor and decoder,
    ids 0.. for its special tokens, GPT2Tokenizer config with bos <|im_start|>."""
    tok = train_byte_level(pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)]),
        SMOLLM2_SPECIALS, 700)
    tok.post_processor = processors.ByteLevel(add_prefix_space=True, trim_offsets=False,
                                              use_regex=True)
    save(path, tok, {"add_prefix_space": False, "bos_token": "<|im_start|>",
                     "eos_token": "<|im_end|>", "pad_token": "<|im_end|>",
                     "unk_token": "<|endoftext|>", "clean_up_tokenization_spaces": False,
                     "model_max_length": 8192, "tokenizer_class": "GPT2Tokenizer",
                     "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
                     "chat_template": chat_template("smollm2")})


def train_qwen2_tiny(path):
    """Qwen/Qwen2.5-*-Instruct's layout: NFC, Sequence[Split(Qwen2 regex, Isolated),
    ByteLevel(use_regex=False)], ByteLevel decoder, <|endoftext|> <|im_start|> <|im_end|>
    first, then the vision / tool / fim tokens; no bos_token; the Qwen2.5 chat template."""
    tok = train_byte_level(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)]),
        QWEN2_SPECIALS, 700)
    tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                              use_regex=False)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in QWEN2_ADDED])
    save(path, tok, {"add_bos_token": False, "add_prefix_space": False, "bos_token": None,
                     "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                     "errors": "replace", "split_special_tokens": False,
                     "model_max_length": 131072, "tokenizer_class": "Qwen2Tokenizer",
                     "chat_template": chat_template("qwen2.5")})


def train_mistral_tiny(path):
    """mistralai/Mistral-7B-Instruct-v0.3's layout: no normalizer, Metaspace(replacement "▁",
    prepend_scheme "first", split False), BPE with byte_fallback and <0x00>..<0xFF> in the
    vocab, unk <unk>, the control tokens [INST] ... as special added tokens, decoder
    Sequence[Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0)], <s> by the
    post-processor; LlamaTokenizer config with the v0.3 chat template."""
    bytes_tokens = ["<0x%02X>" % b for b in range(256)]
    specials = ["<unk>", "<s>", "</s>"] + MISTRAL_CONTROL
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    # training only: split at ▁ so merges never span words, as SentencePiece's
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    trainer = trainers.BpeTrainer(vocab_size=900, min_frequency=2, show_progress=False,
                                  limit_alphabet=150, special_tokens=specials + bytes_tokens)
    tok.train_from_iterator(training_corpus(), trainer)
    j = json.loads(tok.to_str())
    j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] in specials]
    for a in j["added_tokens"]:
        a.update(single_word=False, lstrip=False, rstrip=False, normalized=False, special=True)
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                          "split": False}
    j["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    save(path, Tokenizer.from_str(json.dumps(j)),
         {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
          "unk_token": "<unk>", "legacy": False, "clean_up_tokenization_spaces": False,
          "model_max_length": 32768, "tokenizer_class": "LlamaTokenizer",
          "chat_template": chat_template("mistral-v0.3")})


# ---- fixtures --------------------------------------------------------------------------

def make_variants(bpe_dir, sp_dir):
    """tokenizer.json-only variants of the tiny tokenizers for the other supported parts:
    GPT-2 ByteLevel(use_regex) with add_prefix_space; Split behaviours and invert; the
    Metaspace pre-tokenizer and decoder (newer Llama-2 / Mistral conversions)."""
    bpe = json.load(open(os.path.join(bpe_dir, "tokenizer.json"), encoding="utf-8"))
    sp = json.load(open(os.path.join(sp_dir, "tokenizer.json"), encoding="utf-8"))
    out = {}
    j = json.loads(json.dumps(bpe))
    j["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                          "use_regex": True}
    out["bpe-gpt2"] = j
    j = json.loads(json.dumps(bpe))
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\s+"}, "behavior": "MergedWithPrevious",
         "invert": False},
        {"type": "Split", "pattern": {"String": "-"}, "behavior": "Contiguous", "invert": False},
        {"type": "Split", "pattern": {"Regex": r"\p{L}+"}, "behavior": "MergedWithNext",
         "invert": True},
        {"type": "Split", "pattern": {"Regex": r"x*"}, "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"String": "q"}, "behavior": "Removed", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
         "use_regex": False}]}
    out["bpe-split"] = j
    j = json.loads(json.dumps(sp))
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                          "split": True}
    j["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                    "split": True}
    out["sp-meta"] = j

    def bl(**kw):  # ByteLevel as the last pre-tokenizer, without its regex
        return {"type": "ByteLevel", "add_prefix_space": kw.get("prefix", False),
                "trim_offsets": True, "use_regex": False}

    def variant(base, name, normalizer="keep", pre="keep", decoder="keep"):
        j = json.loads(json.dumps(base))
        if normalizer != "keep":
            j["normalizer"] = normalizer
        if pre != "keep":
            j["pre_tokenizer"] = pre
        if decoder != "keep":
            j["decoder"] = decoder
        out[name] = j

    def seq_pre(*steps):
        return {"type": "Sequence", "pretokenizers": list(steps)}

    def seq_norm(*steps):
        return {"type": "Sequence", "normalizers": list(steps)}

    def seq_dec(*steps):
        return {"type": "Sequence", "decoders": list(steps)}

    metaspace = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
    replace_sp = {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}
    # normalizers (on the byte-level tiny BPE unless said otherwise)
    variant(bpe, "norm-nfd-accents-lower", normalizer=seq_norm(
        {"type": "NFD"}, {"type": "StripAccents"}, {"type": "Lowercase"}))
    variant(bpe, "norm-nfkc", normalizer={"type": "NFKC"})
    variant(bpe, "norm-nfkd-strip", normalizer=seq_norm(
        {"type": "NFKD"}, {"type": "Strip", "strip_left": True, "strip_right": False}))
    variant(bpe, "norm-nmt-regex", normalizer=seq_norm(
        {"type": "Nmt"}, {"type": "Strip", "strip_left": False, "strip_right": True},
        {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "},
        {"type": "Replace", "pattern": {"Regex": r"[0-9]"}, "content": "#"}))
    variant(bpe, "norm-bert", normalizer={"type": "BertNormalizer", "clean_text": True,
                                          "handle_chinese_chars": True, "strip_accents": None,
                                          "lowercase": True},
            pre=seq_pre({"type": "BertPreTokenizer"}, bl()))
    variant(bpe, "norm-bert-cased", normalizer={"type": "BertNormalizer", "clean_text": True,
                                                "handle_chinese_chars": False,
                                                "strip_accents": True, "lowercase": False},
            pre=seq_pre({"type": "WhitespaceSplit"}, bl()))
    # ByteLevel as the normalizer: the vocab is in the ByteLevel alphabet, the pre-tokenizer
    # runs on that alphabet's characters
    variant(bpe, "norm-byte-level", normalizer={"type": "ByteLevel"},
            pre={"type": "Split", "pattern": {"Regex": "\u0120?[^\u0120]+|\u0120"},
                 "behavior": "Isolated", "invert": False})
    variant(sp, "sp-norm-lower-nfc", normalizer=seq_norm(
        {"type": "Lowercase"}, {"type": "NFC"}, {"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}))
    # pre-tokenizers
    variant(bpe, "pre-digits", pre=seq_pre({"type": "Digits", "individual_digits": False},
                                           bl(prefix=True)))
    variant(bpe, "pre-punct", pre=seq_pre(
        {"type": "Punctuation", "behavior": "MergedWithPrevious"}, {"type": "WhitespaceSplit"},
        {"type": "Punctuation", "behavior": "Contiguous"}, bl()))
    variant(bpe, "pre-whitespace", pre=seq_pre({"type": "Whitespace"}, bl()))
    variant(bpe, "pre-delimiter-fixed", pre=seq_pre(
        {"type": "CharDelimiterSplit", "delimiter": "-"}, {"type": "FixedLength", "length": 3},
        bl()))
    variant(bpe, "pre-split-word", pre=seq_pre(
        {"type": "Split", "pattern": {"Regex": r"\w+"}, "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"Regex": r"\W"}, "behavior": "MergedWithNext", "invert": False},
        {"type": "Split", "pattern": {"Regex": r"[^\w\s]"}, "behavior": "Removed", "invert": False},
        bl()))
    variant(sp, "sp-pre-punct-metaspace", normalizer=None,
            pre=seq_pre({"type": "Punctuation", "behavior": "Removed"}, metaspace))
    # decoders (on the SentencePiece-style tiny BPE)
    variant(sp, "dec-bytefallback-metaspace", normalizer=None, pre=metaspace,
            decoder=seq_dec({"type": "ByteFallback"},
                            {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                             "split": True}))
    variant(sp, "dec-strip-per-token", decoder=seq_dec(
        replace_sp, {"type": "ByteFallback"},
        {"type": "Strip", "content": " ", "start": 0, "stop": 1},
        {"type": "Replace", "pattern": {"String": "e"}, "content": "E"}))
    variant(sp, "dec-fused-steps", decoder=seq_dec(
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Replace", "pattern": {"String": "▁▁"}, "content": "_"},
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": True},
        {"type": "Strip", "content": " ", "start": 2, "stop": 2}))
    variant(sp, "dec-metaspace-first", normalizer=None, pre=metaspace, decoder=seq_dec(
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True},
        {"type": "ByteFallback"}, {"type": "Fuse"}))
    for name, j in out.items():
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False, indent=1)
    return list(out)


def byte_token_ids(tok, byte_level):
    """Ids of single-byte tokens, to build invalid UTF-8 on purpose."""
    ids = {}
    for b in range(256):
        if byte_level:
            bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
            cs, n = bs[:], 0
            for x in range(256):
                if x not in bs:
                    bs.append(x)
                    cs.append(256 + n)
                    n += 1
            name = chr(cs[bs.index(b)])
        else:
            name = "<0x%02X>" % b
        i = tok.token_to_id(name)
        if i is not None:
            ids[b] = i
    return ids


def decode_cases(tok, byte_level, texts, rng):
    bt = byte_token_ids(tok, byte_level)
    word = tok.encode("hello world", add_special_tokens=False).ids
    specials = [i for i, a in tok.get_added_tokens_decoder().items()]
    lists = []
    for seq in ([0xE4, 0xB8], [0xE4, 0xB8, 0xAD], [0x80], [0xC0, 0x80], [0xED, 0xA0, 0x80],
                [0xF4, 0x90, 0x80, 0x80], [0xF0, 0x9F, 0x98], [0xE9, 0xE9], [0xC3],
                [0xF0, 0x9F, 0x98, 0x80], [0xFF, 0xFE], [0xE2, 0x82, 0xAC, 0xE2, 0x82]):
        if all(b in bt for b in seq):
            ids = [bt[b] for b in seq]
            lists += [ids, word + ids, ids + word, word + ids + word]
    for t in ["<|begin_of_text|>Hello<|eot_id|>", "<s> hello</s>", "a <mask> b", "<sep> x"]:
        lists.append(tok.encode(t, add_special_tokens=True).ids)
    for t in texts[:40]:
        lists.append(tok.encode(t, add_special_tokens=True).ids)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    for _ in range(60):
        n = rng.randint(1, 24)
        ids = [rng.randrange(vocab) for _ in range(n)]
        if specials and rng.random() < 0.5:
            ids.insert(rng.randrange(len(ids) + 1), rng.choice(specials))
        lists.append(ids)
    # ids HF would skip (holes) are not in the lists: our decode refuses them
    cases = []
    for ids in lists:
        for skip in (False, True):
            try:
                text = tok.decode(ids, skip_special_tokens=skip)
            except BaseException:  # a Rust panic: no oracle for this list
                continue
            cases.append({"ids": ids, "skip_special": skip, "hex": text.encode("utf-8").hex()})
    return cases


def fixture(name, tok_dir, tok_ref, texts, byte_level, rng):
    tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    cfg_path = os.path.join(tok_dir, "tokenizer_config.json")
    cfg = json.load(open(cfg_path, encoding="utf-8")) if os.path.isfile(cfg_path) else {}

    def special_id(key):
        v = cfg.get(key)
        v = v.get("content") if isinstance(v, dict) else v
        if v:
            return tok.token_to_id(v)
        if key == "bos_token":  # no config: the template's first special token
            pp = json.loads(tok.to_str()).get("post_processor") or {}
            first = (pp.get("single") or [{}])[0].get("SpecialToken")
            return pp["special_tokens"][first["id"]]["ids"][0] if first else -1
        return -1

    encode, panics = [], 0
    for t in texts:
        try:
            ids_special = tok.encode(t, add_special_tokens=True).ids
            decoded = tok.decode(ids_special, skip_special_tokens=False)
            roundtrip = tok.decode(tok.encode(t, add_special_tokens=False).ids,
                                   skip_special_tokens=False) == t
        except BaseException:  # a Rust panic (decoders/strip.rs on an empty text): no oracle
            panics += 1
            continue
        encode.append({"text": t, "hex": t.encode("utf-8").hex(),
                       "ids": tok.encode(t, add_special_tokens=False).ids,
                       "ids_special": ids_special,
                       "decoded_hex": decoded.encode("utf-8").hex(),
                       "roundtrip": roundtrip})
    if panics:
        print("%s: %d strings left out (tokenizers panics on them)" % (name, panics))
    return {
        "command": COMMAND,
        "generator": "tokenizers %s (Rust tokenizers via PyPI)" % tokenizers.__version__,
        "tokenizer": tok_ref,
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "bos_id": special_id("bos_token"),
        "eos_id": special_id("eos_token"),
        "tokens": {str(i): tok.id_to_token(i) for i in rng.sample(range(tok.get_vocab_size()), 20)},
        "encode": encode,
        "decode": decode_cases(tok, byte_level, texts, rng),
    }


def fnv1a64(data):
    """FNV-1a 64 of a file's bytes: lets the C test notice a tokenizer changed since."""
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def model_fixtures(rng):
    """A few strings through each tokenizer under tests/fixtures/models and models/."""
    out = []
    for base in ("tests/fixtures/models", "models"):
        d = os.path.join(ROOT, base)
        if not os.path.isdir(d):
            continue
        for m in sorted(os.listdir(d)):
            path = os.path.join(d, m, "tokenizer.json")
            if not os.path.isfile(path):
                continue
            tok = Tokenizer.from_file(path)
            texts = ["Hello, world! It's 2024.", "<|begin_of_text|>hi<|eot_id|>",
                     "a\u180eb \u00a0 x\u3000y", "日本語 😀 café", "   trailing\n\n"]
            out.append({"dir": base + "/" + m,
                        "fnv1a64": fnv1a64(open(path, "rb").read()),
                        "encode": [{"hex": t.encode().hex(),
                                    "ids_special": tok.encode(t, add_special_tokens=True).ids}
                                   for t in texts]})
    return {"command": COMMAND, "generator": "tokenizers %s" % tokenizers.__version__,
            "models": out}


def sweep(binary, tok_dir):
    """Every code point (surrogates excepted) in letter, digit, space and quote contexts,
    through `lazyattn tokenize --jsonl` and through tokenizers; prints the code points
    whose ids differ. A manual check of the Unicode tables (too slow for ctest)."""
    import subprocess
    tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    texts = ["a{0}a {0}{0} 1{0}1\n{0}\n'{0}".format(chr(c)) for c in cps]
    want = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    run = subprocess.run([binary, "tokenize", "-m", tok_dir, "--jsonl", "--no-special"],
                         input="".join(json.dumps(t) + "\n" for t in texts), capture_output=True,
                         text=True)
    if run.returncode != 0:
        sys.exit("%s failed: %s" % (binary, run.stderr.strip()))
    got = [json.loads(line) for line in run.stdout.splitlines()]
    bad = [cps[i] for i in range(len(cps)) if got[i] != want[i]]
    print("%d code points, %d differ%s" % (len(cps), len(bad), ":" if bad else ""))
    if bad:
        print(" ".join("U+%04X" % c for c in bad))
    return 1 if bad else 0


def write(name, obj):
    with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=True, separators=(",", ":"))
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--retrain", action="store_true", help="retrain the tiny tokenizers")
    ap.add_argument("--sweep", metavar="LAZYATTN",
                    help="instead: compare every code point through this lazyattn binary "
                         "with the Llama-3 tokenizer (about a minute)")
    ap.add_argument("--sweep-dir", metavar="DIR", default=LLAMA3,
                    help="with --sweep: the tokenizer to sweep (default: Llama 3)")
    args = ap.parse_args()
    if args.sweep:
        return sweep(args.sweep, args.sweep_dir)
    os.makedirs(OUT, exist_ok=True)
    bpe_dir, sp_dir = os.path.join(OUT, "bpe-tiny"), os.path.join(OUT, "sp-tiny")
    if args.retrain or not os.path.isfile(os.path.join(bpe_dir, "tokenizer.json")):
        train_bpe_tiny(bpe_dir)
    if args.retrain or not os.path.isfile(os.path.join(sp_dir, "tokenizer.json")):
        train_sp_tiny(sp_dir)
    real = [("smollm2-tiny", train_smollm2_tiny, True), ("qwen2-tiny", train_qwen2_tiny, True),
            ("mistral-tiny", train_mistral_tiny, False)]
    for name, train, _ in real:
        d = os.path.join(OUT, name)
        if args.retrain or not os.path.isfile(os.path.join(d, "tokenizer.json")):
            train(d)

    rng = random.Random(1234)
    texts = tricky_strings() + hotpot_passages(3)
    write("llama3.json", fixture("llama3", LLAMA3, "shared:data/tokenizers/llama3", texts, True, rng))
    write("bpe-tiny.json", fixture("bpe-tiny", bpe_dir, "tests/fixtures/tokenizer/bpe-tiny",
                                   texts, True, rng))
    write("sp-tiny.json", fixture("sp-tiny", sp_dir, "tests/fixtures/tokenizer/sp-tiny",
                                  texts, False, rng))
    for name in make_variants(bpe_dir, sp_dir):
        write(name + ".json", fixture(name, os.path.join(OUT, name),
                                      "tests/fixtures/tokenizer/" + name, tricky_strings(),
                                      not name.startswith(("sp", "dec-")), rng))
    for name, _, byte_level in real:
        write(name + ".json", fixture(name, os.path.join(OUT, name),
                                      "tests/fixtures/tokenizer/" + name, texts, byte_level, rng))
    write("models.json", model_fixtures(rng))
    print("%d strings; fixtures in %s" % (len(texts), os.path.relpath(OUT, ROOT)))


if __name__ == "__main__":
    sys.exit(main())
