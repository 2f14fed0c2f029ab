#include "ferry/models/llama/llama_kv_cache.h"

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "ferry/alloc/weights.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::llama {

absl::StatusOr<std::unique_ptr<LlamaKvCache>> LlamaKvCache::Create(
    const LlamaModel& model, int64_t n_cells, DType cell_type,
    BufferType* unplaced_type) {
  const LlamaConfig& c = model.config();
  // 2^24 cells of a 2^24-wide row would overflow nothing below 2^63 bytes,
  // and the devices refuse what they cannot hold.
  if (n_cells < 1 || n_cells > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "llama KV cache: ", n_cells, " cells; must be in [1, 2^24]"));
  }
  if (cell_type != DType::kF32 && cell_type != DType::kF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("llama KV cache: cells of type ", DTypeName(cell_type),
                     "; must be f32 or f16"));
  }
  const bool placed = !model.backends().empty();
  if (!placed && unplaced_type == nullptr) {
    return absl::InvalidArgumentError(
        "llama KV cache: the model has no backends; give a buffer type");
  }
  auto cache = absl::WrapUnique(new LlamaKvCache());
  cache->n_cells_ = n_cells;
  cache->cell_type_ = cell_type;
  const size_t nb = placed ? model.backends().size() : 1;
  for (size_t b = 0; b < nb; ++b) {
    cache->ctx_.push_back(std::make_unique<Context>());
  }
  for (int il = 0; il < c.n_layer; ++il) {
    Context& ctx = *cache->ctx_[model.layers()[il].backend];
    const std::string p = absl::StrCat("blk.", il, ".");
    FERRY_ASSIGN_OR_RETURN(
        Tensor * k,
        ctx.NewTensor(cell_type, {c.kv_dim(), n_cells}, p + "k_cache"));
    FERRY_ASSIGN_OR_RETURN(
        Tensor * v,
        ctx.NewTensor(cell_type, {c.kv_dim(), n_cells}, p + "v_cache"));
    cache->k_.push_back(k);
    cache->v_.push_back(v);
  }
  cache->bytes_.assign(nb, 0);
  for (size_t b = 0; b < nb; ++b) {
    Context& ctx = *cache->ctx_[b];
    if (ctx.num_tensors() == 0) continue;
    BufferType* type = placed
                           ? model.backends()[b]->device().default_buffer_type()
                           : unplaced_type;
    auto buffers = AllocateWeights(ctx, *type);
    if (!buffers.ok()) {
      return absl::Status(
          buffers.status().code(),
          absl::StrCat("llama KV cache (", n_cells, " cells) on ",
                       placed ? model.backends()[b]->name() : type->name(),
                       ": ", buffers.status().message()));
    }
    for (auto& buffer : *buffers) {
      cache->bytes_[b] += buffer->size();
      cache->buffers_.push_back(std::move(buffer));
    }
  }
  FERRY_RETURN_IF_ERROR(cache->Clear());
  return cache;
}

absl::Status LlamaKvCache::Clear() {
  for (const std::vector<Tensor*>* list : {&k_, &v_}) {
    for (Tensor* t : *list) {
      FERRY_RETURN_IF_ERROR(t->buffer->MemsetTensor(
          *t, 0, 0, static_cast<size_t>(t->NumBytes())));
    }
  }
  return absl::OkStatus();
}

}  // namespace ferry::llama
