#include "ferry/backends/backend.h"

#include "absl/strings/str_cat.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {

absl::Status Backend::EnqueueCopyTensor(Backend& src_backend, const Tensor& src,
                                        Tensor& dst) {
  FERRY_RETURN_IF_ERROR(CheckCopySizes(src, dst));
  const size_t bytes = static_cast<size_t>(src.NumBytes());
  if (src.buffer == nullptr || dst.buffer == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "copy from '", src.name, "' to '", dst.name, "': not placed"));
  }
  if (src.buffer->is_host()) {
    // Upload on this stream once the producer has written the source.
    FERRY_RETURN_IF_ERROR(EnqueueWait(src_backend.Record()));
    return EnqueueSetTensor(dst, src.data, 0, bytes);
  }
  if (dst.buffer->is_host()) {
    // Download on the producer's stream once this stream no longer reads
    // dst's old contents; this stream then waits for the download.
    FERRY_RETURN_IF_ERROR(src_backend.EnqueueWait(Record()));
    FERRY_RETURN_IF_ERROR(
        src_backend.EnqueueGetTensor(src, dst.data, 0, bytes));
    return EnqueueWait(src_backend.Record());
  }
  return absl::UnimplementedError(
      absl::StrCat(name(), " has no async copy from ", src_backend.name()));
}

absl::Status Backend::CheckCopySizes(const Tensor& src, const Tensor& dst) {
  if (src.NumBytes() == dst.NumBytes()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("copy from '", src.name, "' ", src.ShapeString(), " to '",
                   dst.name, "' ", dst.ShapeString(), ": byte sizes differ"));
}

Task<absl::Status> Backend::ComputeAsync(NodeSpan nodes) {
  FERRY_CO_RETURN_IF_ERROR(EnqueueCompute(nodes));
  co_return co_await Record();
}

absl::Status Backend::Compute(NodeSpan nodes) {
  FERRY_RETURN_IF_ERROR(EnqueueCompute(nodes));
  return Synchronize();
}

}  // namespace ferry
