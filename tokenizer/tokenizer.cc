#include "ferry/tokenizer/tokenizer.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/tokenizer/byte_level.h"
#include "ferry/tokenizer/unicode_normalizer.h"
#include "ferry/tokenizer/utf8.h"

namespace ferry::tokenizer {
namespace {

constexpr char kMetaspace[] = "\xE2\x96\x81";  // U+2581 "▁"

// Byte offset of the first invalid UTF-8 sequence in `s`, or npos.
size_t FirstInvalidUtf8(absl::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (static_cast<unsigned char>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const DecodedChar d = DecodeUtf8(s, pos);
    if (d.code_point < 0) return pos;
    pos += d.length;
  }
  return absl::string_view::npos;
}

NormalizationForm FormOf(NormalizerStep::Kind kind) {
  switch (kind) {
    case NormalizerStep::Kind::kNfd:
      return NormalizationForm::kNfd;
    case NormalizerStep::Kind::kNfkc:
      return NormalizationForm::kNfkc;
    case NormalizerStep::Kind::kNfkd:
      return NormalizationForm::kNfkd;
    default:
      return NormalizationForm::kNfc;
  }
}

}  // namespace

Tokenizer::Tokenizer(TokenizerSpec spec) : spec_(std::move(spec)) {}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Create(
    TokenizerSpec spec) {
  const auto n = static_cast<int64_t>(spec.tokens.size());
  if (!spec.kinds.empty() && static_cast<int64_t>(spec.kinds.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the vocabulary has ", n, " tokens but ", spec.kinds.size(), " kinds"));
  }
  if (spec.kinds.empty())
    spec.kinds.assign(spec.tokens.size(), TokenKind::kNormal);
  auto check_id = [n](int32_t id, absl::string_view what) -> absl::Status {
    if (id < -1 || id >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " id ", id, " is outside the vocabulary of ", n));
    }
    return absl::OkStatus();
  };
  FERRY_RETURN_IF_ERROR(check_id(spec.bos_id, "BOS"));
  FERRY_RETURN_IF_ERROR(check_id(spec.eos_id, "EOS"));
  for (int32_t id : spec.prefix_ids) {
    FERRY_RETURN_IF_ERROR(check_id(id < 0 ? n : id, "template"));
  }
  for (int32_t id : spec.suffix_ids) {
    FERRY_RETURN_IF_ERROR(check_id(id < 0 ? n : id, "template"));
  }
  for (const AddedTokenSpec& t : spec.added_tokens) {
    FERRY_RETURN_IF_ERROR(check_id(
        t.id < 0 ? n : t.id, absl::StrCat("added token '", t.content, "'")));
    if (t.content.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("added token ", t.id, " has empty content"));
    }
    // Added tokens decode as their content.
    if (spec.kinds[t.id] == TokenKind::kNormal ||
        spec.kinds[t.id] == TokenKind::kUnused) {
      spec.kinds[t.id] =
          t.special ? TokenKind::kControl : TokenKind::kUserDefined;
    }
    spec.tokens[t.id] = t.content;
  }
  for (const NormalizerStep& step : spec.normalizer) {
    if (step.kind != NormalizerStep::Kind::kPrepend &&
        step.kind != NormalizerStep::Kind::kReplace) {
      FERRY_RETURN_IF_ERROR(
          NormalizeUnicode("e\xCC\x81", FormOf(step.kind)).status());
    }
  }
  auto tokenizer = std::unique_ptr<Tokenizer>(new Tokenizer(std::move(spec)));
  FERRY_ASSIGN_OR_RETURN(tokenizer->model_, BpeModel::Create(tokenizer->spec_));
  tokenizer->added_ =
      std::make_unique<AddedTokenMatcher>(tokenizer->spec_.added_tokens);
  for (const auto& [pattern, behavior] : tokenizer->spec_.splits) {
    FERRY_ASSIGN_OR_RETURN(auto splitter,
                           RegexSplitter::Create(pattern, behavior));
    tokenizer->splitters_.push_back(std::move(splitter));
  }
  return tokenizer;
}

void Tokenizer::EncodeText(absl::string_view text,
                           std::vector<int32_t>& out) const {
  std::string normalized;
  absl::string_view view = text;
  if (!spec_.normalizer.empty() || spec_.byte_level_add_prefix_space) {
    normalized = std::string(text);
    for (const NormalizerStep& step : spec_.normalizer) {
      switch (step.kind) {
        case NormalizerStep::Kind::kPrepend:
          // (Not insert(0, ...): GCC 12 -O3 misreports it under -Wrestrict.)
          if (!normalized.empty()) normalized = step.content + normalized;
          break;
        case NormalizerStep::Kind::kReplace:
          normalized =
              absl::StrReplaceAll(normalized, {{step.pattern, step.content}});
          break;
        default: {
          // ICU fails only without its data, which Create checked.
          auto n = NormalizeUnicode(normalized, FormOf(step.kind));
          if (n.ok()) normalized = *std::move(n);
        }
      }
    }
    if (spec_.byte_level_add_prefix_space && !normalized.empty() &&
        normalized[0] != ' ') {
      normalized = " " + normalized;
    }
    view = normalized;
  }
  std::vector<absl::string_view> pieces = {view};
  std::vector<absl::string_view> next;
  for (const auto& splitter : splitters_) {
    next.clear();
    for (absl::string_view piece : pieces) splitter->Split(piece, next);
    pieces.swap(next);
  }
  std::string mapped;
  for (absl::string_view piece : pieces) {
    if (spec_.byte_level) {
      mapped.clear();
      AppendByteLevel(piece, mapped);
      model_->EncodeWord(mapped, out);
    } else {
      model_->EncodeWord(piece, out);
    }
  }
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(
    absl::string_view text, const EncodeOptions& options) const {
  if (const size_t bad = FirstInvalidUtf8(text);
      bad != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("text is not valid UTF-8 at byte ", bad));
  }
  std::vector<int32_t> ids;
  if (options.add_special) {
    ids.insert(ids.end(), spec_.prefix_ids.begin(), spec_.prefix_ids.end());
  }
  std::vector<Segment> segments;
  added_->Split(text, options.parse_special, segments);
  for (const Segment& segment : segments) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
    } else {
      EncodeText(segment.text, ids);
    }
  }
  if (options.add_special) {
    ids.insert(ids.end(), spec_.suffix_ids.begin(), spec_.suffix_ids.end());
  }
  return ids;
}

std::string Tokenizer::TokenBytes(int32_t id,
                                  const DecodeOptions& options) const {
  if (id < 0 || id >= vocab_size()) return "";
  const std::string& text = spec_.tokens[id];
  switch (spec_.kinds[id]) {
    case TokenKind::kControl:
    case TokenKind::kUnknown:
      return options.skip_special ? "" : text;
    case TokenKind::kUserDefined:
      return text;
    default:
      break;
  }
  if (const int byte = model_->ByteOfToken(id);
      byte >= 0 &&
      (spec_.byte_fallback || spec_.kinds[id] == TokenKind::kByte)) {
    return std::string(1, static_cast<char>(byte));
  }
  std::string out;
  if (spec_.byte_level) {
    AppendFromByteLevel(text, out);
  } else if (spec_.decode_metaspace) {
    out = absl::StrReplaceAll(text, {{kMetaspace, " "}});
  } else {
    out = text;
  }
  return out;
}

std::string Tokenizer::Decode(absl::Span<const int32_t> ids,
                              const DecodeOptions& options) const {
  std::string bytes;
  for (int32_t id : ids) bytes += TokenBytes(id, options);
  if (spec_.decode_strip_leading_space && !bytes.empty() && bytes[0] == ' ') {
    bytes.erase(0, 1);
  }
  return ToValidUtf8(bytes);
}

absl::string_view Tokenizer::IdToToken(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return spec_.tokens[id];
}

int32_t Tokenizer::TokenToId(absl::string_view text) const {
  for (const AddedTokenSpec& t : spec_.added_tokens) {
    if (t.content == text) return t.id;
  }
  return model_->TokenToId(text);
}

TokenKind Tokenizer::Kind(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return TokenKind::kUnused;
  return spec_.kinds[id];
}

}  // namespace ferry::tokenizer
