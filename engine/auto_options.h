// Engine options picked from the model and the requests, for a batch job
// run with no tuning (the main program's defaults).
#ifndef FERRY_ENGINE_AUTO_OPTIONS_H_
#define FERRY_ENGINE_AUTO_OPTIONS_H_

#include "absl/types/span.h"
#include "ferry/engine/engine.h"
#include "ferry/engine/request.h"
#include "ferry/models/llama/llama_model.h"

namespace ferry::engine {

// Options for serving `requests` on `model` as placed:
//   - a KV slot per request, up to kMaxAutoSequences, each as long as the
//     longest request (prompt + new tokens, at most the model's context);
//   - micro-batches of up to kAutoBatchTokens tokens: prompts go through in
//     long chunks (a weight loaded once serves many tokens) and every
//     decoding sequence fits one micro-batch; token buckets keep small
//     batches small;
//   - where the model attends by ranges (llama::CanAttendByRanges: each
//     token reads only its own sequence's cells), a window over every slot,
//     so that every sequence may join each micro-batch; else a window of
//     kAutoWindowCells cells (or one slot, if longer): every token of a
//     micro-batch attends over the whole window (masked), so a larger one
//     buys batch room with attention work that grows as the square of the
//     sequences (SmolLM2, 8 requests of 128 + 64 tokens, 2 threads, AVX2:
//     windows of 256, 512, 768, 1024, 2048 cells took 15.1, 12.8, 13.8,
//     14.6, 15.3 s);
//   - one micro-batch in flight per pipeline stage, plus one being formed
//     while the last stage computes; on a single stage, one (a second
//     would only queue behind it and split the sequences between them).
// The result passes Engine::Create's checks for any model it can serve.
EngineOptions ChooseEngineOptions(const llama::LlamaModel& model,
                                  absl::Span<const Request> requests);

inline constexpr int kMaxAutoSequences = 64;
inline constexpr int64_t kAutoBatchTokens = 64;
inline constexpr int64_t kAutoWindowCells = 512;

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_AUTO_OPTIONS_H_
