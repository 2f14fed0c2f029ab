#include "ferry/engine/engine.h"

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/backends/sim/sim_device.h"
#include "ferry/graph/testing/reference.h"
#include "ferry/models/llama/llama_graph.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/models/llama/testing/llama_testing.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/sync_wait.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::engine {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;
using ::testing::HasSubstr;

constexpr llama::LlamaConfig kConfig = ::ferry::testing::TinyLlamaConfig(64);

std::vector<int32_t> Prompt(int k, int n) {
  return ::ferry::testing::TinyPrompt(k, n);
}

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FERRY_ASSERT_OK_AND_ASSIGN(cpu_, GetCpuDevice().CreateBackend("threads=2"));
    for (int i = 0; i < 2; ++i) {
      FERRY_ASSERT_OK_AND_ASSIGN(
          auto device, SimDevice::Create(absl::StrCat("engine_sim", i), ""));
      FERRY_ASSERT_OK_AND_ASSIGN(auto backend, device->CreateBackend());
      sim_devices_.push_back(std::move(device));
      sims_.push_back(std::move(backend));
    }
    FERRY_ASSERT_OK_AND_ASSIGN(
        model_, llama::LlamaModel::Create(
                    kConfig, {sims_[0].get(), sims_[1].get(), cpu_.get()}));
    FERRY_ASSERT_OK(model_->FillRandom(11));
    FERRY_ASSERT_OK_AND_ASSIGN(
        cpu_model_, llama::LlamaModel::Create(kConfig, {cpu_.get()}));
    FERRY_ASSERT_OK(cpu_model_->FillRandom(11));
  }

  // Logits of every position of `tokens` by the plain forward pass on the
  // CPU alone: the reference the engine's cached, batched, pipelined path
  // must match.
  std::vector<float> FullLogits(const std::vector<int32_t>& tokens) {
    auto g = llama::BuildLlamaGraph(
        *cpu_model_, {.n_tokens = static_cast<int64_t>(tokens.size())});
    EXPECT_THAT(g.status(), IsOk());
    auto sched = Scheduler::Create({cpu_.get()});
    EXPECT_THAT(sched.status(), IsOk());
    EXPECT_THAT((*sched)->AllocGraph(g->graph), IsOk());
    EXPECT_THAT(llama::SetLlamaInputs(*g, kConfig.n_vocab, tokens), IsOk());
    std::vector<float> out(static_cast<size_t>(g->logits->NumElements()));
    EXPECT_THAT(
        (*sched)->Compute(
            g->graph, BatchIo().Out(*g->logits, out.data(), out.size() * 4)),
        IsOk());
    return out;
  }

  // Greedy continuation of `prompt` by full recomputation at every step.
  std::vector<int32_t> ReferenceGreedy(std::vector<int32_t> tokens, int n) {
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
      const std::vector<float> logits = FullLogits(tokens);
      const auto last = logits.end() - kConfig.n_vocab;
      const int32_t next = llama::Argmax(
          absl::MakeConstSpan(&*last, kConfig.n_vocab), kConfig.n_vocab)[0];
      out.push_back(next);
      tokens.push_back(next);
    }
    return out;
  }

  std::unique_ptr<Engine> MakeEngine(EngineOptions options) {
    auto engine = Engine::Create(*model_, options);
    EXPECT_THAT(engine.status(), IsOk());
    return engine.ok() ? std::move(*engine) : nullptr;
  }

  // Runs `requests` concurrently; returns their results in order.
  std::vector<Result> RunAll(Engine& engine, std::vector<Request> requests) {
    std::vector<RequestHandle> handles;
    for (Request& r : requests) {
      auto h = engine.Submit(std::move(r));
      EXPECT_THAT(h.status(), IsOk());
      if (h.ok()) handles.push_back(std::move(*h));
    }
    std::vector<Result> out;
    for (RequestHandle& h : handles) {
      auto r = h.Wait();
      EXPECT_THAT(r.status(), IsOk());
      out.push_back(r.ok() ? std::move(*r) : Result{});
    }
    return out;
  }

  std::vector<Request> MixedRequests(bool sampled) {
    std::vector<Request> out;
    for (int k = 0; k < 6; ++k) {
      Request r;
      r.id = absl::StrCat("r", k);
      r.prompt = Prompt(k, 3 + 5 * k);  // 3 to 28 tokens: chunked prefill.
      r.max_new_tokens = 4 + k;
      if (sampled) {
        r.sampling = {.temperature = 0.8f,
                      .top_k = 20,
                      .top_p = 0.9f,
                      .seed = static_cast<uint64_t>(k)};
      }
      out.push_back(std::move(r));
    }
    return out;
  }

  std::unique_ptr<Backend> cpu_;
  std::vector<std::unique_ptr<SimDevice>> sim_devices_;
  std::vector<std::unique_ptr<Backend>> sims_;
  std::unique_ptr<llama::LlamaModel> model_;
  std::unique_ptr<llama::LlamaModel> cpu_model_;
};

// Many sequences at once, chunked prefill beside decode, pipelined over two
// sims: each request's greedy tokens are those of recomputing its whole
// context on the CPU at every step, and the logits it asked for match;
// attending by ranges (the default here: the sims and the CPU run
// range_attention) and over a masked window alike.
class EngineAttentionTest : public EngineTest,
                            public ::testing::WithParamInterface<bool> {
 protected:
  // 4 sequences of up to 40 tokens in micro-batches of 8, 4 in flight,
  // attending by ranges or not as the parameter says.
  static EngineOptions Options() {
    EngineOptions options = {.max_sequences = 4,
                             .max_sequence_len = 40,
                             .batch_tokens = 8,
                             .n_copies = 4};
    options.attend_by_ranges = GetParam();
    return options;
  }
};

TEST_P(EngineAttentionTest, GreedyTokensMatchFullRecompute) {
  const bool by_ranges = GetParam();
  EngineOptions options = Options();
  auto engine = MakeEngine(options);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->bucket_shape(0).attend_by_ranges, by_ranges);
  std::vector<Request> requests = MixedRequests(false);
  requests[2].logits_positions = {0, 5, 12};  // Prompt of 13 tokens.
  std::vector<Result> results = RunAll(*engine, requests);
  for (size_t k = 0; k < results.size(); ++k) {
    SCOPED_TRACE(absl::StrCat("request ", k));
    EXPECT_EQ(results[k].id, requests[k].id);
    EXPECT_EQ(results[k].finish, FinishReason::kLength);
    EXPECT_EQ(results[k].tokens,
              ReferenceGreedy(requests[k].prompt, requests[k].max_new_tokens));
    EXPECT_EQ(results[k].non_finite_logits, 0);
  }
  const std::vector<float> full = FullLogits(requests[2].prompt);
  ASSERT_EQ(results[2].logits.size(), 3u);
  for (const auto& [pos, logits] : results[2].logits) {
    const std::vector<float> want(full.begin() + pos * kConfig.n_vocab,
                                  full.begin() + (pos + 1) * kConfig.n_vocab);
    EXPECT_LE(testing::Nmse(want, logits), 1e-8) << "position " << pos;
  }
  const EngineStats stats = engine->stats();
  EXPECT_EQ(stats.requests_done, 6);
  EXPECT_GT(stats.max_in_flight, 1);  // Micro-batches were pipelined.
  // Window buckets of 64 and the full 161 cells (128 is within a quarter
  // of 161); by ranges, the window spans the 4 slots and costs nothing, so
  // it has no buckets. One plan per bucket, made when first needed (the
  // full shape's at Create): switching buckets never replans.
  const std::vector<int64_t> windows =
      by_ranges ? std::vector<int64_t>{161} : std::vector<int64_t>{64, 161};
  EXPECT_EQ(engine->window_sizes(), windows);
  EXPECT_EQ(engine->bucket_shape(0).n_tokens, 8);
  EXPECT_EQ(engine->bucket_shape(0).n_window, 161);
  ASSERT_GT(engine->num_buckets(), 2);
  for (int b = 0; b < engine->num_buckets(); ++b) {
    EXPECT_EQ(engine->scheduler(b).stats().graphs_planned, 1) << "bucket " << b;
    for (int c = 0; c < b; ++c) {
      const llama::LlamaBatchShape x = engine->bucket_shape(b);
      const llama::LlamaBatchShape y = engine->bucket_shape(c);
      EXPECT_FALSE(x.n_tokens == y.n_tokens && x.n_window == y.n_window &&
                   x.n_outputs == y.n_outputs)
          << "buckets " << b << " and " << c << " have one shape";
    }
  }
  // Decode steps of fewer sequences than token slots ran on smaller token
  // buckets: padding at most doubles the live tokens.
  EXPECT_GT(stats.micro_batches_by_tokens.begin()->second, 0);
  EXPECT_LT(stats.micro_batches_by_tokens.begin()->first, 8);
  EXPECT_LE(stats.padded_tokens, stats.prefill_tokens + stats.decode_tokens);
}

// An f16 KV cache (half the bytes) over two sims and the CPU, by ranges and
// over a masked window: the logits stay within f16 rounding of the f32
// forward pass. An unsupported cell type is refused by name.
TEST_P(EngineAttentionTest, F16CacheStaysCloseToTheF32Pass) {
  const bool by_ranges = GetParam();
  EngineOptions options = Options();
  auto f32_engine = MakeEngine(options);
  ASSERT_NE(f32_engine, nullptr);
  options.kv_cache_type = DType::kF16;
  auto engine = MakeEngine(options);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->bucket_shape(0).attend_by_ranges, by_ranges);
  EXPECT_EQ(engine->kv_cache().cell_type(), DType::kF16);
  for (size_t b = 0; b < engine->kv_cache().bytes().size(); ++b) {
    // Half, but for each tensor's alignment padding.
    EXPECT_LE(static_cast<double>(engine->kv_cache().bytes()[b]),
              0.52 * static_cast<double>(f32_engine->kv_cache().bytes()[b]))
        << "backend " << b;
  }
  std::vector<Request> requests = MixedRequests(false);
  for (Request& r : requests) {
    for (size_t p = 0; p < r.prompt.size(); p += 2) {
      r.logits_positions.push_back(static_cast<int64_t>(p));
    }
  }
  std::vector<Result> results = RunAll(*engine, requests);
  for (size_t k = 0; k < results.size(); ++k) {
    SCOPED_TRACE(absl::StrCat("request ", k));
    EXPECT_EQ(results[k].non_finite_logits, 0);
    const std::vector<float> full = FullLogits(requests[k].prompt);
    ASSERT_EQ(results[k].logits.size(), requests[k].logits_positions.size());
    for (const auto& [pos, logits] : results[k].logits) {
      const std::vector<float> want(full.begin() + pos * kConfig.n_vocab,
                                    full.begin() + (pos + 1) * kConfig.n_vocab);
      // f16 keeps 11 bits: ~1e-7 squared error per value (f32: < 1e-12).
      EXPECT_LE(testing::Nmse(want, logits), 1e-5) << "position " << pos;
    }
  }
  options.kv_cache_type = DType::kBF16;
  EXPECT_THAT(Engine::Create(*model_, options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("kv_cache_type bf16")));
}

// On one stage the engine keeps one micro-batch in flight whatever n_copies
// asks: a second would only queue behind the first and split the sequences
// between them. The tokens are those of recomputing every context.
TEST_F(EngineTest, OneStageKeepsOneMicroBatchInFlight) {
  FERRY_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Engine> engine,
      Engine::Create(*cpu_model_, {.max_sequences = 4,
                                   .max_sequence_len = 40,
                                   .batch_tokens = 8,
                                   .n_copies = 4}));
  EXPECT_EQ(engine->options().n_copies, 1);
  std::vector<Request> requests = MixedRequests(false);
  std::vector<Result> results = RunAll(*engine, requests);
  ASSERT_EQ(results.size(), requests.size());
  for (size_t k = 0; k < results.size(); ++k) {
    EXPECT_EQ(results[k].tokens,
              ReferenceGreedy(requests[k].prompt, requests[k].max_new_tokens))
        << "request " << k;
  }
  EXPECT_EQ(engine->stats().max_in_flight, 1);
}

INSTANTIATE_TEST_SUITE_P(ByRangesAndByWindow, EngineAttentionTest,
                         ::testing::Bool(), [](const auto& info) {
                           return info.param ? "ByRanges" : "ByWindow";
                         });

// Two pipeline stages that are backends of one device (two CPU backends
// with a thread each) share its weights' and caches' buffer types: the
// engine pins each layer's weights and cache to its stage, so both stages
// compute (without the pins every layer ran on the first), and the tokens
// are those of the CPU alone.
TEST_F(EngineTest, TwoStagesOnOneDeviceEachRunTheirLayers) {
  std::vector<std::unique_ptr<Backend>> stages;
  for (int i = 0; i < 2; ++i) {
    FERRY_ASSERT_OK_AND_ASSIGN(auto stage,
                               GetCpuDevice().CreateBackend("threads=1"));
    stages.push_back(std::move(stage));
  }
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto model, llama::LlamaModel::Create(
                      kConfig, {stages[0].get(), stages[1].get(), cpu_.get()},
                      {.layer_backends = {0, 0, 1, 1}}));
  FERRY_ASSERT_OK(model->FillRandom(11));
  auto engine = Engine::Create(*model, {.max_sequences = 2,
                                        .max_sequence_len = 40,
                                        .batch_tokens = 8,
                                        .n_copies = 2});
  ASSERT_THAT(engine.status(), IsOk());
  std::vector<Request> requests = MixedRequests(false);
  requests.resize(2);
  std::vector<Result> results = RunAll(**engine, requests);
  for (size_t k = 0; k < results.size(); ++k) {
    EXPECT_EQ(results[k].tokens,
              ReferenceGreedy(requests[k].prompt, requests[k].max_new_tokens))
        << "request " << k;
  }
  // Each stage ran its layers (named by the node that ends them); the
  // scheduler tells backends of one device apart by index.
  const std::string assignment = (*engine)->scheduler(0).DescribeAssignment();
  for (int il = 0; il < kConfig.n_layer; ++il) {
    const std::string stage = il < 2 ? "cpu#0" : "cpu#1";
    EXPECT_THAT(assignment, ::testing::ContainsRegex(absl::StrCat(
                                "blk\\.", il, "\\.out +-> ", stage, " ")))
        << "layer " << il;
  }
}

// Buckets change only how many token slots, logits rows and cache cells
// each micro-batch has, not what it computes: with window buckets from 4
// cells up and token buckets, the same
// requests (chunked prefill, six sequences in four slots, contexts of 3 to
// 37 cells crossing several buckets, one request cancelled midway, pipelined
// over two sims and the CPU) give the same greedy tokens as with the full
// shape alone, and logits that differ at most by rounding: the extra
// entries are masked (exp(-inf) = 0 adds nothing), but a kernel may sum a
// longer window in another order (on the CPU and sims here they come out
// bit-identical).
TEST_F(EngineTest, BucketsGiveTheSameTokensAndLogits) {
  struct Run {
    std::vector<Result> results;
    EngineStats stats;
  };
  auto run = [&](bool buckets) {
    EngineOptions options = {.max_sequences = 4,
                             .max_sequence_len = 40,
                             .batch_tokens = 8,
                             .prefill_chunk = 5,
                             .n_copies = 4,
                             .window_buckets = buckets,
                             .token_buckets = buckets,
                             .min_window_bucket = 4};
    options.attend_by_ranges = false;  // Window buckets are the window's.
    auto engine = MakeEngine(options);
    std::vector<Request> requests = MixedRequests(false);
    for (size_t k = 0; k < requests.size(); ++k) {
      // Every position: prefill chunks and decode steps alike.
      const auto n = static_cast<int64_t>(requests[k].prompt.size()) +
                     requests[k].max_new_tokens - 1;
      for (int64_t p = 0; p < n; ++p) requests[k].logits_positions.push_back(p);
    }
    absl::Notification first_token;
    Request endless{
        .id = "endless", .prompt = Prompt(9, 6), .max_new_tokens = 1000};
    endless.on_token = [&](int32_t) {
      if (!first_token.HasBeenNotified()) first_token.Notify();
    };
    auto cancelled = engine->Submit(std::move(endless));
    EXPECT_THAT(cancelled.status(), IsOk());
    first_token.WaitForNotification();
    std::vector<RequestHandle> handles;
    for (Request& r : requests) {
      auto h = engine->Submit(std::move(r));
      EXPECT_THAT(h.status(), IsOk());
      if (h.ok()) handles.push_back(std::move(*h));
    }
    cancelled->Cancel();
    EXPECT_THAT(cancelled->Wait().status(),
                StatusIs(absl::StatusCode::kCancelled));
    Run out;
    for (RequestHandle& h : handles) {
      auto r = h.Wait();
      EXPECT_THAT(r.status(), IsOk());
      out.results.push_back(r.ok() ? std::move(*r) : Result{});
    }
    engine->WaitIdle();
    out.stats = engine->stats();
    return out;
  };
  const Run full = run(false);
  const Run bucketed = run(true);
  ASSERT_EQ(full.results.size(), 6u);
  ASSERT_EQ(bucketed.results.size(), 6u);
  for (size_t k = 0; k < full.results.size(); ++k) {
    SCOPED_TRACE(absl::StrCat("request ", k));
    EXPECT_EQ(bucketed.results[k].tokens, full.results[k].tokens);
    const auto& want = full.results[k].logits;
    const auto& got = bucketed.results[k].logits;
    ASSERT_EQ(got.size(), want.size());
    ASSERT_EQ(got.size(), 3 + 5 * k + 4 + k - 1);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].first, want[i].first);
      EXPECT_LE(testing::Nmse(want[i].second, got[i].second), 1e-10)
          << "position " << got[i].first;
    }
  }
  // Without buckets, every micro-batch attends over the full window of
  // min(4, 8) * 40 + 1 cells; with them, most over a small one.
  EXPECT_EQ(full.stats.micro_batches_by_window,
            (std::map<int64_t, int64_t>{{161, full.stats.micro_batches}}));
  EXPECT_EQ(full.stats.window_cells, 161 * full.stats.micro_batches);
  int64_t small = 0;
  for (const auto& [window, count] : bucketed.stats.micro_batches_by_window) {
    EXPECT_TRUE(window == 161 || (window >= 4 && (window & (window - 1)) == 0))
        << window;
    if (window <= 32) small += count;
  }
  EXPECT_GT(small, 0);
  EXPECT_GT(bucketed.stats.micro_batches_by_window.size(), 2u);
  EXPECT_LT(bucketed.stats.window_cells * 2, full.stats.window_cells);
  // Without token buckets every micro-batch has 8 token slots; with them,
  // padding at most doubles the live tokens.
  EXPECT_EQ(full.stats.micro_batches_by_tokens,
            (std::map<int64_t, int64_t>{{8, full.stats.micro_batches}}));
  EXPECT_GT(bucketed.stats.micro_batches_by_tokens.size(), 1u);
  EXPECT_LE(bucketed.stats.padded_tokens,
            bucketed.stats.prefill_tokens + bucketed.stats.decode_tokens);
  EXPECT_LT(bucketed.stats.padded_tokens, full.stats.padded_tokens);
  EXPECT_EQ(bucketed.stats.requests_failed, 1);
}

// Sampled and greedy tokens do not depend on how requests were batched:
// micro-batch size, in-flight count, static or continuous batching.
TEST_F(EngineTest, SameTokensWhateverTheBatching) {
  for (bool sampled : {false, true}) {
    SCOPED_TRACE(sampled ? "sampled" : "greedy");
    std::vector<std::vector<int32_t>> first;
    for (EngineOptions options : {EngineOptions{.max_sequences = 6,
                                 .max_sequence_len = 40,
                                 .batch_tokens = 16,
                                 .n_copies = 4},
                                  EngineOptions{.max_sequences = 2,
                                  .max_sequence_len = 40,
                                  .batch_tokens = 4,
                                  .n_copies = 1},
                                  EngineOptions{.max_sequences = 3,
                                  .max_sequence_len = 40,
                                  .batch_tokens = 8,
                                  .n_copies = 2,
                                  .static_batching = true}}) {
      auto engine = MakeEngine(options);
      std::vector<Result> results = RunAll(*engine, MixedRequests(sampled));
      std::vector<std::vector<int32_t>> tokens;
      for (const Result& r : results) tokens.push_back(r.tokens);
      if (first.empty()) {
        first = tokens;
      } else {
        EXPECT_EQ(tokens, first);
      }
    }
  }
}

// A request submitted while another runs joins it, and finishes first.
TEST_F(EngineTest, NewRequestsJoinWhileOthersRun) {
  auto engine = MakeEngine({.max_sequences = 2,
                            .max_sequence_len = 64,
                            .batch_tokens = 8,
                            .n_copies = 2});
  absl::Notification started;
  std::atomic<int> streamed{0};
  Request long_request{
      .id = "long", .prompt = Prompt(1, 4), .max_new_tokens = 50};
  long_request.on_token = [&](int32_t) {
    if (++streamed == 2) started.Notify();
  };
  FERRY_ASSERT_OK_AND_ASSIGN(RequestHandle long_handle,
                             engine->Submit(std::move(long_request)));
  started.WaitForNotification();
  FERRY_ASSERT_OK_AND_ASSIGN(
      RequestHandle short_handle,
      engine->Submit(
          {.id = "short", .prompt = Prompt(2, 4), .max_new_tokens = 3}));
  FERRY_ASSERT_OK_AND_ASSIGN(Result short_result, short_handle.Wait());
  FERRY_ASSERT_OK_AND_ASSIGN(Result long_result, long_handle.Wait());
  EXPECT_LT(short_result.finished_ns, long_result.finished_ns);
  EXPECT_GT(short_result.submitted_ns, long_result.first_token_ns);
  EXPECT_EQ(long_result.tokens.size(), 50u);
  EXPECT_EQ(streamed.load(), 50);
}

// Cancelling frees the slot: with one slot, a second request runs only
// because the first was cancelled.
TEST_F(EngineTest, CancelFreesTheSlot) {
  auto engine = MakeEngine({.max_sequences = 1,
                            .max_sequence_len = 64,
                            .batch_tokens = 8,
                            .n_copies = 2});
  absl::Notification first_token;
  Request endless{
      .id = "endless", .prompt = Prompt(3, 4), .max_new_tokens = 1000000};
  endless.on_token = [&](int32_t) {
    if (!first_token.HasBeenNotified()) first_token.Notify();
  };
  FERRY_ASSERT_OK_AND_ASSIGN(RequestHandle a, engine->Submit(endless));
  FERRY_ASSERT_OK_AND_ASSIGN(
      RequestHandle b,
      engine->Submit({.id = "b", .prompt = Prompt(4, 4), .max_new_tokens = 2}));
  first_token.WaitForNotification();
  a.Cancel();
  EXPECT_THAT(a.Wait().status(), StatusIs(absl::StatusCode::kCancelled));
  FERRY_ASSERT_OK_AND_ASSIGN(Result rb, b.Wait());
  EXPECT_EQ(rb.tokens.size(), 2u);
  // A waiting request is cancelled without ever running.
  FERRY_ASSERT_OK_AND_ASSIGN(RequestHandle c, engine->Submit(endless));
  FERRY_ASSERT_OK_AND_ASSIGN(RequestHandle d, engine->Submit(endless));
  d.Cancel();
  EXPECT_THAT(d.Wait().status(), StatusIs(absl::StatusCode::kCancelled));
  c.Cancel();
  EXPECT_THAT(c.Wait().status(), StatusIs(absl::StatusCode::kCancelled));
  engine->WaitIdle();
  EXPECT_EQ(engine->stats().requests_failed, 3);
}

// A sequence that fills its slot stops with kContext; stop tokens stop it.
TEST_F(EngineTest, StopsAtStopTokensAndFullSlots) {
  auto engine = MakeEngine({.max_sequences = 2,
                            .max_sequence_len = 10,
                            .batch_tokens = 8,
                            .n_copies = 2});
  FERRY_ASSERT_OK_AND_ASSIGN(
      Result full,
      SyncWait(engine->Generate(
          {.id = "full", .prompt = Prompt(5, 6), .max_new_tokens = 100})));
  EXPECT_EQ(full.finish, FinishReason::kContext);
  EXPECT_EQ(full.tokens.size(), 5u);  // 6 + 5 = 11 > 10 cells.
  EXPECT_EQ(full.tokens, ReferenceGreedy(Prompt(5, 6), 5));
  Request stop{.id = "stop", .prompt = Prompt(5, 6), .max_new_tokens = 100};
  stop.stop_tokens = {full.tokens[2]};
  FERRY_ASSERT_OK_AND_ASSIGN(Result stopped, SyncWait(engine->Generate(stop)));
  EXPECT_EQ(stopped.finish, FinishReason::kStop);
  EXPECT_EQ(stopped.tokens.back(), full.tokens[2]);
  EXPECT_LE(stopped.tokens.size(), 3u);
}

TEST_F(EngineTest, RejectsRequestsThatCanNeverRun) {
  auto engine = MakeEngine(
      {.max_sequences = 2, .max_sequence_len = 16, .batch_tokens = 8});
  EXPECT_THAT(engine->Submit({.id = "a"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("request 'a': empty prompt")));
  EXPECT_THAT(engine->Submit({.id = "b", .prompt = {1, 64}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("token 64 at 1 outside [0, 64)")));
  EXPECT_THAT(engine->Submit({.id = "c", .prompt = Prompt(1, 17)}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("longer than a sequence may be (16")));
  EXPECT_THAT(
      engine->Submit({.id = "d", .prompt = {1}, .max_new_tokens = 0}).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("max_new_tokens")));
  EXPECT_THAT(
      engine
          ->Submit({.id = "e", .prompt = {1}, .sampling = {.temperature = -1}})
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("request 'e': sampling: temperature")));
  EXPECT_THAT(Engine::Create(*model_, {.max_sequence_len = 65}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model's context 64")));
  EXPECT_THAT(Engine::Create(*model_, {.n_copies = 0}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  for (int64_t bad : {int64_t{0}, int64_t{1}, int64_t{48}, int64_t{1} << 21}) {
    EXPECT_THAT(Engine::Create(
                    *model_, {.max_sequence_len = 16, .min_window_bucket = bad})
                    .status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("min_window_bucket")))
        << bad;
  }
  // Without buckets the smallest one is never used.
  EXPECT_THAT(Engine::Create(*model_, {.max_sequence_len = 16,
                                       .window_buckets = false,
                                       .min_window_bucket = 48})
                  .status(),
              IsOk());
}

// Destroying the engine with requests queued fails them, without hanging.
TEST_F(EngineTest, ShutdownCancelsWhatIsLeft) {
  auto engine = MakeEngine(
      {.max_sequences = 1, .max_sequence_len = 64, .batch_tokens = 8});
  std::vector<RequestHandle> handles;
  for (int k = 0; k < 4; ++k) {
    FERRY_ASSERT_OK_AND_ASSIGN(
        RequestHandle h,
        engine->Submit({.prompt = Prompt(k, 8), .max_new_tokens = 40}));
    handles.push_back(std::move(h));
  }
  engine.reset();
  int cancelled = 0;
  for (RequestHandle& h : handles) {
    absl::StatusOr<Result> r = h.Wait();
    cancelled += r.status().code() == absl::StatusCode::kCancelled;
  }
  EXPECT_GE(cancelled, 3);
}

}  // namespace
}  // namespace ferry::engine
