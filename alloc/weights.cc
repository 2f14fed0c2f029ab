#include "ferry/alloc/weights.h"

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ferry {

absl::StatusOr<std::vector<std::unique_ptr<Buffer>>> AllocateWeights(
    Context& ctx, BufferType& type) {
  const size_t alignment = type.alignment();
  const size_t max_size = type.max_size() / alignment * alignment;
  struct Slot {
    Tensor* tensor;
    size_t chunk;
    size_t offset;
  };
  std::vector<Slot> roots;
  std::vector<Tensor*> views;
  std::vector<size_t> chunk_sizes;
  size_t offset = 0;
  for (Tensor* t : ctx.tensors()) {
    if (t->data != nullptr || t->buffer != nullptr) continue;
    if (t->view_src != nullptr) {
      const Tensor& src = *t->view_src;
      if (src.data == nullptr && src.buffer == nullptr &&
          std::find(ctx.tensors().begin(), ctx.tensors().end(), &src) ==
              ctx.tensors().end()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "weights: view '", t->name, "' of '", src.name,
            "': the source has no memory and is not in the context"));
      }
      views.push_back(t);
      continue;
    }
    const size_t size = type.AllocSize(*t);
    const size_t padded =
        std::max(alignment, (size + alignment - 1) / alignment * alignment);
    if (size > max_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "weights: tensor '", t->name, "' ", t->ShapeString(), " needs ", size,
          " bytes, more than the maximum buffer size ", type.max_size(), " of ",
          type.name()));
    }
    if (chunk_sizes.empty() || offset + size > max_size) {
      chunk_sizes.push_back(0);
      offset = 0;
    }
    roots.push_back(Slot{t, chunk_sizes.size() - 1, offset});
    chunk_sizes.back() = offset + size;
    offset = std::min(offset + padded, max_size);
  }

  std::vector<std::unique_ptr<Buffer>> buffers;
  for (size_t c = 0; c < chunk_sizes.size(); ++c) {
    absl::StatusOr<std::unique_ptr<Buffer>> b = type.Allocate(chunk_sizes[c]);
    if (!b.ok()) {
      return absl::Status(
          b.status().code(),
          absl::StrCat("weights: cannot allocate buffer ", c, " of ",
                       chunk_sizes[c], " bytes of ", type.name(), ": ",
                       b.status().message()));
    }
    (*b)->set_usage(BufferUsage::kWeights);
    buffers.push_back(*std::move(b));
  }

  std::vector<Tensor*> placed;
  auto undo = [&](absl::Status status) {
    for (Tensor* t : placed) {
      t->buffer = nullptr;
      t->data = nullptr;
    }
    return status;
  };
  for (const Slot& slot : roots) {
    absl::Status s =
        PlaceTensor(*buffers[slot.chunk], *slot.tensor, slot.offset);
    if (!s.ok()) return undo(s);
    placed.push_back(slot.tensor);
  }
  for (Tensor* view : views) {
    absl::Status s = PlaceView(*view);
    if (!s.ok()) return undo(s);
    placed.push_back(view);
  }
  return buffers;
}

}  // namespace ferry
