#!/usr/bin/env python3
"""Writes smollm2_reference.json: what llama.cpp computes on the SmolLM2 GGUF.

For each prompt: its token ids (llama.cpp's tokenizer, no BOS: the file's
tokenizer.ggml.add_bos_token is false), the top-K logits (ids and values) at
every prompt position (logits_all), and the greedy continuation. The ferry
test (engine/smollm2_test.cc) compares against this file, so CI needs the
GGUF (tools/fetch_smollm2.sh) but not llama_cpp.

  /work/venv-gguf/bin/python engine/testdata/make_smollm2_reference.py \
      ~/.cache/ferry/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import json
import sys

import numpy as np
from llama_cpp import Llama

TOP_K = 16
NEW_TOKENS = 16
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "<|im_start|>user\nWhat is the largest planet in the solar system?"
    "<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time, there was a little girl named",
]


def main():
    path = sys.argv[1]
    llm = Llama(model_path=path, n_ctx=256, n_threads=2, n_batch=256,
                logits_all=True, verbose=False)
    out = {"model": "SmolLM2-135M-Instruct.Q4_1.gguf", "top_k": TOP_K,
           "prompts": []}
    for text in PROMPTS:
        tokens = llm.tokenize(text.encode(), add_bos=False, special=True)
        llm.reset()
        llm.eval(tokens)
        logits = np.array(llm.scores[: len(tokens)], dtype=np.float32)
        top = []
        for row in logits:
            ids = np.argsort(-row, kind="stable")[:TOP_K]
            top.append({"ids": [int(i) for i in ids],
                        "logits": [float(row[i]) for i in ids]})
        # Greedy: argmax of each next-token distribution, fed back.
        greedy = []
        row = logits[-1]
        for _ in range(NEW_TOKENS):
            t = int(np.argmax(row))
            greedy.append(t)
            llm.eval([t])
            row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        out["prompts"].append({"text": text, "tokens": [int(t) for t in tokens],
                               "top": top, "greedy": greedy,
                               "greedy_text": llm.detokenize(greedy).decode(
                                   "utf-8", "replace")})
    json.dump(out, sys.stdout, indent=None)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
