#include "ferry/models/safetensors/safetensors_header.h"

#include <algorithm>
#include <cctype>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::safetensors {

std::string SafetensorsShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

namespace {

// A recursive-descent parser for the JSON subset safetensors headers use
// (objects, arrays, strings, integers; other values are skipped).
class JsonParser {
 public:
  JsonParser(absl::string_view text, const std::string& file)
      : text_(text), file_(file) {}

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(
        file_, ": bad safetensors header at byte ", pos_, ": ", what));
  }

  void SkipSpace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\r' ||
            text_[pos_] == '\t')) {
      ++pos_;
    }
  }
  bool Peek(char c) {
    SkipSpace();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  absl::Status Expect(char c) {
    if (!Peek(c))
      return Error(absl::StrCat("expected '", std::string(1, c), "'"));
    ++pos_;
    return absl::OkStatus();
  }
  bool AtEnd() {
    SkipSpace();
    return pos_ == text_.size();
  }

  absl::StatusOr<std::string> String() {
    FERRY_RETURN_IF_ERROR(Expect('"'));
    std::string out;
    while (pos_ < text_.size()) {
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) {
        return Error("control character in string");
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) break;
      const char e = text_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          if (text_.size() - pos_ < 4) return Error("short \\u escape");
          uint32_t cp = 0;
          for (int i = 0; i < 4; ++i) {
            const char h = text_[pos_++];
            cp <<= 4;
            if (h >= '0' && h <= '9') {
              cp |= h - '0';
            } else if (h >= 'a' && h <= 'f') {
              cp |= h - 'a' + 10;
            } else if (h >= 'A' && h <= 'F') {
              cp |= h - 'A' + 10;
            } else {
              return Error("bad \\u escape");
            }
          }
          // UTF-8 (surrogates are kept as-is; names are compared bytewise).
          if (cp < 0x80) {
            out += static_cast<char>(cp);
          } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default:
          return Error("bad escape");
      }
    }
    return Error("unterminated string");
  }

  // A non-negative integer below 2^63.
  absl::StatusOr<uint64_t> Unsigned() {
    SkipSpace();
    const size_t start = pos_;
    uint64_t v = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      if (v > (uint64_t{1} << 62) / 5) return Error("integer too large");
      v = v * 10 + static_cast<uint64_t>(text_[pos_++] - '0');
    }
    if (pos_ == start) return Error("expected a non-negative integer");
    if (pos_ < text_.size() &&
        (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E')) {
      return Error("expected an integer");
    }
    return v;
  }

  absl::StatusOr<std::vector<uint64_t>> UnsignedArray() {
    FERRY_RETURN_IF_ERROR(Expect('['));
    std::vector<uint64_t> out;
    if (Peek(']')) {
      ++pos_;
      return out;
    }
    while (true) {
      FERRY_ASSIGN_OR_RETURN(uint64_t v, Unsigned());
      out.push_back(v);
      if (out.size() > 64) return Error("array too long");
      if (Peek(']')) {
        ++pos_;
        return out;
      }
      FERRY_RETURN_IF_ERROR(Expect(','));
    }
  }

  // Skips any JSON value.
  absl::Status SkipValue(int depth = 0) {
    if (depth > 32) return Error("nested too deeply");
    SkipSpace();
    if (pos_ >= text_.size()) return Error("unexpected end");
    const char c = text_[pos_];
    if (c == '"') return String().status();
    if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      ++pos_;
      if (Peek(close)) {
        ++pos_;
        return absl::OkStatus();
      }
      while (true) {
        if (c == '{') {
          FERRY_RETURN_IF_ERROR(String().status());
          FERRY_RETURN_IF_ERROR(Expect(':'));
        }
        FERRY_RETURN_IF_ERROR(SkipValue(depth + 1));
        if (Peek(close)) {
          ++pos_;
          return absl::OkStatus();
        }
        FERRY_RETURN_IF_ERROR(Expect(','));
      }
    }
    // Numbers and literals.
    const size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) ||
            text_[pos_] == '-' || text_[pos_] == '+' || text_[pos_] == '.')) {
      ++pos_;
    }
    if (pos_ == start) return Error("expected a value");
    return absl::OkStatus();
  }

 private:
  absl::string_view text_;
  const std::string& file_;
  size_t pos_ = 0;
};

absl::Status ParseTensor(JsonParser& p, const std::string& name,
                         SafetensorInfo& info, const std::string& file) {
  auto tensor_error = [&](absl::Status s) {
    return absl::Status(s.code(),
                        absl::StrCat(s.message(), " (tensor '", name, "')"));
  };
  FERRY_RETURN_IF_ERROR(p.Expect('{'));
  bool has_dtype = false, has_shape = false, has_offsets = false;
  if (!p.Peek('}')) {
    while (true) {
      auto key = p.String();
      if (!key.ok()) return tensor_error(key.status());
      if (absl::Status s = p.Expect(':'); !s.ok()) return tensor_error(s);
      if (*key == "dtype") {
        auto dtype = p.String();
        if (!dtype.ok()) return tensor_error(dtype.status());
        info.dtype = *dtype;
        has_dtype = true;
      } else if (*key == "shape" || *key == "data_offsets") {
        auto values = p.UnsignedArray();
        if (!values.ok()) return tensor_error(values.status());
        if (*key == "shape") {
          info.shape.assign(values->begin(), values->end());
          has_shape = true;
        } else {
          if (values->size() != 2) {
            return absl::InvalidArgumentError(absl::StrCat(
                file, ": tensor '", name, "': data_offsets needs 2 values"));
          }
          info.begin = (*values)[0];
          info.end = (*values)[1];
          has_offsets = true;
        }
      } else if (absl::Status s = p.SkipValue(1); !s.ok()) {
        return tensor_error(s);
      }
      if (p.Peek('}')) break;
      if (absl::Status s = p.Expect(','); !s.ok()) return tensor_error(s);
    }
  }
  FERRY_RETURN_IF_ERROR(p.Expect('}'));
  if (!has_dtype || !has_shape || !has_offsets) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": tensor '", name, "' needs dtype, shape and data_offsets"));
  }
  return absl::OkStatus();
}

}  // namespace

int SafetensorsDTypeSize(absl::string_view dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") {
    return 2;
  }
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" ||
      dtype == "F8_E5M2") {
    return 1;
  }
  return 0;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(
    absl::string_view json, uint64_t data_size, const std::string& file) {
  JsonParser p(json, file);
  SafetensorsHeader header;
  FERRY_RETURN_IF_ERROR(p.Expect('{'));
  if (!p.Peek('}')) {
    while (true) {
      FERRY_ASSIGN_OR_RETURN(std::string key, p.String());
      FERRY_RETURN_IF_ERROR(p.Expect(':'));
      if (key == "__metadata__") {
        FERRY_RETURN_IF_ERROR(p.Expect('{'));
        if (!p.Peek('}')) {
          while (true) {
            FERRY_ASSIGN_OR_RETURN(std::string k, p.String());
            FERRY_RETURN_IF_ERROR(p.Expect(':'));
            FERRY_ASSIGN_OR_RETURN(std::string v, p.String());
            header.metadata[k] = std::move(v);
            if (p.Peek('}')) break;
            FERRY_RETURN_IF_ERROR(p.Expect(','));
          }
        }
        FERRY_RETURN_IF_ERROR(p.Expect('}'));
      } else {
        if (header.tensors.count(key) != 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(file, ": tensor '", key, "' appears twice"));
        }
        SafetensorInfo info;
        if (absl::Status s = ParseTensor(p, key, info, file); !s.ok()) {
          if (absl::StrContains(s.message(), "tensor '")) return s;
          return absl::Status(
              s.code(), absl::StrCat(s.message(), " (tensor '", key, "')"));
        }
        header.tensors.emplace(std::move(key), std::move(info));
      }
      if (p.Peek('}')) break;
      FERRY_RETURN_IF_ERROR(p.Expect(','));
    }
  }
  FERRY_RETURN_IF_ERROR(p.Expect('}'));
  if (!p.AtEnd()) return p.Error("trailing bytes after the header object");

  for (const auto& [name, info] : header.tensors) {
    const int elem = SafetensorsDTypeSize(info.dtype);
    if (elem == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          file, ": tensor '", name, "' has unknown dtype '", info.dtype, "'"));
    }
    uint64_t bytes = static_cast<uint64_t>(elem);
    for (int64_t d : info.shape) {
      const uint64_t ud = static_cast<uint64_t>(d);
      if (ud != 0 && bytes > (uint64_t{1} << 62) / ud) {
        return absl::InvalidArgumentError(
            absl::StrCat(file, ": tensor '", name, "' shape overflows"));
      }
      bytes *= ud;
    }
    if (info.begin > info.end || info.end > data_size) {
      return absl::DataLossError(
          absl::StrCat(file, ": tensor '", name, "' data_offsets [", info.begin,
                       ", ", info.end, ") outside the data section (",
                       data_size, " bytes; file truncated?)"));
    }
    if (info.end - info.begin != bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          file, ": tensor '", name, "' has ", info.end - info.begin,
          " bytes but dtype ", info.dtype, " and shape ",
          SafetensorsShapeString(info.shape), " need ", bytes));
    }
  }
  // Hugging Face's rules: sorted by offset, the tensors tile the data
  // section exactly, from 0 to its end, without gaps, overlaps (two
  // tensors sharing bytes) or trailing bytes.
  std::vector<std::pair<const std::string*, const SafetensorInfo*>> order;
  for (const auto& [name, info] : header.tensors) {
    order.emplace_back(&name, &info);
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.second->begin, a.second->end) <
           std::make_pair(b.second->begin, b.second->end);
  });
  uint64_t covered = 0;
  const std::string* previous = nullptr;
  for (const auto& [name, info] : order) {
    if (info->begin != covered) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": tensor '", *name, "' data_offsets [",
                       info->begin, ", ", info->end, ") ",
                       info->begin < covered
                           ? absl::StrCat("overlap tensor '", *previous,
                                          "' (ending at ", covered, ")")
                           : absl::StrCat("leave a gap after byte ", covered),
                       "; tensors must tile the data section"));
    }
    covered = info->end;
    previous = name;
  }
  if (covered != data_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": ", data_size - covered, " bytes after the last tensor (at ",
        covered, " of a ", data_size,
        "-byte data section); tensors must tile the data section"));
  }
  return header;
}

}  // namespace ferry::safetensors
