// Opens a safetensors file: checks it is a regular file, reads the 8-byte
// header length and the JSON header (safetensors_header.h) and keeps the
// file open for the caller's reads of tensor data, which start at
// data_base() plus a tensor's `begin`.
#ifndef FERRY_MODELS_SAFETENSORS_SAFETENSORS_FILE_H_
#define FERRY_MODELS_SAFETENSORS_SAFETENSORS_FILE_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "ferry/models/safetensors/safetensors_header.h"
#include "ferry/runtime/file.h"

namespace ferry::safetensors {

// Thread-compatible. Owns the open file.
class SafetensorsFile {
 public:
  // Refuses directories, FIFOs and other non-regular files (open() on a
  // FIFO would block), files too short for their header, headers over
  // kMaxSafetensorsHeader and every error ParseSafetensorsHeader finds.
  // Errors name `path`.
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return path_; }
  const File& file() const { return file_; }
  const SafetensorsHeader& header() const { return header_; }
  // File offset of the data section.
  uint64_t data_base() const { return data_base_; }

 private:
  SafetensorsFile(std::string path, File file, SafetensorsHeader header,
                  uint64_t data_base)
      : path_(std::move(path)),
        file_(std::move(file)),
        header_(std::move(header)),
        data_base_(data_base) {}

  std::string path_;
  File file_;
  SafetensorsHeader header_;
  uint64_t data_base_ = 0;
};

}  // namespace ferry::safetensors

#endif  // FERRY_MODELS_SAFETENSORS_SAFETENSORS_FILE_H_
