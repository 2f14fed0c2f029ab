// GgufSource: where the GGUF parser reads bytes from, a file (positional
// reads) or memory (tests, the fuzzer).
#ifndef FERRY_MODELS_GGUF_GGUF_SOURCE_H_
#define FERRY_MODELS_GGUF_GGUF_SOURCE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ferry/runtime/file.h"

namespace ferry::gguf {

// Thread-compatible.
class GgufSource {
 public:
  virtual ~GgufSource() = default;
  // The name errors use (the file's path).
  virtual const std::string& name() const = 0;
  virtual uint64_t size() const = 0;
  // Reads exactly dst.size() bytes at `offset`; DataLoss past the end.
  virtual absl::Status ReadAt(uint64_t offset, absl::Span<std::byte> dst) = 0;
};

// Bytes in memory. Does not take ownership of `bytes`, which must outlive
// the source.
class MemoryGgufSource : public GgufSource {
 public:
  MemoryGgufSource(absl::string_view bytes, std::string name)
      : bytes_(bytes), name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  uint64_t size() const override { return bytes_.size(); }
  absl::Status ReadAt(uint64_t offset, absl::Span<std::byte> dst) override;

 private:
  absl::string_view bytes_;
  std::string name_;
};

// An open file, read with pread. Does not take ownership of `file`, which
// must outlive the source; `size` is the file's size when opened.
class FileGgufSource : public GgufSource {
 public:
  FileGgufSource(const File& file, uint64_t size) : file_(file), size_(size) {}
  const std::string& name() const override { return file_.path(); }
  uint64_t size() const override { return size_; }
  absl::Status ReadAt(uint64_t offset, absl::Span<std::byte> dst) override;

 private:
  const File& file_;
  uint64_t size_;
};

}  // namespace ferry::gguf

#endif  // FERRY_MODELS_GGUF_GGUF_SOURCE_H_
