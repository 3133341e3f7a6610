"""Convert a Hugging Face Llama directory (e.g. models/rag-tiny) to GGUF for the llama.cpp peer.

Runs llama.cpp's own converter (convert_hf_to_gguf.py, from the llama-cpp-python source
distribution: `pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36` and unpack)
unchanged, with one override: our tokenizers are byte-level BPE with exactly Llama 3's
pre-tokenizer, which the converter identifies by hashing the ids of a probe string. A new
vocabulary gives a new hash, so we tell it the pre-tokenizer is "llama-bpe".

    python3 tools/peers/convert_gguf.py --llamacpp DIR/vendor/llama.cpp MODEL_DIR OUT.gguf
"""
import argparse
import runpy
import sys
from pathlib import Path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llamacpp", required=True, help="llama.cpp source dir holding convert_hf_to_gguf.py")
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--outtype", default="f32", help="f32 keeps the comparison exact (bf16 weights widen losslessly)")
    a = ap.parse_args()
    src = Path(a.llamacpp)
    sys.path.insert(0, str(src / "gguf-py"))
    sys.path.insert(0, str(src))
    import conversion.base as base  # noqa: E402  (llama.cpp's package)

    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "llama-bpe"
    sys.argv = ["convert_hf_to_gguf.py", a.model_dir, "--outfile", a.out, "--outtype", a.outtype]
    runpy.run_path(str(src / "convert_hf_to_gguf.py"), run_name="__main__")


if __name__ == "__main__":
    main()
