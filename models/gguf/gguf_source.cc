#include "ferry/models/gguf/gguf_source.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ferry::gguf {

absl::Status MemoryGgufSource::ReadAt(uint64_t offset,
                                      absl::Span<std::byte> dst) {
  if (offset > bytes_.size() || dst.size() > bytes_.size() - offset) {
    return absl::DataLossError(
        absl::StrCat(name_, ": read of ", dst.size(), " bytes at offset ",
                     offset, " is past the end (", bytes_.size(), " bytes)"));
  }
  if (!dst.empty()) std::memcpy(dst.data(), bytes_.data() + offset, dst.size());
  return absl::OkStatus();
}

absl::Status FileGgufSource::ReadAt(uint64_t offset,
                                    absl::Span<std::byte> dst) {
  size_t done = 0;
  while (done < dst.size()) {
    const ssize_t n = ::pread(file_.fd(), dst.data() + done, dst.size() - done,
                              static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(
          errno, absl::StrCat(file_.path(), ": read at ", offset + done));
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrCat(
          file_.path(), ": unexpected end of file at offset ", offset + done));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace ferry::gguf
