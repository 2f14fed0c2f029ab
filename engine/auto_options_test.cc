#include "ferry/engine/auto_options.h"

#include <memory>
#include <vector>

#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry::engine {
namespace {

constexpr llama::LlamaConfig kConfig = {.n_layer = 2,
                                        .n_embd = 64,
                                        .n_head = 4,
                                        .n_head_kv = 2,
                                        .n_ff = 96,
                                        .n_vocab = 64,
                                        .n_ctx = 300};

std::vector<Request> Requests(int n, int prompt, int new_tokens) {
  std::vector<Request> out(static_cast<size_t>(n));
  for (Request& r : out) {
    r.prompt.assign(static_cast<size_t>(prompt), 3);
    r.max_new_tokens = new_tokens;
  }
  return out;
}

// The picked options follow the requests and the placement, and an engine
// can be made with them.
TEST(ChooseEngineOptionsTest, FollowsTheRequestsAndStages) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto cpu,
                             GetCpuDevice().CreateBackend("threads=1"));
  FERRY_ASSERT_OK_AND_ASSIGN(auto model,
                             llama::LlamaModel::Create(kConfig, {cpu.get()}));
  std::vector<Request> requests = Requests(5, 20, 10);
  requests[3].prompt.resize(40);
  EngineOptions o = ChooseEngineOptions(*model, requests);
  EXPECT_EQ(o.max_sequences, 5);
  EXPECT_EQ(o.max_sequence_len, 50);
  EXPECT_EQ(o.batch_tokens, kAutoBatchTokens);
  // The CPU attends by ranges: the engine's window spans every slot.
  EXPECT_EQ(o.batch_window, 0);
  EXPECT_EQ(o.n_copies, 1);  // One stage.
  EXPECT_TRUE(o.token_buckets);
  EXPECT_TRUE(o.window_buckets);
  FERRY_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Engine> engine,
                             Engine::Create(*model, o));
  EXPECT_TRUE(engine->batch_shape().attend_by_ranges);
  EXPECT_EQ(engine->batch_shape().n_window, 5 * 50 + 1);

  // Longer than the context: a slot is the whole context; more requests
  // than the cap: the cap.
  o = ChooseEngineOptions(*model, Requests(100, 250, 100));
  EXPECT_EQ(o.max_sequences, kMaxAutoSequences);
  EXPECT_EQ(o.max_sequence_len, kConfig.n_ctx);
  FERRY_EXPECT_OK(Engine::Create(*model, o).status());

  // No requests yet: still an engine.
  o = ChooseEngineOptions(*model, {});
  EXPECT_EQ(o.max_sequences, 1);
  FERRY_EXPECT_OK(Engine::Create(*model, o).status());
}

}  // namespace
}  // namespace ferry::engine
