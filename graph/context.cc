#include "ferry/graph/context.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ferry {
namespace {

constexpr int64_t kHostAlignment = 64;

int64_t AlignUp(int64_t value, int64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace

void Context::FreeDeleter::operator()(std::byte* p) const { std::free(p); }

absl::StatusOr<Tensor*> Context::NewTensor(DType dtype,
                                           absl::Span<const int64_t> shape,
                                           absl::string_view name) {
  if (shape.size() > static_cast<size_t>(kMaxDims)) {
    return absl::InvalidArgumentError(
        absl::StrCat("new_tensor '", name, "': ", shape.size(),
                     " dims given, at most ", kMaxDims, " supported"));
  }
  Tensor tensor;
  tensor.dtype = dtype;
  int64_t bytes = DTypeBlockBytes(dtype);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "new_tensor '", name, "': dim ", i, " is negative (", shape[i], ")"));
    }
    tensor.ne[i] = shape[i];
  }
  if (tensor.ne[0] % DTypeBlockSize(dtype) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("new_tensor '", name, "': ne[0] = ", tensor.ne[0],
                     " is not a multiple of the ", DTypeName(dtype),
                     " block size ", DTypeBlockSize(dtype)));
  }
  for (int i = 0; i < kMaxDims; ++i) {
    const int64_t factor =
        i == 0 ? tensor.ne[0] / DTypeBlockSize(dtype) : tensor.ne[i];
    if (__builtin_mul_overflow(bytes, factor, &bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("new_tensor '", name, "': ", tensor.ShapeString(),
                       " overflows int64 bytes"));
    }
  }
  tensor.nb = ContiguousStrides(dtype, tensor.ne);
  tensor.name = std::string(name);
  return AddTensor(std::move(tensor));
}

Tensor* Context::AddTensor(Tensor tensor) {
  Tensor* t = &arena_.emplace_back(std::move(tensor));
  index_.push_back(t);
  return t;
}

absl::Status Context::AllocateHostData() {
  int64_t total = 0;
  bool any = false;
  for (Tensor* t : index_) {
    if (t->data != nullptr || t->view_src != nullptr) continue;
    total = AlignUp(total, kHostAlignment) + t->NumBytes();
    any = true;
  }
  if (any) {
    // Empty tensors still get a distinct, non-null address.
    const int64_t size = AlignUp(total, kHostAlignment) + kHostAlignment;
    auto* block = static_cast<std::byte*>(
        std::aligned_alloc(kHostAlignment, static_cast<size_t>(size)));
    if (block == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("AllocateHostData: cannot allocate ", size, " bytes"));
    }
    std::memset(block, 0, static_cast<size_t>(size));
    host_blocks_.emplace_back(block);
    int64_t offset = 0;
    for (Tensor* t : index_) {
      if (t->data != nullptr || t->view_src != nullptr) continue;
      offset = AlignUp(offset, kHostAlignment);
      t->data = block + offset;
      offset += t->NumBytes();
    }
  }
  for (Tensor* t : index_) {
    if (t->data != nullptr || t->view_src == nullptr) continue;
    if (t->view_src->data == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("AllocateHostData: view '", t->name, "' of '",
                       t->view_src->name, "', which has no data"));
    }
    t->data = static_cast<std::byte*>(t->view_src->data) + t->view_offset;
  }
  return absl::OkStatus();
}

}  // namespace ferry
