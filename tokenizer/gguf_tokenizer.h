// Tokenizers from GGUF metadata, as llama.cpp reads them:
//   tokenizer.ggml.model  "gpt2" (byte-level BPE with tokenizer.ggml.merges)
//                         or "llama" (SentencePiece-style, merged by
//                         tokenizer.ggml.scores, <0xXX> byte tokens)
//   tokenizer.ggml.pre    the pre-tokenizer of "gpt2" vocabularies: smollm,
//                         gpt2, llama3 (llama-bpe), qwen2
//   tokenizer.ggml.tokens / token_type, bos/eos/unknown_token_id,
//   add_bos_token, add_eos_token, add_space_prefix.
// Control, unknown and user-defined tokens are matched in the text
// (control and unknown only with parse_special), as llama.cpp does.
#ifndef FERRY_TOKENIZER_GGUF_TOKENIZER_H_
#define FERRY_TOKENIZER_GGUF_TOKENIZER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "ferry/models/gguf/gguf_file.h"
#include "ferry/tokenizer/tokenizer.h"
#include "ferry/tokenizer/tokenizer_spec.h"

namespace ferry::tokenizer {

// Reads the spec. Errors name the file and the key that is missing, of the
// wrong type, or of a value not supported (Unimplemented).
absl::StatusOr<TokenizerSpec> TokenizerSpecFromGguf(const gguf::GgufFile& file);

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGguf(
    const gguf::GgufFile& file);

}  // namespace ferry::tokenizer

#endif  // FERRY_TOKENIZER_GGUF_TOKENIZER_H_
