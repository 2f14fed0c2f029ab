#include "ferry/engine/auto_options.h"

#include <algorithm>
#include <cstdint>

#include "ferry/models/llama/llama_batch.h"

namespace ferry::engine {

EngineOptions ChooseEngineOptions(const llama::LlamaModel& model,
                                  absl::Span<const Request> requests) {
  const llama::LlamaConfig& c = model.config();
  int64_t longest = 1;
  for (const Request& r : requests) {
    longest = std::max<int64_t>(
        longest, static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens);
  }
  EngineOptions o;
  o.max_sequence_len = std::min<int64_t>(longest, c.n_ctx);
  o.max_sequences = static_cast<int>(std::clamp<int64_t>(
      static_cast<int64_t>(requests.size()), 1, kMaxAutoSequences));
  o.batch_tokens = kAutoBatchTokens;
  // By ranges a window costs nothing: the engine's default spans every slot.
  o.batch_window = llama::CanAttendByRanges(model)
                       ? 0
                       : std::max(kAutoWindowCells, o.max_sequence_len + 1);
  // One stage: one in flight (Engine::Create would make it so).
  const int stages = PipelineStages(model);
  o.n_copies = stages <= 1 ? 1 : stages + 1;
  return o;
}

}  // namespace ferry::engine
