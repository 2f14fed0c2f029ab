// Tokenizers from Hugging Face tokenizer.json files (the `tokenizers`
// library's format), for the BPE models LLMs ship:
//   model:          BPE (vocab, merges as "a b" or ["a", "b"], unk_token,
//                   fuse_unk, byte_fallback, ignore_merges)
//   normalizer:     null, Sequence, Prepend, Replace (literal pattern), NFC,
//                   NFD, NFKC, NFKD (ICU)
//   pre_tokenizer:  null, Sequence, Split (Regex or String pattern; every
//                   behavior but Contiguous; not inverted), ByteLevel,
//                   Digits
//   post_processor: null, ByteLevel, TemplateProcessing (single), Sequence
//   decoder:        null, ByteLevel, Metaspace, Sequence of Replace("▁",
//                   " "), ByteFallback, Fuse, Strip(" ", 1, 0)
//   added_tokens:   content, id, special, lstrip, rstrip, single_word
// Anything else is an Unimplemented error naming the component, never a
// silently different tokenizer. (Known gap: added tokens marked
// "normalized" are matched in the raw text.) BOS is the first special
// token of the template; tokenizer.json has no EOS (tokenizer_config.json
// does), so eos_id is -1 unless `eos_token` names one.
#ifndef FERRY_TOKENIZER_HF_TOKENIZER_JSON_H_
#define FERRY_TOKENIZER_HF_TOKENIZER_JSON_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ferry/tokenizer/tokenizer.h"
#include "ferry/tokenizer/tokenizer_spec.h"

namespace ferry::tokenizer {

// Parses tokenizer.json text; `name` (the file) prefixes every error.
// `eos_token`, if not empty, is looked up for eos_id.
absl::StatusOr<TokenizerSpec> TokenizerSpecFromHfJson(
    absl::string_view json, const std::string& name,
    absl::string_view eos_token = "");

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromHfJson(
    absl::string_view json, const std::string& name,
    absl::string_view eos_token = "");

// Reads and parses the file at `path`.
absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromHfJsonFile(
    const std::string& path, absl::string_view eos_token = "");

// A Hugging Face model directory's tokenizer: tokenizer.json, with the
// eos_token of tokenizer_config.json (a string or an {"content": ...}
// object) when that file is there.
struct HfDirectoryTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;
  // tokenizer_config.json's chat_template (a Jinja template), "" if none.
  std::string chat_template;
  // tokenizer_config.json's bos_token, which templates render; "" if none.
  std::string bos_token;
};

// Reads `dir`/tokenizer.json and `dir`/tokenizer_config.json. Errors name
// the file and key.
absl::StatusOr<HfDirectoryTokenizer> TokenizerFromHfDirectory(
    const std::string& dir);

}  // namespace ferry::tokenizer

#endif  // FERRY_TOKENIZER_HF_TOKENIZER_JSON_H_
