#include "ferry/tokenizer/utf8.h"

namespace ferry::tokenizer {
namespace {

// Valid ranges of the second byte given the first (Unicode Table 3-7);
// later continuation bytes are always 0x80-0xBF.
bool SecondByteOk(unsigned char lead, unsigned char b) {
  switch (lead) {
    case 0xE0:
      return b >= 0xA0 && b <= 0xBF;
    case 0xED:
      return b >= 0x80 && b <= 0x9F;
    case 0xF0:
      return b >= 0x90 && b <= 0xBF;
    case 0xF4:
      return b >= 0x80 && b <= 0x8F;
    default:
      return b >= 0x80 && b <= 0xBF;
  }
}

// Sequence length announced by a lead byte, 0 if it cannot lead.
int LeadLength(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}

// Bytes of s[pos...] that form a valid prefix of one sequence (at most the
// announced length); `complete` tells whether all of it is there.
int ValidPrefix(absl::string_view s, size_t pos, bool& complete) {
  const auto lead = static_cast<unsigned char>(s[pos]);
  const int length = LeadLength(lead);
  complete = false;
  if (length == 0) return 0;
  if (length == 1) {
    complete = true;
    return 1;
  }
  int have = 1;
  for (; have < length && pos + have < s.size(); ++have) {
    const auto b = static_cast<unsigned char>(s[pos + have]);
    const bool ok = have == 1 ? SecondByteOk(lead, b) : (b & 0xC0) == 0x80;
    if (!ok) return have;
  }
  complete = have == length;
  return have;
}

}  // namespace

DecodedChar DecodeUtf8(absl::string_view s, size_t pos) {
  bool complete = false;
  const int n = ValidPrefix(s, pos, complete);
  if (!complete) return {-1, 1};
  const auto c0 = static_cast<unsigned char>(s[pos]);
  if (n == 1) return {c0, 1};
  int32_t cp = c0 & (0x7F >> n);
  for (int i = 1; i < n; ++i) {
    cp = (cp << 6) | (static_cast<unsigned char>(s[pos + i]) & 0x3F);
  }
  return {cp, n};
}

bool IsValidUtf8(absl::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (static_cast<unsigned char>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    bool complete = false;
    const int n = ValidPrefix(s, pos, complete);
    if (!complete) return false;
    pos += n;
  }
  return true;
}

void AppendUtf8(int32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

size_t CompleteUtf8PrefixLength(absl::string_view s) {
  // Only the last 3 bytes can start an unfinished sequence.
  const size_t from = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t pos = from; pos < s.size(); ++pos) {
    if ((static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) continue;
    bool complete = false;
    const int n = ValidPrefix(s, pos, complete);
    // A valid but cut-off sequence running to the end is held back.
    if (!complete && n > 0 && pos + n == s.size()) return pos;
  }
  return s.size();
}

std::string ToValidUtf8(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    bool complete = false;
    const int n = ValidPrefix(s, pos, complete);
    if (complete) {
      out.append(s.data() + pos, n);
      pos += n;
    } else {
      // A maximal invalid subsequence: the valid-so-far prefix, or one byte.
      out += kReplacementChar;
      pos += n > 0 ? n : 1;
    }
  }
  return out;
}

}  // namespace ferry::tokenizer
