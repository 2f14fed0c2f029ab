#include "ferry/tokenizer/added_tokens.h"

#include <algorithm>

namespace ferry::tokenizer {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Letters, digits, '_' and any non-ASCII byte count as word characters for
// single_word tokens.
bool IsWordByte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x80 || (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') ||
         (u >= 'A' && u <= 'Z') || u == '_';
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedTokenSpec> tokens)
    : tokens_(std::move(tokens)) {
  for (int i = 0; i < static_cast<int>(tokens_.size()); ++i) {
    if (tokens_[i].content.empty()) continue;
    by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(
        i);
  }
  for (auto& list : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [&](int a, int b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
}

int AddedTokenMatcher::MatchAt(absl::string_view text, size_t pos,
                               bool parse_special) const {
  for (int i : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
    const AddedTokenSpec& t = tokens_[i];
    if (t.special && !parse_special) continue;
    if (text.compare(pos, t.content.size(), t.content) != 0) continue;
    if (t.single_word) {
      const size_t end = pos + t.content.size();
      if ((pos > 0 && IsWordByte(text[pos - 1])) ||
          (end < text.size() && IsWordByte(text[end]))) {
        continue;
      }
    }
    return i;
  }
  return -1;
}

void AddedTokenMatcher::Split(absl::string_view text, bool parse_special,
                              std::vector<Segment>& out) const {
  if (tokens_.empty()) {
    if (!text.empty()) out.push_back({text, -1});
    return;
  }
  size_t piece = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const int i = MatchAt(text, pos, parse_special);
    if (i < 0) {
      ++pos;
      continue;
    }
    const AddedTokenSpec& t = tokens_[i];
    size_t before_end = pos;
    if (t.lstrip) {
      while (before_end > piece && IsSpace(text[before_end - 1])) --before_end;
    }
    if (before_end > piece) {
      out.push_back({text.substr(piece, before_end - piece), -1});
    }
    out.push_back({text.substr(pos, t.content.size()), t.id});
    pos += t.content.size();
    if (t.rstrip) {
      while (pos < text.size() && IsSpace(text[pos])) ++pos;
    }
    piece = pos;
  }
  if (piece < text.size()) out.push_back({text.substr(piece), -1});
}

}  // namespace ferry::tokenizer
