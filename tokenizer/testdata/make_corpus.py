#!/usr/bin/env python3
"""Writes corpus.json: the strings the tokenizer tests encode, covering
several scripts, whitespace runs, digits, emoji (with ZWJ sequences and
skin tones), code and special tokens. Deterministic; rerun to regenerate."""
import json
import os

CORPUS = [
    "Hello world",
    "Hello, world! How are you today?",
    " leading space",
    "trailing space ",
    "  two leading spaces and two trailing  ",
    "a  b   c    d",
    "tabs\tand\t\tmore\ttabs",
    "line one\nline two\n\nline four\r\nwindows line",
    "\n\n\n",
    "   \n  \t  \n",
    "I'm sure you're right, they'll say it's John's and we've done it, I'd think.",
    "SHOUTING DON'T WON'T I'M THEY'RE",
    "Café naïve résumé façade Ångström São Paulo Zürich Crème brûlée",
    "e\u0301 combining accent vs \u00e9 precomposed",
    "Привет, мир! Как дела? Съешь же ещё этих мягких французских булок.",
    "Γειά σου Κόσμε! Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "你好，世界！我们今天去公园散步吧。",
    "日本語のテキスト、ひらがなとカタカナと漢字。",
    "한국어 문장입니다. 안녕하세요!",
    "مرحبا بالعالم! هذه جملة باللغة العربية.",
    "नमस्ते दुनिया! यह हिंदी में एक वाक्य है।",
    "שלום עולם",
    "สวัสดีชาวโลก",
    "1234567890",
    "3.14159 2.71828 1,000,000 10^6 -42 +7 0x1F 1e-5",
    "Numbers: ½ ² ³ ⅓ Ⅻ ١٢٣ ४५६",
    "The year 2024 had 366 days and 12 months.",
    "Emoji: 😀😃😄 👍🏽 🎉",
    "Family: 👨‍👩‍👧‍👦 and 🏳️‍🌈 and 👩🏾‍💻",
    "Flags: 🇫🇷🇯🇵🇺🇸",
    "def add(a, b):\n    return a + b\n",
    "for (int i = 0; i < n; ++i) { sum += x[i] * y[i]; }",
    "#include <vector>\nint main() { std::vector<int> v{1, 2, 3}; return v.size(); }",
    "    indented code\n        more indented\n\ttab indented",
    "if x == 1 and y != 2: print(f\"{x=} {y!r}\")",
    "https://example.com/path?query=1&other=two#frag",
    "user@example.org, C:\\Windows\\System32, /usr/local/bin",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>",
    "<|endoftext|>",
    "text<|endoftext|>more text",
    "<s>hello</s> <unk> [INST] inst [/INST]",
    "Special-ish <|im_start without end and <| half |>",
    "Mixed: English, Русский, 中文, العربية, हिन्दी, Ελληνικά 🚀 123",
    "ALL CAPS and lowercase and MiXeD CaSe",
    "punctuation!!! ??? ... --- ,,, ;;; ::: \"\"\" ''' ``` ((( ))) [[[ ]]] {{{ }}}",
    "$100 €200 £300 ¥400 ₹500",
    "   ",
    " ",
    "",
    "a",
    "\u00a0non-breaking\u00a0spaces\u3000ideographic space",
    "zero\u200bwidth\u200cjoiners\u200d",
    "The quick brown fox jumps over the lazy dog. " * 3,
]


def main():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(CORPUS, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {path}: {len(CORPUS)} strings")


if __name__ == "__main__":
    main()
