#!/usr/bin/env python3
"""Encode throughput of the reference tokenizers on the text
tokenizer_benchmark.cc uses (corpus.json joined by newlines, repeated to
~1 MiB): `tokenizers` (Rust) on the same tokenizer.json files and on
SmolLM2's vocabulary, and llama.cpp (llama-cpp-python) on the SmolLM2 GGUF.
Prints MB/s (10^6 bytes, as Google Benchmark's bytes_per_second) of the
median of several runs, single-threaded encode of the whole text.

  python tokenizer/testdata/bench_reference.py [SmolLM2.gguf]
"""
import json
import os

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # Before tokenizers loads.
import statistics
import sys
import time

from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))


def text():
    corpus = json.load(open(os.path.join(HERE, "corpus.json"), encoding="utf-8"))
    joined = "".join(s + "\n" for s in corpus)
    out = ""
    while len(out.encode("utf-8")) < (1 << 20):
        out += joined
    return out


def measure(name, encode, data, runs=7):
    encode(data)  # Warm up.
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        n = len(encode(data))
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    size = len(data.encode("utf-8")) if isinstance(data, str) else len(data)
    print(f"{name:<40} {t * 1e3:8.1f} ms  {size / t / 1e6:7.2f} MB/s  "
          f"{n} tokens")


def main():
    data = text()
    lines = data.split("\n")

    def by_lines(tok):
        # One thread (TOKENIZERS_PARALLELISM=false), like the C++ loop.
        return lambda s: [t for e in tok.encode_batch(lines) for t in e.ids]
    for name in ("bytelevel", "llama3_style", "spm_style"):
        tok = Tokenizer.from_file(os.path.join(HERE, f"{name}.tokenizer.json"))
        measure(f"tokenizers {name}_json", lambda s: tok.encode(s).ids, data)
        if name == "bytelevel":
            measure(f"tokenizers {name}_json lines", by_lines(tok), data)
    if len(sys.argv) > 1:
        import gguf
        from tokenizers import AddedToken, decoders, models, pre_tokenizers
        r = gguf.GGUFReader(sys.argv[1])
        f = r.fields

        def strings(key):
            return [bytes(f[key].parts[i]).decode("utf-8") for i in f[key].data]
        tokens = strings("tokenizer.ggml.tokens")
        merges = [tuple(m.split(" ")) for m in strings("tokenizer.ggml.merges")]
        types = [int(f["tokenizer.ggml.token_type"].parts[i][0])
                 for i in f["tokenizer.ggml.token_type"].data]
        tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
        tok.decoder = decoders.ByteLevel()
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                for t, ty in zip(tokens, types) if ty == 3])
        measure("tokenizers smollm2", lambda s: tok.encode(s).ids, data)
        measure("tokenizers smollm2 lines", by_lines(tok), data)
        import llama_cpp
        llm = llama_cpp.Llama(model_path=sys.argv[1], vocab_only=True,
                              verbose=False)
        raw = data.encode("utf-8")
        measure("llama.cpp smollm2_gguf",
                lambda b: llm.tokenize(b, add_bos=False, special=True), raw)
        raw_lines = [line.encode("utf-8") for line in lines]
        measure("llama.cpp smollm2_gguf lines",
                lambda b: [t for line in raw_lines
                           for t in llm.tokenize(line, add_bos=False,
                                                 special=True)], raw)


if __name__ == "__main__":
    main()
