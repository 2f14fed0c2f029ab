// File: an owned file descriptor that remembers its path, so every I/O error
// can name the file. AlignedBuffer: heap memory aligned for O_DIRECT.
#ifndef FERRY_RUNTIME_FILE_H_
#define FERRY_RUNTIME_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ferry {

// Turns an errno value into a status naming `context`.
absl::Status ErrnoToStatus(int error_number, const std::string& context);

struct FileOptions {
  bool write = false;     // Open read-write (default read-only).
  bool create = false;    // Create if missing (mode 0644).
  bool truncate = false;  // Truncate to zero length.
  // Bypass the page cache. Buffers, offsets and lengths must then be
  // multiples of kDirectIoAlignment.
  bool direct = false;
};

// Alignment that O_DIRECT transfers need on every Linux filesystem ferry
// targets (logical block sizes are at most 4 KiB).
inline constexpr size_t kDirectIoAlignment = 4096;

// Move-only; thread-safe for concurrent positional I/O.
class File {
 public:
  static absl::StatusOr<File> Open(const std::string& path,
                                   FileOptions options = {});

  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  ~File();

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  bool direct() const { return direct_; }

  absl::StatusOr<int64_t> Size() const;
  // Drops the file's cached pages (for cold-read measurements).
  absl::Status DropCache() const;

 private:
  File(int fd, std::string path, bool direct)
      : fd_(fd), path_(std::move(path)), direct_(direct) {}

  int fd_ = -1;
  std::string path_;
  bool direct_ = false;
};

// Heap memory aligned to `alignment` bytes (default: O_DIRECT's).
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Fails with ResourceExhausted if the memory cannot be had.
  static absl::StatusOr<AlignedBuffer> Create(
      size_t size, size_t alignment = kDirectIoAlignment);

  std::byte* data() { return data_.get(); }
  const std::byte* data() const { return data_.get(); }
  size_t size() const { return size_; }
  absl::Span<std::byte> span() { return {data_.get(), size_}; }

 private:
  struct Free {
    void operator()(std::byte* p) const;
  };
  AlignedBuffer(std::byte* data, size_t size) : data_(data), size_(size) {}

  std::unique_ptr<std::byte, Free> data_;
  size_t size_ = 0;
};

}  // namespace ferry

#endif  // FERRY_RUNTIME_FILE_H_
