#include "ferry/backends/remote/worker/internal/buffer_checks.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::remote::worker_internal {

absl::StatusOr<Target> ResolveTarget(BufferRec& b, const Message& m) {
  Target target;
  if (m.blob.empty()) {
    if (b.weights && m.cmd() != Cmd::kMemset) {
      return absl::InvalidArgumentError(absl::StrCat(
          CmdName(m.cmd()), ": buffer ", b.id,
          " holds weights in the device's own layout: name the tensor"));
    }
    target.tensor = &b.whole;
    target.offset = m.offset;
    return target;
  }
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<WireTensorRef> ref,
                         DecodeTensorRef(m.blob, b.buffer.get()));
  const uint64_t bytes = static_cast<uint64_t>(ref->tensor.NumBytes());
  if (m.offset < ref->offset || m.offset - ref->offset > bytes ||
      m.size > bytes - (m.offset - ref->offset)) {
    return absl::OutOfRangeError(absl::StrCat(
        CmdName(m.cmd()), ": bytes [", m.offset, ", +", m.size, ") of buffer ",
        b.id, " are not inside '", ref->tensor.name, "' at ", ref->offset, " (",
        bytes, " bytes)"));
  }
  target.offset = m.offset - ref->offset;
  target.ref = std::move(ref);
  target.tensor = &target.ref->tensor;
  return target;
}

absl::Status RefuseWeights(const BufferRec& b, absl::string_view what) {
  if (!b.weights) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": buffer ", b.id,
                   " holds weights in the device's own layout (copy them "
                   "through their logical bytes)"));
}

absl::Status RangeError(absl::string_view what, uint64_t offset, uint64_t size,
                        const BufferRec& b) {
  return absl::OutOfRangeError(absl::StrCat(
      what, ": bytes [", offset, ", +", size, ") are outside buffer ", b.id,
      " of ", b.buffer->size(), " bytes"));
}

}  // namespace ferry::remote::worker_internal
