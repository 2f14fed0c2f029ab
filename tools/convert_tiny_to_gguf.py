#!/usr/bin/env python3
"""Converts the tiny models of models/testdata/tiny/ (tools/make_tiny_models.py)
to f32 GGUF files with llama.cpp's own convert_hf_to_gguf.py, for
models/llama/llama_families_test (ferry on the GGUF against transformers'
logits of the same weights).

The converter recognises a tokenizer's pre-tokenizer by hashing what it
makes of a fixed text; the tiny tokenizers are trained here, so their hash
is unknown to it and the pre-tokenizer each was made to copy is named
instead (tokenizer/testdata/make_testdata.py says which); Phi-3's and
Gemma 2's converters expect a SentencePiece model, so they read the
byte-level tokenizer as the generic converter does.

  ~/.cache/ferry/venv-ref/bin/python tools/convert_tiny_to_gguf.py \\
      --llama_cpp=DIR_OF_LLAMA_CPP_SOURCE
"""
import argparse
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TINY = ROOT / "models/testdata/tiny"
# The tokenizer each tiny model has, as the pre-tokenizer llama.cpp names.
PRE = {"llama": "llama-bpe", "qwen2": "qwen2", "qwen3": "qwen2",
       "phi3": "qwen2", "gemma2": "qwen2"}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--llama_cpp", required=True)
    args = p.parse_args()
    src = pathlib.Path(args.llama_cpp)
    sys.path[:0] = [str(src), str(src / "gguf-py")]
    import convert_hf_to_gguf as convert
    from conversion import base, gemma, phi

    # Phi-3's and Gemma 2's converters read a SentencePiece model; the tiny
    # ones have byte-level BPE tokenizers, which the generic path reads.
    phi.Phi3MiniModel.set_vocab = base.TextModel._set_vocab_gpt2
    gemma.Gemma2Model.set_vocab = base.TextModel._set_vocab_gpt2

    for family, pre in PRE.items():
        base.TextModel.get_vocab_base_pre = lambda self, tok, pre=pre: pre
        out = TINY / f"{family}.gguf"
        sys.argv = ["convert_hf_to_gguf.py", str(TINY / family), "--outtype",
                    "f32", "--outfile", str(out),
                    # Not "phi3": llama.cpp then expects </s>, <unk>, <s>.
                    "--model-name", "ferry tiny model"]
        convert.main()
        print(f"{family}: {out.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
