"""The Block-FT RAG prompt template (shared by training, evaluation and the C engine).

A prompt is a list of blocks. Each block is tokenized ALONE with
add_special_tokens=False and the id lists are concatenated:

  block 0 (preamble)  PREAMBLE
  one block per doc   DOC_FMT.format(title=..., text=...)
  final block         QUESTION_FMT.format(question=...)
  answer (generated)  answer + "<|eot_id|>"

Block attention: block 0 and every document attend causally only within
themselves; the final block (question, then the answer) attends to everything
before it. Positions are contiguous 0..N-1 with no padding.
"""

PREAMBLE = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
    "You are an intelligent AI assistant. Please answer questions based on the user's "
    "instructions. Below are some reference documents that may help you in answering the "
    "user's question.\n\n"
)
DOC_FMT = "- Title: {title}\n{text}\n"
QUESTION_FMT = (
    "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
    "Please write a high-quality answer for the given question using only the provided "
    "search documents (some of which might be irrelevant).\n"
    "Question: {question}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
)
ANSWER_FMT = "{answer}<|eot_id|>"

SPECIAL_TOKENS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|pad|>",
]


def prompt_blocks(question, documents):
    """The text of each prompt block: [preamble, doc..., question block]."""
    blocks = [PREAMBLE]
    for d in documents:
        blocks.append(DOC_FMT.format(title=d["title"], text=d["text"]))
    blocks.append(QUESTION_FMT.format(question=question))
    return blocks


def encode_blocks(tok, blocks):
    """tok: a tokenizers.Tokenizer. Returns a list of id lists, one per block."""
    encs = tok.encode_batch(blocks, add_special_tokens=False)
    return [e.ids for e in encs]
