#include "ferry/tokenizer/byte_level.h"

#include <array>
#include <cstdint>

#include "ferry/tokenizer/utf8.h"

namespace ferry::tokenizer {
namespace {

struct Tables {
  std::array<std::string, 256> encoded;  // byte -> UTF-8 of its code point
  std::array<int16_t, 0x200> decoded;    // code point -> byte, or -1
};

const Tables& GetTables() {
  static const Tables* const tables = [] {
    auto* t = new Tables();
    t->decoded.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const int cp = printable ? b : next++;
      AppendUtf8(cp, t->encoded[b]);
      t->decoded[cp] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return *tables;
}

}  // namespace

void AppendByteLevel(absl::string_view bytes, std::string& out) {
  const Tables& t = GetTables();
  for (char c : bytes) out += t.encoded[static_cast<unsigned char>(c)];
}

void AppendFromByteLevel(absl::string_view text, std::string& out) {
  const Tables& t = GetTables();
  size_t pos = 0;
  while (pos < text.size()) {
    const DecodedChar d = DecodeUtf8(text, pos);
    if (d.code_point >= 0 && d.code_point < 0x200 &&
        t.decoded[d.code_point] >= 0) {
      out += static_cast<char>(t.decoded[d.code_point]);
    } else {
      out.append(text.data() + pos, d.length);
    }
    pos += d.length;
  }
}

}  // namespace ferry::tokenizer
