#!/usr/bin/env python3
"""Train the demo model's byte-level BPE tokenizer (Llama-3 structure) on the train corpus.

  python3 tools/demo/make_tokenizer.py --corpus DATA/train_sample.jsonl --out models/rag-tiny

Writes tokenizer.json and tokenizer_config.json. Structure copied from Llama-3:
pre_tokenizer Sequence[Split(<Llama-3 regex>, isolated), ByteLevel(no prefix space, no
regex)], BPE with ignore_merges, ByteLevel decoder, post-processor prepending
<|begin_of_text|>. Regular tokens get ids 0..V-7, the 6 special tokens the last 6 ids.
"""
import argparse
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prompt import ANSWER_FMT, SPECIAL_TOKENS, prompt_blocks  # noqa: E402

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Llama-3 chat template (from the Llama-3 tokenizer_config.json)
CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}")


def corpus_iter(path):
    with open(path) as f:
        for line in f:
            ex = json.loads(line)
            text = "".join(prompt_blocks(ex["question"], ex["documents"]))
            text += ANSWER_FMT.format(answer=ex["answers"][0])
            for s in SPECIAL_TOKENS:
                text = text.replace(s, "\n")
            yield text


def build(corpus, vocab_size):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIAL_TOKENS), min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(corpus_iter(corpus), trainer=trainer)
    tok.add_special_tokens(SPECIAL_TOKENS)
    bos = SPECIAL_TOKENS[0]
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(
            single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
            special_tokens=[(bos, tok.token_to_id(bos))]),
    ])
    # the Python API keeps ignore_merges only when the model is built with it: make sure
    d = json.loads(tok.to_str())
    d["model"]["ignore_merges"] = True
    return Tokenizer.from_str(json.dumps(d))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab-size", type=int, default=3072)
    a = ap.parse_args()
    tok = build(a.corpus, a.vocab_size)
    os.makedirs(a.out, exist_ok=True)
    tok.save(os.path.join(a.out, "tokenizer.json"))
    added = {}
    for s in SPECIAL_TOKENS:
        added[str(tok.token_to_id(s))] = {
            "content": s, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": True}
    cfg = {
        "added_tokens_decoder": added,
        "bos_token": "<|begin_of_text|>",
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|eot_id|>",
        "pad_token": "<|pad|>",
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": 8192,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")
    print(f"tokenizer: {tok.get_vocab_size()} tokens -> {a.out}")


if __name__ == "__main__":
    main()
