#!/usr/bin/env python3
"""Writes llama.cpp's logits of the tiny GGUF models
(tools/convert_tiny_to_gguf.py) for models/llama/llama_families_test:
models/testdata/tiny/<family>.llama_cpp.json, the prompt of the family's
reference.json through llama.cpp's CPU backend (f32 KV cache, one thread),
via the llama-cpp-python sources on a built libllama.

  LLAMA_CPP_LIB_PATH=.../build/bin PYTHONPATH=.../llama-cpp-python-src \\
      ~/.cache/ferry/venv-ref/bin/python tools/llama_cpp_tiny_logits.py
"""
import json
import pathlib

import llama_cpp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
TINY = ROOT / "models/testdata/tiny"
F32 = 0  # GGML_TYPE_F32


def main():
    for family in ["llama", "qwen2", "qwen3", "phi3", "gemma2"]:
        ref = json.loads((TINY / family / "reference.json").read_text())
        prompt = ref["prompt"]
        model = llama_cpp.Llama(model_path=str(TINY / f"{family}.gguf"),
                                n_ctx=64, n_batch=64, logits_all=True,
                                type_k=F32, type_v=F32, flash_attn=False,
                                n_threads=1, verbose=False)
        model.eval(prompt)
        logits = np.array(model.scores[:len(prompt)], dtype=np.float32)
        want = np.array(ref["logits"], dtype=np.float32)
        error = float(np.abs(logits - want).max() / np.abs(want).max())
        (TINY / f"{family}.llama_cpp.json").write_text(json.dumps({
            "generated_by": "tools/llama_cpp_tiny_logits.py (llama.cpp of "
                            f"llama-cpp-python {llama_cpp.__version__})",
            "prompt": prompt,
            "vocab": ref["vocab"],
            "logits": [[round(float(x), 7) for x in row] for row in logits],
        }) + "\n")
        print(f"{family}: llama.cpp vs transformers {error:.2e}")


if __name__ == "__main__":
    main()
