#include "ferry/models/llama/testing/llama_testing.h"

#include <random>
#include <vector>

#include "ferry/runtime/status_macros.h"

namespace ferry::testing {

std::vector<int32_t> TinyPrompt(int k, int64_t n, int64_t n_vocab) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n; ++i) {
    out.push_back(static_cast<int32_t>((k * 31 + i * 17 + 5) % n_vocab));
  }
  return out;
}

void FakePlaceWeights(Context& ctx) {
  // Never dereferenced; 4096-aligned so any alignment check passes.
  static char* const kFake = reinterpret_cast<char*>(uintptr_t{1} << 40);
  for (Tensor* t : ctx.tensors()) {
    if (t->data == nullptr) t->data = kFake;
  }
}

absl::StatusOr<std::unique_ptr<llama::LlamaModel>> MakeFakePlacedLlamaModel(
    const llama::LlamaConfig& config) {
  FERRY_ASSIGN_OR_RETURN(auto model, llama::LlamaModel::CreateUnplaced(config));
  for (const auto& ctx : model->weight_contexts()) FakePlaceWeights(*ctx);
  return model;
}

absl::StatusOr<std::unique_ptr<llama::LlamaModel>> MakePlacedLlamaModel(
    const llama::LlamaConfig& config, BufferType& type, uint64_t seed) {
  FERRY_ASSIGN_OR_RETURN(auto model,
                         llama::LlamaModel::CreateInBufferType(config, type));
  FERRY_RETURN_IF_ERROR(model->FillRandom(seed));
  return model;
}

absl::Status FillLlamaInputs(const llama::LlamaGraph& graph, int64_t n_vocab,
                             uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(graph.n_tokens));
  for (int32_t& id : ids) {
    id = static_cast<int32_t>(rng() % static_cast<uint64_t>(n_vocab));
  }
  return llama::SetLlamaInputs(graph, n_vocab, ids);
}

}  // namespace ferry::testing
