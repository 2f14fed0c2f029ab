#!/usr/bin/env python3
"""Makes the tiny random-weight models of models/testdata/tiny/ and their
reference logits, so tests check ferry's families against transformers
without a hub or torch.

Each model is a Hugging Face directory as save_pretrained writes it
(config.json, model.safetensors in f32), with a small byte-level tokenizer
of tokenizer/testdata and a tokenizer_config.json carrying its family's
chat template, plus reference.json: the prompt's token ids and
transformers' logits for every position (eager attention, f32), and the
tokens the chat template gives for a conversation.

Families: llama (llama-3 rope scaling), qwen2 (QKV bias), qwen3 (per-head
q/k norms, its own head size), phi3 (fused QKV and gate/up), gemma2
(GeGLU, post-norms, soft-capping, sliding-window layers, scaled
embeddings). Seeded: the same versions make the same bytes.

Setup (a venv outside the repository). torch from PyPI links CUDA's
libraries even on the CPU; with the CUDA 13 toolkit in /usr/local the
missing few come from their own wheels, without pulling the full CUDA
stack through torch's dependencies:
  python3 -m venv ~/.cache/ferry/venv-ref
  pip=~/.cache/ferry/venv-ref/bin/pip
  $pip install --no-deps torch==2.15.0 nvidia-cusparselt-cu13==0.8.1 \\
      nvidia-nvshmem-cu13==3.7.2 nvidia-nccl-cu13==2.30.7 \\
      "nvidia-cufile==1.17.1.22.*"
  $pip install filelock typing-extensions sympy networkx jinja2 fsspec \\
      numpy transformers==5.24.0 safetensors tokenizers gguf diskcache
  ~/.cache/ferry/venv-ref/bin/python tools/make_tiny_models.py
then tools/convert_tiny_to_gguf.py and tools/llama_cpp_tiny_logits.py.
"""
import json
import pathlib
import shutil

import torch
import transformers
from transformers import (Gemma2Config, LlamaConfig, Phi3Config, Qwen2Config,
                          Qwen3Config, AutoModelForCausalLM)

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "models/testdata/tiny"
TOK = ROOT / "tokenizer/testdata"
TEMPLATES = TOK / "chat_templates"

# A prompt of the tokenizers' ids, longer than gemma2's window.
PROMPT = [5, 117, 42, 300, 7, 612, 88, 250, 3, 401, 19, 777, 64, 8]

COMMON = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=256, rms_norm_eps=1e-5,
              initializer_range=0.08, bos_token_id=1, eos_token_id=2,
              pad_token_id=0)


def families():
    yield "llama", LlamaConfig(
        **COMMON, tie_word_embeddings=False,
        rope_parameters=dict(rope_type="llama3", rope_theta=10000.0,
                             factor=8.0, low_freq_factor=1.0,
                             high_freq_factor=4.0,
                             original_max_position_embeddings=64)), \
        "llama3_style", "llama3.jinja"
    yield "qwen2", Qwen2Config(**COMMON, tie_word_embeddings=True,
                               rope_parameters=dict(rope_type="default",
                                                    rope_theta=1000000.0)), \
        "qwen2_style", "qwen2.5.jinja"
    yield "qwen3", Qwen3Config(**COMMON, head_dim=24, tie_word_embeddings=True,
                               rope_parameters=dict(rope_type="default",
                                                    rope_theta=1000000.0)), \
        "qwen2_style", "qwen3.jinja"
    yield "phi3", Phi3Config(**COMMON, tie_word_embeddings=False,
                             sliding_window=None,
                             rope_parameters=dict(rope_type="default",
                                                  rope_theta=10000.0)), \
        "qwen2_style", "phi3.5.jinja"
    yield "gemma2", Gemma2Config(**COMMON, head_dim=32,
                                 query_pre_attn_scalar=32, sliding_window=4,
                                 attn_logit_softcapping=3.0,
                                 final_logit_softcapping=2.0,
                                 tie_word_embeddings=True,
                                 hidden_activation="gelu_pytorch_tanh",
                                 rope_parameters=dict(rope_type="default",
                                                      rope_theta=10000.0)), \
        "qwen2_style", "gemma2.jinja"


CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hello there!"},
]


def main():
    torch.manual_seed(0)
    OUT.mkdir(parents=True, exist_ok=True)
    summary = {}
    for name, config, tokenizer, template in families():
        d = OUT / name
        if d.exists():
            shutil.rmtree(d)
        d.mkdir()
        tok_json = json.loads((TOK / f"{tokenizer}.tokenizer.json").read_text())
        vocab = len(tok_json["model"]["vocab"]) + len(
            [t for t in tok_json.get("added_tokens", [])
             if t["content"] not in tok_json["model"]["vocab"]])
        config.vocab_size = vocab
        config._attn_implementation = "eager"
        torch.manual_seed(1234)
        model = AutoModelForCausalLM.from_config(config,
                                                 attn_implementation="eager",
                                                 dtype=torch.float32)
        # Norm weights and biases start at constants: perturb every
        # parameter so that each one matters to the logits.
        with torch.no_grad():
            g = torch.Generator().manual_seed(99)
            for pname, p in model.named_parameters():
                p.add_(0.1 * torch.randn(p.shape, generator=g))
        model.eval()
        model.save_pretrained(d, safe_serialization=True)
        shutil.copy(TOK / f"{tokenizer}.tokenizer.json", d / "tokenizer.json")
        specials = [t["content"] for t in tok_json.get("added_tokens", [])]
        eos = next((t for t in specials if "end" in t), specials[-1])
        (d / "tokenizer_config.json").write_text(json.dumps({
            "chat_template": (TEMPLATES / template).read_text(),
            "bos_token": specials[0],
            "eos_token": eos,
            "tokenizer_class": "PreTrainedTokenizerFast",
        }, indent=1) + "\n")
        with torch.no_grad():
            logits = model(torch.tensor([PROMPT])).logits[0]
        tokenizer_obj = transformers.AutoTokenizer.from_pretrained(d)
        conversation = CONVERSATION if name != "gemma2" else CONVERSATION[1:]
        chat_text = tokenizer_obj.apply_chat_template(
            conversation, tokenize=False, add_generation_prompt=True)
        (d / "reference.json").write_text(json.dumps({
            "generated_by": (f"tools/make_tiny_models.py with torch "
                             f"{torch.__version__}, transformers "
                             f"{transformers.__version__}"),
            "prompt": PROMPT,
            "vocab": vocab,
            "logits": [[round(float(x), 7) for x in row] for row in logits],
            "messages": conversation,
            "chat_text": chat_text,
        }) + "\n")
        size = sum(f.stat().st_size for f in d.iterdir())
        summary[name] = size
        print(f"{name}: vocab {vocab}, {size / 1024:.0f} KiB, logits "
              f"{tuple(logits.shape)} max {logits.abs().max():.3f}")
    print(f"total {sum(summary.values()) / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
