// RegexSplitter: splits text around the matches of a Unicode regex (PCRE2,
// UTF + UCP mode, JIT-compiled), as Hugging Face's Split pre-tokenizer and
// llama.cpp's pre-tokenizer regexes do. PCRE2 gives \p{L}, \p{N}, (?i:),
// lookahead and the Unicode tables, so the published patterns are used
// verbatim.
#ifndef FERRY_TOKENIZER_REGEX_SPLITTER_H_
#define FERRY_TOKENIZER_REGEX_SPLITTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ferry::tokenizer {

// What happens to the matches (HF's SplitDelimiterBehavior).
enum class SplitBehavior {
  kIsolated,            // Matches and the text between them are pieces.
  kRemoved,             // Only the text between matches.
  kMergedWithPrevious,  // Each match ends the piece before it.
  kMergedWithNext,      // Each match starts the piece after it.
};

// The GPT-2 pattern (HF ByteLevel's use_regex, llama.cpp "gpt2"/"smollm").
inline constexpr char kGpt2Pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
    "\\s+(?!\\S)|\\s+";

// Thread-safe (the compiled pattern is shared; each call has its own match
// state).
class RegexSplitter {
 public:
  // InvalidArgument naming the pattern and PCRE2's message if it does not
  // compile.
  static absl::StatusOr<std::unique_ptr<RegexSplitter>> Create(
      const std::string& pattern, SplitBehavior behavior);
  ~RegexSplitter();

  // Appends the pieces of `text` to `out` (views into `text`; empty pieces
  // are dropped). Text that is not valid UTF-8 is one piece, unsplit.
  void Split(absl::string_view text, std::vector<absl::string_view>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  RegexSplitter(std::string pattern, SplitBehavior behavior,
                std::unique_ptr<Compiled> compiled);

  std::string pattern_;
  SplitBehavior behavior_;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace ferry::tokenizer

#endif  // FERRY_TOKENIZER_REGEX_SPLITTER_H_
