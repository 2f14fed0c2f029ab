#include "ferry/tokenizer/regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"
#include "ferry/tokenizer/utf8.h"

namespace ferry::tokenizer {

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

RegexSplitter::RegexSplitter(std::string pattern, SplitBehavior behavior,
                             std::unique_ptr<Compiled> compiled)
    : pattern_(std::move(pattern)),
      behavior_(behavior),
      compiled_(std::move(compiled)) {}

RegexSplitter::~RegexSplitter() = default;

absl::StatusOr<std::unique_ptr<RegexSplitter>> RegexSplitter::Create(
    const std::string& pattern, SplitBehavior behavior) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  auto compiled = std::make_unique<Compiled>();
  compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()),
                                 pattern.size(), PCRE2_UTF | PCRE2_UCP, &error,
                                 &offset, nullptr);
  if (compiled->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(
        absl::StrCat("regex '", pattern, "' does not compile at offset ",
                     offset, ": ", reinterpret_cast<const char*>(message)));
  }
  compiled->jit = pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE) == 0;
  return std::unique_ptr<RegexSplitter>(
      new RegexSplitter(pattern, behavior, std::move(compiled)));
}

void RegexSplitter::Split(absl::string_view text,
                          std::vector<absl::string_view>& out) const {
  // Checked once here: the JIT does not check, and the interpreter would
  // check the rest of the subject on every call (quadratic).
  if (!IsValidUtf8(text)) {
    if (!text.empty()) out.push_back(text);
    return;
  }
  pcre2_match_data* match =
      pcre2_match_data_create_from_pattern(compiled_->code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;  // Where the next search starts.
  size_t piece = 0;  // Start of the pending piece.
  auto emit = [&](size_t from, size_t to) {
    if (to > from) out.push_back(text.substr(from, to - from));
  };
  while (start <= text.size()) {
    const int rc = compiled_->jit
                       ? pcre2_jit_match(compiled_->code, subject, text.size(),
                                         start, 0, match, nullptr)
                       : pcre2_match(compiled_->code, subject, text.size(),
                                     start, PCRE2_NO_UTF_CHECK, match, nullptr);
    if (rc < 0) break;  // No more matches.
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match);
    const size_t m_begin = ov[0], m_end = ov[1];
    switch (behavior_) {
      case SplitBehavior::kIsolated:
        emit(piece, m_begin);
        emit(m_begin, m_end);
        piece = m_end;
        break;
      case SplitBehavior::kRemoved:
        emit(piece, m_begin);
        piece = m_end;
        break;
      case SplitBehavior::kMergedWithPrevious:
        emit(piece, m_end);
        piece = m_end;
        break;
      case SplitBehavior::kMergedWithNext:
        emit(piece, m_begin);
        piece = m_begin;
        break;
    }
    if (m_end == m_begin) {
      // Empty match: step over one character.
      if (m_end >= text.size()) break;
      size_t next = m_end + 1;
      while (next < text.size() &&
             (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80) {
        ++next;
      }
      start = next;
    } else {
      start = m_end;
    }
  }
  emit(piece, text.size());
  pcre2_match_data_free(match);
}

}  // namespace ferry::tokenizer
