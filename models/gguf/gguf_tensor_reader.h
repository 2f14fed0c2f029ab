// GgufTensorReader: an open GGUF file whose tensor bytes are read through
// ferry's IoReactor (io_uring, or its pread fallback) into caller memory:
// host tensors directly, device tensors through the caller's staging
// buffers, a chunk at a time (ReadRange).
//
// Use:
//   FERRY_ASSIGN_OR_RETURN(auto reader, GgufTensorReader::Open(path));
//   const GgufTensorInfo* t = reader->gguf().FindTensor("output_norm.weight");
//   co_await reader->Read(io, *t, dst);   // dst.size() == t->size
#ifndef FERRY_MODELS_GGUF_GGUF_TENSOR_READER_H_
#define FERRY_MODELS_GGUF_GGUF_TENSOR_READER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ferry/models/gguf/gguf_file.h"
#include "ferry/runtime/file.h"
#include "ferry/runtime/io_reactor.h"
#include "ferry/runtime/task.h"

namespace ferry::gguf {

// One tensor and where its bytes go (exactly tensor->size bytes).
struct TensorDestination {
  const GgufTensorInfo* tensor = nullptr;
  absl::Span<std::byte> dst;
};

// Thread-safe: reads may run concurrently.
class GgufTensorReader {
 public:
  // Opens `path` and parses (validates) its header.
  static absl::StatusOr<std::unique_ptr<GgufTensorReader>> Open(
      const std::string& path);

  const GgufFile& gguf() const { return gguf_; }
  const File& file() const { return file_; }

  // Reads the whole of `tensor` into `dst`, which must be exactly
  // tensor.size bytes (InvalidArgument naming the tensor otherwise).
  // `tensor` must come from gguf(). Does not take ownership of `dst`.
  Task<absl::Status> Read(IoReactor& io, const GgufTensorInfo& tensor,
                          absl::Span<std::byte> dst) const;

  // Reads many tensors, cut into chunks of at most `chunk_bytes`, keeping up
  // to `max_in_flight` chunk reads queued at once (io_uring batches them).
  // Checks every destination first; on error returns the first failure
  // (the other destinations may be partly written).
  Task<absl::Status> ReadTensors(IoReactor& io,
                                 absl::Span<const TensorDestination> reads,
                                 int max_in_flight = 32,
                                 size_t chunk_bytes = size_t{1} << 20) const;

  // Reads bytes [begin, begin + dst.size()) of `tensor` into `dst`;
  // OutOfRange naming the tensor if that passes its end.
  Task<absl::Status> ReadRange(IoReactor& io, const GgufTensorInfo& tensor,
                               uint64_t begin, absl::Span<std::byte> dst) const;

 private:
  GgufTensorReader(File file, GgufFile gguf)
      : file_(std::move(file)), gguf_(std::move(gguf)) {}

  File file_;
  GgufFile gguf_;
};

}  // namespace ferry::gguf

#endif  // FERRY_MODELS_GGUF_GGUF_TENSOR_READER_H_
