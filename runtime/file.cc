#include "ferry/runtime/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ferry {

absl::Status ErrnoToStatus(int error_number, const std::string& context) {
  const std::string message =
      absl::StrCat(context, ": ", std::strerror(error_number));
  switch (error_number) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case EEXIST:
      return absl::AlreadyExistsError(message);
    case EINVAL:
    case EBADF:
    case EISDIR:
    case ENAMETOOLONG:
      return absl::InvalidArgumentError(message);
    case ENOSPC:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return absl::ResourceExhaustedError(message);
    case EINTR:
    case EAGAIN:
    case EBUSY:
      return absl::UnavailableError(message);
    case ECANCELED:
      return absl::CancelledError(message);
    case ENOSYS:
    case EOPNOTSUPP:
      return absl::UnimplementedError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::StatusOr<File> File::Open(const std::string& path, FileOptions options) {
  int flags = options.write ? O_RDWR : O_RDONLY;
  if (options.create) flags |= O_CREAT;
  if (options.truncate) flags |= O_TRUNC;
  if (options.direct) flags |= O_DIRECT;
  flags |= O_CLOEXEC;
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) {
    return ErrnoToStatus(errno,
                         absl::StrCat("cannot open '", path, "'",
                                      options.direct ? " (O_DIRECT)" : ""));
  }
  return File(fd, path, options.direct);
}

File::File(File&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      direct_(other.direct_) {}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    direct_ = other.direct_;
  }
  return *this;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<int64_t> File::Size() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("cannot stat '", path_, "'"));
  }
  return static_cast<int64_t>(st.st_size);
}

absl::Status File::DropCache() const {
  if (fd_ >= 0) ::fdatasync(fd_);
  const int rc = ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
  if (rc != 0) {
    return ErrnoToStatus(rc,
                         absl::StrCat("cannot drop cache of '", path_, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<AlignedBuffer> AlignedBuffer::Create(size_t size,
                                                    size_t alignment) {
  const size_t rounded = (size + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate ", size, " bytes aligned to ", alignment));
  }
  return AlignedBuffer(static_cast<std::byte*>(p), size);
}

void AlignedBuffer::Free::operator()(std::byte* p) const { std::free(p); }

}  // namespace ferry
