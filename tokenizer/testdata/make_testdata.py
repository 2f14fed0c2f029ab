#!/usr/bin/env python3
"""Writes the tokenizer test data: small tokenizers trained with the
`tokenizers` library on corpus.json (so the unit tests need no download),
and golden ids/decodings from the reference implementations.

  bytelevel.tokenizer.json     byte-level BPE shaped like SmolLM2's
                               (Digits + ByteLevel, chat special tokens)
  llama3_style.tokenizer.json  Llama 3's Split regex + ByteLevel,
                               ignore_merges, BOS template
  qwen2_style.tokenizer.json   Qwen 2's NFC + Split regex + ByteLevel
  spm_style.tokenizer.json     Llama 2 / TinyLlama's SentencePiece-style
                               BPE: Prepend/Replace "▁", byte fallback,
                               <unk>/<s>/</s>, BOS template
  spm_style.gguf               the same vocabulary as a GGUF "llama"
                               tokenizer (scores = -merge rank)
  llama3_style.gguf,           the byte-level vocabularies as GGUF "gpt2"
  qwen2_style.gguf             tokenizers (pre "llama-bpe", "qwen2")
  golden_<name>.json           per corpus string: ids with specials parsed,
                               ids with specials as text, ids with BOS added,
                               and the decoded text; from `tokenizers` for the
                               .json files and from llama.cpp
                               (llama-cpp-python, vocab_only) for the GGUFs
  golden_smollm2.json          the same for the real SmolLM2 GGUF, from
                               llama.cpp and from `tokenizers` (checked
                               equal), when its path is given

  python3 -m venv /tmp/v && /tmp/v/bin/pip install tokenizers gguf numpy \
      llama-cpp-python
  /tmp/v/bin/python tokenizer/testdata/make_testdata.py [SmolLM2.gguf]
"""
import json
import os
import sys

import gguf
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models,
                        normalizers, pre_tokenizers, processors, trainers)

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = json.load(open(os.path.join(HERE, "corpus.json"), encoding="utf-8"))
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Training text: the corpus plus some English and code, so that merges form.
TRAIN = CORPUS + [
    "The tokenizer splits text into pieces and merges frequent pairs. " * 4,
    "def encode(self, text):\n    return [self.vocab[t] for t in text]\n" * 3,
    "In the beginning the universe was created. This made a lot of people "
    "very angry and has been widely regarded as a bad move.",
    "Привет мир как дела хорошо спасибо " * 3,
]


def hf_golden(tok, name, bos=False):
    cases = []
    for s in CORPUS:
        tok.encode_special_tokens = False
        ids = tok.encode(s, add_special_tokens=False).ids
        with_bos = tok.encode(s, add_special_tokens=True).ids
        tok.encode_special_tokens = True
        as_text = tok.encode(s, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        cases.append({
            "text": s, "ids": ids, "ids_special_as_text": as_text,
            "ids_add_special": with_bos,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(with_bos,
                                               skip_special_tokens=True),
        })
    write(f"golden_{name}.json", {"reference": "tokenizers", "cases": cases})


def llama_cpp_golden(path, name, extra=None):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    cases = []
    for s in CORPUS:
        b = s.encode("utf-8")
        ids = llm.tokenize(b, add_bos=False, special=True)
        cases.append({
            "text": s, "ids": ids,
            "ids_special_as_text": llm.tokenize(b, add_bos=False,
                                                special=False),
            "ids_add_special": llm.tokenize(b, add_bos=True, special=True),
            "decoded": llm.detokenize(ids, special=True).decode(
                "utf-8", errors="replace"),
        })
    # llama.cpp promotes "control-looking" tokens (by their text, e.g.
    # <|endoftext|>, <|im_end|>) to control tokens whatever the file says;
    # the C++ test applies the same promotions to compare everything else.
    vocab = llama_cpp.llama_model_get_vocab(llm._model.model)
    types = gguf.GGUFReader(path).fields["tokenizer.ggml.token_type"]
    file_types = [int(types.parts[i][0]) for i in types.data]
    control = 8  # LLAMA_TOKEN_ATTR_CONTROL
    promoted = [i for i, t in enumerate(file_types)
                if t == 1 and llama_cpp.llama_vocab_get_attr(vocab, i) & control]
    doc = {"reference": "llama.cpp " + llama_cpp.__version__,
           "llama_cpp_promoted_to_control": promoted, "cases": cases}
    if extra:
        doc.update(extra)
    write(f"golden_{name}.json", doc)
    return cases


def write(name, obj):
    with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print("wrote", name)


def bytelevel_gguf(tok, name, pre, bos=None):
    """Writes tok's vocabulary as a GGUF "gpt2" tokenizer with
    tokenizer.ggml.pre = `pre`, and llama.cpp's golden ids for it."""
    doc = json.loads(tok.to_str())
    vocab = doc["model"]["vocab"]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    specials = {a["id"] for a in doc["added_tokens"] if a["special"]}
    merges = [m if isinstance(m, str) else " ".join(m)
              for m in doc["model"]["merges"]]
    path = os.path.join(HERE, f"{name}.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_feed_forward_length(8)
    w.add_head_count(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types([3 if i in specials else 1 for i in range(len(tokens))])
    w.add_token_merges(merges)
    if bos is not None:
        w.add_bos_token_id(bos)
        w.add_add_bos_token(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {name}.gguf")
    llama_cpp_golden(path, f"{name}_gguf")


def bytelevel():
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.train_from_iterator(TRAIN, trainers.BpeTrainer(
        vocab_size=900, special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(os.path.join(HERE, "bytelevel.tokenizer.json"))
    hf_golden(tok, "bytelevel")


def llama3_style():
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TRAIN, trainers.BpeTrainer(
        vocab_size=800, special_tokens=["<|begin_of_text|>",
                                        "<|end_of_text|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A",
        special_tokens=[("<|begin_of_text|>", 0)])
    tok.save(os.path.join(HERE, "llama3_style.tokenizer.json"))
    hf_golden(tok, "llama3_style")
    bytelevel_gguf(tok, "llama3_style", "llama-bpe", bos=0)


def qwen2_style():
    # Qwen 2's layout: NFC, then its Split regex (single digits), then
    # ByteLevel without its own regex.
    qwen2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(qwen2), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TRAIN, trainers.BpeTrainer(
        vocab_size=800, special_tokens=["<|endoftext|>", "<|im_start|>",
                                        "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(os.path.join(HERE, "qwen2_style.tokenizer.json"))
    hf_golden(tok, "qwen2_style")
    bytelevel_gguf(tok, "qwen2_style", "qwen2")


def spm_style():
    # Train merges on "▁"-joined text with a small alphabet, so rare
    # characters (CJK, emoji) go through byte fallback.
    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.normalizer = normalizers.Sequence([
        normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer_tok.train_from_iterator(TRAIN, trainers.BpeTrainer(
        vocab_size=700, limit_alphabet=90))
    trained = json.loads(trainer_tok.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" "))
              for m in trained["merges"]]
    specials = ["<unk>", "<s>", "</s>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    vocab = {t: i for i, t in enumerate(specials + byte_tokens)}
    for t, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        if t not in vocab:
            vocab[t] = len(vocab)
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>",
                               byte_fallback=True, fuse_unk=True))
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in specials])
    tok.normalizer = normalizers.Sequence([
        normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([
        decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
        decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 1)])
    tok.save(os.path.join(HERE, "spm_style.tokenizer.json"))
    hf_golden(tok, "spm_style")

    # The same vocabulary as llama.cpp's SentencePiece GGUF tokenizer.
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    rank = {a + b: r for r, (a, b) in enumerate(merges)}
    scores = [-float(rank.get(t, 0)) if t in rank else 0.0 for t in tokens]
    types = [2, 3, 3] + [6] * 256 + [1] * (len(tokens) - 259)
    path = os.path.join(HERE, "spm_style.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_feed_forward_length(8)
    w.add_head_count(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote spm_style.gguf")
    llama_cpp_golden(path, "spm_style_gguf")


def smollm2(path):
    r = gguf.GGUFReader(path)
    f = r.fields

    def strings(key):
        return [bytes(f[key].parts[i]).decode("utf-8") for i in f[key].data]
    tokens = strings("tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ")) for m in strings("tokenizer.ggml.merges")]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0])
             for i in f["tokenizer.ggml.token_type"].data]
    # SmolLM2's tokenizer.json, rebuilt from the GGUF's vocabulary.
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == 3])
    cases = llama_cpp_golden(path, "smollm2", extra={
        "reference": "llama.cpp and tokenizers (identical)"})
    for c in cases:
        tok.encode_special_tokens = False
        assert tok.encode(c["text"], add_special_tokens=False).ids == c["ids"], c
        tok.encode_special_tokens = True
        assert (tok.encode(c["text"], add_special_tokens=False).ids ==
                c["ids_special_as_text"]), c
        tok.encode_special_tokens = False
    print(f"smollm2: llama.cpp and tokenizers agree on all {len(cases)} "
          "strings")


if __name__ == "__main__":
    bytelevel()
    llama3_style()
    qwen2_style()
    spm_style()
    if len(sys.argv) > 1:
        smollm2(sys.argv[1])
