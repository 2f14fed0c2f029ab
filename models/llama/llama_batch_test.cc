#include "ferry/models/llama/llama_batch.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/graph/testing/reference.h"
#include "ferry/models/llama/llama_graph.h"
#include "ferry/models/llama/llama_kv_cache.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/sched/scheduler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::llama {
namespace {

using ::ferry::testing::StatusIs;
using ::testing::HasSubstr;

constexpr LlamaConfig kConfig = {.n_layer = 2,
                                 .n_embd = 64,
                                 .n_head = 4,
                                 .n_head_kv = 2,
                                 .n_ff = 96,
                                 .n_vocab = 50};
constexpr int64_t kSlotLen = 16;

// `shape` with a window of `n_window` entries.
LlamaBatchShape Window(LlamaBatchShape shape, int64_t n_window) {
  shape.n_window = n_window;
  return shape;
}

std::vector<int32_t> Tokens(int n, int salt) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back((i * 7 + salt * 13 + 3) % 50);
  return out;
}

class LlamaBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FERRY_ASSERT_OK_AND_ASSIGN(cpu_, GetCpuDevice().CreateBackend("threads=2"));
    FERRY_ASSERT_OK_AND_ASSIGN(model_,
                               LlamaModel::Create(kConfig, {cpu_.get()}));
    FERRY_ASSERT_OK(model_->FillRandom(5));
    FERRY_ASSERT_OK_AND_ASSIGN(sched_, Scheduler::Create({cpu_.get()}));
  }

  // Logits of every position of `tokens` from the plain forward pass (on a
  // scheduler of its own, which must not outlive the graph).
  std::vector<float> FullLogits(const std::vector<int32_t>& tokens) {
    auto g = BuildLlamaGraph(*model_,
                             {.n_tokens = static_cast<int64_t>(tokens.size())});
    auto sched = Scheduler::Create({cpu_.get()});
    EXPECT_THAT(sched.status(), testing::IsOk());
    EXPECT_THAT(g.status(), testing::IsOk());
    auto in = MakeLlamaInputs(*g, kConfig.n_vocab, tokens);
    EXPECT_THAT(in.status(), testing::IsOk());
    std::vector<float> out(static_cast<size_t>(g->logits->NumElements()));
    BatchIo io;
    io.In(*g->tokens, in->tokens.data(), in->tokens.size() * 4)
        .In(*g->pos, in->pos.data(), in->pos.size() * 4)
        .In(*g->mask, in->mask.data(), in->mask.size() * 4)
        .Out(*g->logits, out.data(), out.size() * 4);
    EXPECT_THAT((*sched)->Compute(g->graph, io), testing::IsOk());
    return out;
  }

  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<Scheduler> sched_;
};

// Two sequences in slots of the cache, fed as chunked prefill beside each
// other and then decoded together (with padding), give the logits of the
// plain forward pass over each sequence's prefix at every step, on the full
// window and narrowed to a smaller one.
class LlamaBatchWindowTest : public LlamaBatchTest,
                             public ::testing::WithParamInterface<int64_t> {};

TEST_P(LlamaBatchWindowTest, MatchesFullForwardPassPerSequence) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto cache,
                             LlamaKvCache::Create(*model_, 2 * kSlotLen + 1));
  const LlamaBatchShape shape{.n_tokens = 8, .n_window = 40, .n_outputs = 4};
  LlamaBatchShape narrow = shape;
  narrow.n_window = GetParam();  // The steps use at most 25 entries.
  FERRY_ASSERT_OK_AND_ASSIGN(LlamaBatchGraph g,
                             BuildLlamaBatchGraph(*model_, *cache, narrow));
  LlamaBatchBuilder batch(shape, /*pad_cell=*/2 * kSlotLen);
  const std::vector<int32_t> seqs[2] = {Tokens(14, 1), Tokens(11, 2)};
  // Slot s's position p is cell s * kSlotLen + p, except that sequence 1's
  // cells run backwards (cells need not be in order).
  std::vector<int32_t> cells[2];
  for (int p = 0; p < kSlotLen; ++p) {
    cells[0].push_back(p);
    cells[1].push_back(2 * kSlotLen - 1 - p);
  }
  // Steps: tokens of each sequence fed [begin, end).
  struct Step {
    int begin[2];
    int end[2];
  };
  const Step steps[] = {{{0, 0}, {5, 3}},     {{5, 3}, {8, 8}},
                        {{8, 8}, {9, 9}},     {{9, 9}, {10, 10}},
                        {{10, 10}, {14, 10}}, {{14, 10}, {14, 11}}};
  const std::vector<float> full[2] = {FullLogits(seqs[0]), FullLogits(seqs[1])};
  const int64_t nv = kConfig.n_vocab;
  for (const Step& step : steps) {
    SCOPED_TRACE(absl::StrCat("step ", step.begin[0], "/", step.begin[1]));
    batch.Clear();
    int rows[2] = {-1, -1};
    for (int s = 0; s < 2; ++s) {
      const int n = step.end[s] - step.begin[s];
      if (n == 0) continue;
      const std::vector<int32_t> toks(seqs[s].begin() + step.begin[s],
                                      seqs[s].begin() + step.end[s]);
      FERRY_ASSERT_OK_AND_ASSIGN(
          std::vector<int> out,
          batch.Add(toks, step.begin[s], cells[s], {n - 1}));
      rows[s] = out[0];
    }
    FERRY_ASSERT_OK(batch.Narrow(narrow));
    std::vector<float> logits(static_cast<size_t>(nv * shape.n_outputs));
    BatchIo io;
    io.In(*g.tokens, batch.tokens().data(), batch.tokens().size() * 4)
        .In(*g.pos, batch.pos().data(), batch.pos().size() * 4)
        .In(*g.kv_dst, batch.kv_dst().data(), batch.kv_dst().size() * 4)
        .In(*g.kv_window, batch.kv_window().data(),
            batch.kv_window().size() * 4)
        .In(*g.mask, batch.mask().data(), batch.mask().size() * 4)
        .In(*g.out_rows, batch.out_rows().data(), batch.out_rows().size() * 4)
        .Out(*g.logits, logits.data(), logits.size() * 4);
    FERRY_ASSERT_OK(sched_->Compute(g.graph, io));
    for (int s = 0; s < 2; ++s) {
      if (rows[s] < 0) continue;
      const int last = step.end[s] - 1;
      const std::vector<float> want(full[s].begin() + last * nv,
                                    full[s].begin() + (last + 1) * nv);
      const std::vector<float> got(logits.begin() + rows[s] * nv,
                                   logits.begin() + (rows[s] + 1) * nv);
      EXPECT_LE(testing::Nmse(want, got), 1e-10) << "sequence " << s;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Windows, LlamaBatchWindowTest,
                         ::testing::Values(40, 26));

// The cache holds f32 or f16 cells, refuses other types by name before
// allocating, and ranges attend over either on the CPU.
TEST_F(LlamaBatchTest, KvCacheCellTypes) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto f16,
                             LlamaKvCache::Create(*model_, 9, DType::kF16));
  EXPECT_EQ(f16->cell_type(), DType::kF16);
  EXPECT_EQ(f16->k(0)->dtype, DType::kF16);
  EXPECT_EQ(f16->v(0)->dtype, DType::kF16);
  for (DType bad : {DType::kBF16, DType::kQ8_0, DType::kI32}) {
    EXPECT_THAT(
        LlamaKvCache::Create(*model_, 9, bad).status(),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 HasSubstr(absl::StrCat("cells of type ", DTypeName(bad)))));
  }
  EXPECT_TRUE(CanAttendByRanges(*model_, DType::kF16));
}

TEST(LlamaBatchBuilderTest, RefusesWhatDoesNotFit) {
  const LlamaBatchShape shape{.n_tokens = 4, .n_window = 6, .n_outputs = 2};
  LlamaBatchBuilder batch(shape, 99);
  const std::vector<int32_t> cells = {0, 1, 2, 3, 4, 5};
  EXPECT_THAT(batch.Add({1, 2, 3, 4, 5}, 0, cells, {}),
              StatusIs(absl::StatusCode::kOutOfRange));
  // Five window entries are left (the last is padding's).
  EXPECT_THAT(batch.Add({1}, 5, cells, {0}),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(batch.Add({1, 2}, 0, cells, {0, 1}), testing::IsOk());
  EXPECT_THAT(batch.Add({1}, 0, cells, {0}),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("outputs")));
  EXPECT_THAT(batch.Add({1}, 0, cells, {3}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(batch.tokens_used(), 2);
  // Padding rows see only the last window entry.
  EXPECT_EQ(batch.mask()[3 * 6 + 5], 0.0f);
  EXPECT_EQ(batch.mask()[0 * 6 + 5], -std::numeric_limits<float>::infinity());
  // Padding writes no cell (several padding rows writing one would race);
  // it attends to the pad cell, which nothing writes.
  EXPECT_EQ(batch.kv_dst()[3], -1);
  EXPECT_EQ(batch.kv_window()[5], 99);
}

// Narrowing keeps the sequences' window entries and mask columns, moves
// padding's entry last, and Clear() restores the full window.
TEST(LlamaBatchBuilderTest, NarrowKeepsTheSequencesAndPadding) {
  const LlamaBatchShape shape{.n_tokens = 4, .n_window = 10, .n_outputs = 2};
  LlamaBatchBuilder batch(shape, 99);
  const std::vector<int32_t> cells = {7, 6, 5, 4};
  FERRY_ASSERT_OK_AND_ASSIGN(std::vector<int> rows,
                             batch.Add({1, 2}, 1, cells, {1}));
  FERRY_ASSERT_OK(batch.Add({3}, 0, {40}, {}).status());
  EXPECT_EQ(batch.window_used(), 4);  // Positions 0..2, then 0.
  const std::vector<float> full = batch.mask();
  EXPECT_THAT(batch.Narrow(Window(shape, 4)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(batch.Narrow(Window(shape, 11)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  FERRY_ASSERT_OK(batch.Narrow(Window(shape, 6)));
  EXPECT_EQ(batch.shape().n_window, 6);
  EXPECT_EQ(batch.window_left(), 1);
  EXPECT_EQ(batch.kv_window(), (std::vector<int32_t>{7, 6, 5, 40, 99, 99}));
  ASSERT_EQ(batch.mask().size(), 4u * 6u);
  for (int t = 0; t < 4; ++t) {
    for (int w = 0; w < 5; ++w) {
      EXPECT_EQ(batch.mask()[t * 6 + w], full[t * 10 + w]) << t << " " << w;
    }
    EXPECT_EQ(batch.mask()[t * 6 + 5], full[t * 10 + 9]) << t;
  }
  // Token 1 (position 2) sees entries 0..2; padding (token 3) only the last.
  EXPECT_EQ(batch.mask()[1 * 6 + 2], 0.0f);
  EXPECT_EQ(batch.mask()[1 * 6 + 3], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(batch.mask()[3 * 6 + 5], 0.0f);
  // Narrowed to exactly what is used, nothing more fits.
  FERRY_ASSERT_OK(batch.Narrow(Window(shape, 5)));
  EXPECT_EQ(batch.kv_window(), (std::vector<int32_t>{7, 6, 5, 40, 99}));
  EXPECT_THAT(batch.Add({1}, 0, {3}, {}),
              StatusIs(absl::StatusCode::kOutOfRange));
  batch.Clear();
  EXPECT_EQ(batch.shape().n_window, 10);
  EXPECT_EQ(batch.mask().size(), 4u * 10u);
  EXPECT_EQ(batch.window_left(), 9);
}

TEST(LlamaBatchShapeTest, Validates) {
  EXPECT_THAT(LlamaBatchShape({.n_tokens = 0}).Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(LlamaBatchShape({.n_tokens = 4, .n_window = 1}).Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(LlamaBatchShape({.n_tokens = 4, .n_window = 8, .n_outputs = 5})
                  .Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// Narrowing to fewer token slots and outputs keeps the tokens, positions,
// cells and output rows added, drops padding's slots past them, and refuses
// a shape that would drop what was added.
TEST(LlamaBatchBuilderTest, NarrowToFewerTokensAndOutputs) {
  const LlamaBatchShape shape{.n_tokens = 8, .n_window = 10, .n_outputs = 8};
  LlamaBatchBuilder batch(shape, 99);
  FERRY_ASSERT_OK(batch.Add({1, 2}, 1, {7, 6, 5}, {1}).status());
  FERRY_ASSERT_OK(batch.Add({3}, 0, {40}, {0}).status());
  const std::vector<float> full = batch.mask();
  EXPECT_THAT(
      batch.Narrow({.n_tokens = 2, .n_window = 10, .n_outputs = 2}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("narrow")));
  EXPECT_THAT(batch.Narrow({.n_tokens = 4, .n_window = 10, .n_outputs = 1}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(batch.Narrow({.n_tokens = 16, .n_window = 10, .n_outputs = 2}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  FERRY_ASSERT_OK(
      batch.Narrow({.n_tokens = 4, .n_window = 10, .n_outputs = 2}));
  EXPECT_EQ(batch.tokens(), (std::vector<int32_t>{1, 2, 3, 0}));
  EXPECT_EQ(batch.pos(), (std::vector<int32_t>{1, 2, 0, 0}));
  EXPECT_EQ(batch.kv_dst(), (std::vector<int32_t>{6, 5, 40, -1}));
  EXPECT_EQ(batch.out_rows(), (std::vector<int32_t>{1, 2}));
  ASSERT_EQ(batch.mask().size(), 4u * 10u);
  EXPECT_TRUE(
      std::equal(batch.mask().begin(), batch.mask().end(), full.begin()));
  EXPECT_EQ(batch.tokens_left(), 1);
  // Tokens and window together.
  FERRY_ASSERT_OK(batch.Narrow({.n_tokens = 4, .n_window = 5, .n_outputs = 2}));
  EXPECT_EQ(batch.kv_window(), (std::vector<int32_t>{7, 6, 5, 40, 99}));
  ASSERT_EQ(batch.mask().size(), 4u * 5u);
  for (int t = 0; t < 4; ++t) {
    for (int w = 0; w < 4; ++w) {
      EXPECT_EQ(batch.mask()[t * 5 + w], full[t * 10 + w]) << t << " " << w;
    }
    EXPECT_EQ(batch.mask()[t * 5 + 4], full[t * 10 + 9]) << t;
  }
  batch.Clear();
  EXPECT_EQ(batch.shape().n_tokens, 8);
  EXPECT_EQ(batch.tokens().size(), 8u);
  EXPECT_EQ(batch.out_rows().size(), 8u);
}

}  // namespace
}  // namespace ferry::llama
