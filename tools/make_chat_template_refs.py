#!/usr/bin/env python3
"""Renders chat templates with transformers and llama.cpp, for
tokenizer/chat_template_test.

For every template in tokenizer/testdata/chat_templates/ and a few
conversations, writes tokenizer/testdata/chat_templates.json with
  transformers: what transformers' apply_chat_template renders (its Jinja
                environment; null where the template raises, as gemma's does
                for a system message)
  llama_cpp:    what llama.cpp's llm_chat_apply_template gives (its
                src/llama-chat.cpp compiled with
                tools/llama_cpp_ref/chat_template_driver.cc)
  family:       llama.cpp's detected family name

Usage (in a venv with transformers; see tools/make_tiny_models.py):
  python tools/make_chat_template_refs.py --llama_cpp=DIR_OF_LLAMA_CPP_SOURCE
"""
import argparse
import json
import os
import pathlib
import subprocess
import tempfile

from transformers.utils.chat_template_utils import render_jinja_template

ROOT = pathlib.Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "tokenizer/testdata/chat_templates"
OUT = ROOT / "tokenizer/testdata/chat_templates.json"

SYSTEM = {"role": "system", "content": "You are a terse assistant."}
CONVERSATIONS = [
    [SYSTEM, {"role": "user", "content": "Hello!"}],
    [{"role": "user", "content": "What is 2+2?"}],
    [
        SYSTEM,
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "  Another one, please.\n"},
    ],
    [
        {"role": "user", "content": "Say hi"},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "Multi\nline\n\ntext with 'quotes' and é"},
    ],
]
BOS = {"gemma2": "<bos>", "llama3": "<|begin_of_text|>"}
FAMILY = {
    "chatml": "chatml",
    "llama3": "llama3",
    "gemma": "gemma",
    "phi3": "phi3",
}


def llama_cpp_driver(src):
    exe = pathlib.Path(tempfile.gettempdir()) / "ferry_chat_template_driver"
    subprocess.run(
        [
            "g++", "-std=c++17", "-O1", f"-I{src}/include",
            f"-I{src}/ggml/include", f"-I{src}/src",
            f"{src}/src/llama-chat.cpp",
            str(ROOT / "tools/llama_cpp_ref/chat_template_driver.cc"), "-o",
            str(exe)
        ],
        check=True)
    return exe


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--llama_cpp", required=True,
                   help="llama.cpp source dir (has src/llama-chat.cpp)")
    args = p.parse_args()
    driver = llama_cpp_driver(args.llama_cpp)
    cases = []
    for path in sorted(TEMPLATES.glob("*.jinja")):
        source = path.read_text()
        name = path.stem
        bos = BOS.get(name.split(".")[0], "<s>")
        for messages in CONVERSATIONS:
            for add in (True, False):
                try:
                    rendered, _ = render_jinja_template(
                        conversations=[messages],
                        chat_template=source,
                        add_generation_prompt=add,
                        bos_token=bos,
                        eos_token="</s>")
                    hf = rendered[0]
                except Exception as e:  # The template refused the messages.
                    hf = None
                    why = str(e)
                argv = [str(driver), str(path), "1" if add else "0"]
                for m in messages:
                    argv += [m["role"], m["content"]]
                r = subprocess.run(argv, capture_output=True)
                assert r.returncode == 0, (path, r.returncode)
                case = {
                    "template": path.name,
                    "messages": messages,
                    "add_generation_prompt": add,
                    "bos_token": bos,
                    "transformers": hf,
                    "llama_cpp": r.stdout.decode(),
                }
                if hf is None:
                    case["transformers_error"] = why
                cases.append(case)
    OUT.write_text(json.dumps(cases, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
