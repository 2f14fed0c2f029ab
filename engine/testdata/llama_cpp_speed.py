"""llama.cpp's speed on the SmolLM2 GGUF, timed as engine:smollm2_benchmark
times ferry: 2 threads, n_ctx 512; prompt processing of 128 tokens in one
eval, and generation of 64 tokens one eval each after a 1-token prompt.
Prints the median of --reps runs of each, in tokens/s.

  /work/venv-llama/bin/python engine/testdata/llama_cpp_speed.py MODEL.gguf
(llama-cpp-python 0.3.x, built with CMAKE_ARGS="-DGGML_NATIVE=ON".)
"""
import argparse
import statistics
import time

from llama_cpp import Llama


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    llm = Llama(model_path=args.model, n_threads=2, n_threads_batch=2,
                n_ctx=512, n_batch=512, verbose=False)
    # The same ordinary token ids as the ferry benchmark's prompt.
    prompt = [1000 + (i * 7919) % 20000 for i in range(128)]
    pp, tg = [], []
    for _ in range(args.reps + 1):  # The first of each is a warm-up.
        llm.reset()
        start = time.perf_counter()
        llm.eval(prompt)
        pp.append(128 / (time.perf_counter() - start))
        llm.reset()
        llm.eval(prompt[:1])
        start = time.perf_counter()
        token = prompt[1]
        for _ in range(64):
            llm.eval([token])
            token = int(llm.scores[llm.n_tokens - 1].argmax())
        tg.append(64 / (time.perf_counter() - start))
    print(f"llama.cpp prompt 128: median {statistics.median(pp[1:]):.1f} tok/s "
          f"(runs {', '.join(f'{x:.0f}' for x in pp[1:])})")
    print(f"llama.cpp generate 64: median {statistics.median(tg[1:]):.1f} tok/s "
          f"(runs {', '.join(f'{x:.0f}' for x in tg[1:])})")


if __name__ == "__main__":
    main()
