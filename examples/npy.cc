#include "ferry/examples/npy.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ferry::examples {

absl::Status EncodeNpy(absl::Span<const float> values,
                       absl::Span<const int64_t> shape, std::string* out) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (n != static_cast<int64_t>(values.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("npy: shape (", absl::StrJoin(shape, ", "), ") holds ", n,
                     " values, got ", values.size()));
  }
  std::string dims = absl::StrJoin(shape, ", ");
  if (shape.size() == 1) dims += ",";
  std::string header = absl::StrCat("{'descr': '<f4', 'fortran_order': False, ",
                                    "'shape': (", dims, "), }");
  // Magic (6) + version (2) + length (2) + header + '\n', padded to 64.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  out->assign("\x93NUMPY\x01\x00", 8);
  out->push_back(static_cast<char>(header.size() & 0xff));
  out->push_back(static_cast<char>(header.size() >> 8));
  out->append(header);
  out->append(reinterpret_cast<const char*>(values.data()),
              values.size() * sizeof(float));
  return absl::OkStatus();
}

absl::Status WriteNpy(const std::string& path, absl::Span<const float> values,
                      absl::Span<const int64_t> shape) {
  std::string bytes;
  if (absl::Status s = EncodeNpy(values, shape, &bytes); !s.ok()) return s;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    return absl::UnavailableError(
        absl::StrCat("writing ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace ferry::examples
