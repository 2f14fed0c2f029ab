#include "ferry/tokenizer/gguf_tokenizer.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/tokenizer/pretokenizer_patterns.h"

namespace ferry::tokenizer {
namespace {

using gguf::GgufFile;

constexpr char kMetaspace[] = "\xE2\x96\x81";  // "▁"

absl::StatusOr<bool> BoolOr(const GgufFile& f, const char* key, bool fallback) {
  if (!f.Has(key)) return fallback;
  return f.GetBool(key);
}

absl::StatusOr<int32_t> IdOr(const GgufFile& f, const char* key, int64_t n) {
  if (!f.Has(key)) return -1;
  FERRY_ASSIGN_OR_RETURN(int64_t id, f.GetInt(key));
  if (id < 0 || id >= n) {
    return f.Error(absl::StatusCode::kInvalidArgument,
                   absl::StrCat("metadata key '", key, "' = ", id,
                                " is outside the vocabulary of ", n));
  }
  return static_cast<int32_t>(id);
}

absl::Status SetPreTokenizer(const GgufFile& f, TokenizerSpec& spec) {
  std::string pre = "default";
  if (f.Has("tokenizer.ggml.pre")) {
    FERRY_ASSIGN_OR_RETURN(pre, f.GetString("tokenizer.ggml.pre"));
  }
  const auto isolated = SplitBehavior::kIsolated;
  if (pre == "smollm") {
    spec.splits = {{kDigitPattern, isolated}, {kGpt2Pattern, isolated}};
  } else if (pre == "gpt2" || pre == "gpt-2") {
    spec.splits = {{kGpt2Pattern, isolated}};
  } else if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe") {
    spec.splits = {{kLlama3Pattern, isolated}};
    spec.ignore_merges = true;
  } else if (pre == "qwen2") {
    spec.splits = {{kQwen2Pattern, isolated}};
  } else {
    return f.Error(absl::StatusCode::kUnimplemented,
                   absl::StrCat("tokenizer.ggml.pre '", pre,
                                "' is not supported (smollm, gpt2, llama3, "
                                "qwen2 are)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TokenizerSpec> TokenizerSpecFromGguf(const GgufFile& f) {
  FERRY_ASSIGN_OR_RETURN(std::string model,
                         f.GetString("tokenizer.ggml.model"));
  FERRY_ASSIGN_OR_RETURN(auto tokens,
                         f.GetStringArray("tokenizer.ggml.tokens"));
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0 || n > (int64_t{1} << 24)) {
    return f.Error(absl::StatusCode::kInvalidArgument,
                   absl::StrCat("tokenizer.ggml.tokens has ", n, " entries"));
  }
  TokenizerSpec spec;
  spec.tokens.assign(tokens.begin(), tokens.end());
  spec.kinds.assign(n, TokenKind::kNormal);
  if (f.Has("tokenizer.ggml.token_type")) {
    FERRY_ASSIGN_OR_RETURN(auto types,
                           f.GetArrayOf<int32_t>("tokenizer.ggml.token_type"));
    if (static_cast<int64_t>(types.size()) != n) {
      return f.Error(absl::StatusCode::kInvalidArgument,
                     absl::StrCat("tokenizer.ggml.token_type has ",
                                  types.size(), " entries for ", n, " tokens"));
    }
    for (int64_t i = 0; i < n; ++i) {
      switch (types[i]) {
        case 0:  // Undefined.
        case 1:
          break;
        case 2:
          spec.kinds[i] = TokenKind::kUnknown;
          break;
        case 3:
          spec.kinds[i] = TokenKind::kControl;
          break;
        case 4:
          spec.kinds[i] = TokenKind::kUserDefined;
          break;
        case 5:
          spec.kinds[i] = TokenKind::kUnused;
          break;
        case 6:
          spec.kinds[i] = TokenKind::kByte;
          break;
        default:
          return f.Error(absl::StatusCode::kInvalidArgument,
                         absl::StrCat("tokenizer.ggml.token_type[", i, "] is ",
                                      types[i], ", not 0 to 6"));
      }
    }
  }
  bool add_bos = false, add_space_prefix = false;
  if (model == "gpt2") {
    spec.merge_order = TokenizerSpec::MergeOrder::kRank;
    spec.byte_level = true;
    FERRY_ASSIGN_OR_RETURN(auto merges,
                           f.GetStringArray("tokenizer.ggml.merges"));
    spec.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const size_t space = merges[i].find(' ', 1);
      if (space == std::string::npos) {
        return f.Error(absl::StatusCode::kInvalidArgument,
                       absl::StrCat("tokenizer.ggml.merges[", i, "] '",
                                    merges[i], "' is not two tokens"));
      }
      spec.merges.emplace_back(merges[i].substr(0, space),
                               merges[i].substr(space + 1));
    }
    FERRY_RETURN_IF_ERROR(SetPreTokenizer(f, spec));
    FERRY_ASSIGN_OR_RETURN(add_bos,
                           BoolOr(f, "tokenizer.ggml.add_bos_token", false));
  } else if (model == "llama") {
    spec.merge_order = TokenizerSpec::MergeOrder::kScore;
    FERRY_ASSIGN_OR_RETURN(auto scores,
                           f.GetArrayOf<float>("tokenizer.ggml.scores"));
    if (static_cast<int64_t>(scores.size()) != n) {
      return f.Error(absl::StatusCode::kInvalidArgument,
                     absl::StrCat("tokenizer.ggml.scores has ", scores.size(),
                                  " entries for ", n, " tokens"));
    }
    spec.scores.assign(scores.begin(), scores.end());
    spec.byte_fallback = true;
    FERRY_ASSIGN_OR_RETURN(add_space_prefix,
                           BoolOr(f, "tokenizer.ggml.add_space_prefix", true));
    if (add_space_prefix) {
      spec.normalizer.push_back(
          {NormalizerStep::Kind::kPrepend, "", kMetaspace});
    }
    spec.normalizer.push_back(
        {NormalizerStep::Kind::kReplace, " ", kMetaspace});
    spec.decode_metaspace = true;
    spec.decode_strip_leading_space = add_space_prefix;
    FERRY_ASSIGN_OR_RETURN(add_bos,
                           BoolOr(f, "tokenizer.ggml.add_bos_token", true));
  } else {
    return f.Error(absl::StatusCode::kUnimplemented,
                   absl::StrCat("tokenizer.ggml.model '", model,
                                "' is not supported (gpt2 and llama are)"));
  }
  FERRY_ASSIGN_OR_RETURN(spec.bos_id,
                         IdOr(f, "tokenizer.ggml.bos_token_id", n));
  FERRY_ASSIGN_OR_RETURN(spec.eos_id,
                         IdOr(f, "tokenizer.ggml.eos_token_id", n));
  FERRY_ASSIGN_OR_RETURN(spec.unk_id,
                         IdOr(f, "tokenizer.ggml.unknown_token_id", n));
  if (model == "gpt2") spec.unk_id = -1;  // Byte-level: nothing is unknown.
  FERRY_ASSIGN_OR_RETURN(bool add_eos,
                         BoolOr(f, "tokenizer.ggml.add_eos_token", false));
  if (add_bos && spec.bos_id >= 0) spec.prefix_ids.push_back(spec.bos_id);
  if (add_eos && spec.eos_id >= 0) spec.suffix_ids.push_back(spec.eos_id);
  for (int64_t i = 0; i < n; ++i) {
    const TokenKind kind = spec.kinds[i];
    if (kind != TokenKind::kControl && kind != TokenKind::kUnknown &&
        kind != TokenKind::kUserDefined) {
      continue;
    }
    if (spec.tokens[i].empty()) continue;
    AddedTokenSpec t;
    t.id = static_cast<int32_t>(i);
    t.content = spec.tokens[i];
    t.special = kind != TokenKind::kUserDefined;
    spec.added_tokens.push_back(std::move(t));
  }
  return spec;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGguf(
    const GgufFile& file) {
  FERRY_ASSIGN_OR_RETURN(TokenizerSpec spec, TokenizerSpecFromGguf(file));
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::Create(std::move(spec));
  if (!tokenizer.ok()) {
    return file.Error(
        tokenizer.status().code(),
        absl::StrCat("tokenizer: ", tokenizer.status().message()));
  }
  return tokenizer;
}

}  // namespace ferry::tokenizer
