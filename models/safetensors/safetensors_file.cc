#include "ferry/models/safetensors/safetensors_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::safetensors {

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  // A FIFO would block open() until a writer came; a directory is no file.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is ", kind, "; expected a safetensors file"));
  }
  FERRY_ASSIGN_OR_RETURN(File file, File::Open(path));
  FERRY_ASSIGN_OR_RETURN(int64_t size, file.Size());
  uint8_t len_bytes[8];
  if (size < 8 || ::pread(file.fd(), len_bytes, 8, 0) != 8) {
    return absl::DataLossError(
        absl::StrCat(path, ": too short for a safetensors header"));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kMaxSafetensorsHeader) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": header of ", n, " bytes exceeds the limit of ",
                     kMaxSafetensorsHeader));
  }
  if (n > static_cast<uint64_t>(size) - 8) {
    return absl::DataLossError(absl::StrCat(path, ": header of ", n,
                                            " bytes but the file has ", size,
                                            " (truncated?)"));
  }
  std::string json(n, '\0');
  if (n > 0 &&
      ::pread(file.fd(), json.data(), n, 8) != static_cast<ssize_t>(n)) {
    return absl::DataLossError(absl::StrCat(path, ": short header read"));
  }
  const uint64_t data_base = 8 + n;
  FERRY_ASSIGN_OR_RETURN(
      SafetensorsHeader header,
      ParseSafetensorsHeader(json, static_cast<uint64_t>(size) - data_base,
                             path));
  return SafetensorsFile(path, std::move(file), std::move(header), data_base);
}

}  // namespace ferry::safetensors
