#include "ferry/models/gguf/gguf_tensor_reader.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/when_all.h"

namespace ferry::gguf {

absl::StatusOr<std::unique_ptr<GgufTensorReader>> GgufTensorReader::Open(
    const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(File file, OpenGgufForRead(path));
  FERRY_ASSIGN_OR_RETURN(int64_t size, file.Size());
  FileGgufSource source(file, static_cast<uint64_t>(size));
  FERRY_ASSIGN_OR_RETURN(GgufFile gguf, GgufFile::Parse(source));
  return std::unique_ptr<GgufTensorReader>(
      new GgufTensorReader(std::move(file), std::move(gguf)));
}

Task<absl::Status> GgufTensorReader::Read(IoReactor& io,
                                          const GgufTensorInfo& tensor,
                                          absl::Span<std::byte> dst) const {
  if (dst.size() != tensor.size) {
    co_return absl::InvalidArgumentError(
        absl::StrCat(gguf_.name(), ": tensor '", tensor.name, "' has ",
                     tensor.size, " bytes, destination has ", dst.size()));
  }
  co_return co_await ReadRange(io, tensor, 0, dst);
}

Task<absl::Status> GgufTensorReader::ReadTensors(
    IoReactor& io, absl::Span<const TensorDestination> reads, int max_in_flight,
    size_t chunk_bytes) const {
  struct Chunk {
    const GgufTensorInfo* tensor;
    uint64_t begin;
    absl::Span<std::byte> dst;
  };
  std::vector<Chunk> chunks;
  for (const TensorDestination& r : reads) {
    if (r.tensor == nullptr || gguf_.FindTensor(r.tensor->name) != r.tensor) {
      co_return absl::InvalidArgumentError(absl::StrCat(
          gguf_.name(), ": a destination names no tensor of this file"));
    }
    if (r.dst.size() != r.tensor->size) {
      co_return absl::InvalidArgumentError(absl::StrCat(
          gguf_.name(), ": tensor '", r.tensor->name, "' has ", r.tensor->size,
          " bytes, destination has ", r.dst.size()));
    }
    for (uint64_t at = 0; at < r.tensor->size; at += chunk_bytes) {
      const size_t n = static_cast<size_t>(
          std::min<uint64_t>(chunk_bytes, r.tensor->size - at));
      chunks.push_back({r.tensor, at, r.dst.subspan(at, n)});
    }
  }
  const size_t window = static_cast<size_t>(std::max(1, max_in_flight));
  for (size_t first = 0; first < chunks.size(); first += window) {
    std::vector<Task<absl::Status>> batch;
    for (size_t i = first; i < std::min(chunks.size(), first + window); ++i) {
      batch.push_back(
          ReadRange(io, *chunks[i].tensor, chunks[i].begin, chunks[i].dst));
    }
    FERRY_CO_RETURN_IF_ERROR(co_await WhenAllOk(std::move(batch)));
  }
  co_return absl::OkStatus();
}

Task<absl::Status> GgufTensorReader::ReadRange(
    IoReactor& io, const GgufTensorInfo& tensor, uint64_t begin,
    absl::Span<std::byte> dst) const {
  if (gguf_.FindTensor(tensor.name) != &tensor) {
    co_return absl::InvalidArgumentError(
        absl::StrCat(gguf_.name(), ": tensor '", tensor.name,
                     "' does not belong to this file"));
  }
  if (begin > tensor.size || dst.size() > tensor.size - begin) {
    co_return absl::OutOfRangeError(absl::StrCat(
        gguf_.name(), ": bytes [", begin, ", ", begin + dst.size(),
        ") are outside tensor '", tensor.name, "' of ", tensor.size, " bytes"));
  }
  if (dst.empty()) co_return absl::OkStatus();
  // Parse checked that the tensor lies inside the data section.
  const uint64_t offset = gguf_.data_offset() + tensor.offset + begin;
  co_return co_await io.Read(file_, dst, static_cast<int64_t>(offset));
}

}  // namespace ferry::gguf
