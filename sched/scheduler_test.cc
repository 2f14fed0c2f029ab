// The scheduler on fake devices (backends/testing): what it asks of
// backends, in what order, and that it never blocks on a transfer.
#include "ferry/sched/scheduler.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/alloc/weights.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/backends/testing/fake_device.h"
#include "ferry/graph/context.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::FakeDevice;
using ::ferry::testing::FakeGate;
using ::ferry::testing::FakeOp;
using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kIn = 16;
constexpr int64_t kTokens = 4;

// x -> h0 = relu(w0 x) -> h1 = relu(w1 h0) -> out = head h1, each weight in
// the memory the test chooses (0: fake0, 1: fake1, 2: the CPU).
struct Mlp {
  Context weights;
  Context ctx;
  Tensor* w[3] = {};
  Tensor* x = nullptr;
  Tensor* out = nullptr;
  Graph graph;
  std::vector<std::unique_ptr<Buffer>> buffers;
};

class SchedulerFakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      devices_.push_back(FakeDevice::Create(absl::StrCat("fake", i)));
      FERRY_ASSERT_OK_AND_ASSIGN(auto backend,
                                 devices_.back()->CreateBackend());
      backends_.push_back(std::move(backend));
    }
    FERRY_ASSERT_OK_AND_ASSIGN(cpu_, GetCpuDevice().CreateBackend("threads=1"));
  }

  std::vector<Backend*> All() {
    return {backends_[0].get(), backends_[1].get(), cpu_.get()};
  }

  // `where[i]`: the backend index holding weight i.
  std::unique_ptr<Mlp> MakeMlp(std::array<int, 3> where) {
    auto m = std::make_unique<Mlp>();
    std::vector<Context> per(3);
    const int64_t out_dim[3] = {kIn, kIn, 8};
    for (int i = 0; i < 3; ++i) {
      m->w[i] = *per[where[i]].NewTensor(DType::kF32, {kIn, out_dim[i]},
                                         absl::StrCat("w", i));
      SetWeight(*m->w[i]);
    }
    for (int b = 0; b < 3; ++b) {
      if (per[b].num_tensors() == 0) continue;
      auto buffers = AllocateWeights(per[b], *All()[b]->default_buffer_type());
      EXPECT_THAT(buffers, IsOk());
      for (auto& buffer : *buffers) m->buffers.push_back(std::move(buffer));
    }
    for (int i = 0; i < 3; ++i) {
      std::vector<float> v(static_cast<size_t>(m->w[i]->NumElements()));
      for (size_t k = 0; k < v.size(); ++k) {
        v[k] = 0.05f * static_cast<float>((k * 7 + i) % 11) - 0.2f;
      }
      EXPECT_THAT(SetTensorData(*m->w[i], v.data()), IsOk());
    }
    m->x = *m->ctx.NewTensor(DType::kF32, {kIn, kTokens}, "x");
    SetInput(*m->x);
    Tensor* h0 = *Relu(m->ctx, *MulMat(m->ctx, m->w[0], m->x));
    Tensor* h1 = *Relu(m->ctx, *MulMat(m->ctx, m->w[1], h0));
    m->out = *MulMat(m->ctx, m->w[2], h1);
    m->out->name = "out";
    SetOutput(*m->out);
    m->graph = *Graph::Build({m->out});
    weight_contexts_.push_back(std::move(per));
    return m;
  }

  // Runs batch k on a CPU-only scheduler: the reference.
  std::vector<float> Reference(std::array<int, 3> where, int k) {
    auto m = MakeMlp(where);
    // The same weights on the CPU.
    auto cpu_model = MakeMlp({2, 2, 2});
    for (int i = 0; i < 3; ++i) {
      std::vector<float> v(static_cast<size_t>(m->w[i]->NumElements()));
      EXPECT_THAT(GetTensorData(*m->w[i], v.data()), IsOk());
      EXPECT_THAT(SetTensorData(*cpu_model->w[i], v.data()), IsOk());
    }
    auto sched = Scheduler::Create({cpu_.get()});
    EXPECT_THAT(sched, IsOk());
    std::vector<float> in = Input(k), out(8 * kTokens, NAN);
    EXPECT_THAT((*sched)->Compute(
                    cpu_model->graph,
                    BatchIo()
                        .In(*cpu_model->x, in.data(), in.size() * 4)
                        .Out(*cpu_model->out, out.data(), out.size() * 4)),
                IsOk());
    return out;
  }

  static std::vector<float> Input(int k) {
    std::vector<float> in(kIn * kTokens);
    for (size_t i = 0; i < in.size(); ++i) {
      in[i] = 0.1f * static_cast<float>((i + 3 * k) % 9) - 0.4f;
    }
    return in;
  }

  std::vector<std::unique_ptr<FakeDevice>> devices_;
  std::vector<std::unique_ptr<Backend>> backends_;
  std::unique_ptr<Backend> cpu_;
  std::vector<std::vector<Context>> weight_contexts_;
};

// Every placement: the fake devices never see a transfer with pageable
// memory (which would block the caller), and results are right.
TEST_F(SchedulerFakeTest, NoTransferIsPageableInAnyPlacement) {
  const std::vector<std::array<int, 3>> placements = {
      {0, 1, 1},  // All on devices.
      {0, 1, 2},  // Head on the CPU.
      {0, 2, 1},  // The middle layer on the CPU.
      {2, 2, 2},  // Everything on the CPU (no device work).
  };
  for (const auto& where : placements) {
    SCOPED_TRACE(absl::StrCat(where[0], where[1], where[2]));
    auto m = MakeMlp(where);
    FERRY_ASSERT_OK_AND_ASSIGN(auto sched,
                               Scheduler::Create(All(), {.n_copies = 3}));
    for (auto& d : devices_) d->ClearLog();
    constexpr int kBatches = 6;
    std::vector<std::vector<float>> out(kBatches);
    std::vector<std::vector<float>> in(kBatches);
    std::vector<Event> done;
    for (int k = 0; k < kBatches; ++k) {
      in[k] = Input(k);
      out[k].assign(8 * kTokens, NAN);
      FERRY_ASSERT_OK_AND_ASSIGN(
          Event event,
          sched->Submit(m->graph,
                        BatchIo()
                            .In(*m->x, in[k].data(), in[k].size() * 4)
                            .Out(*m->out, out[k].data(), out[k].size() * 4)));
      done.push_back(event);
    }
    for (const Event& event : done) FERRY_ASSERT_OK(event.WaitBlocking());
    for (int k = 0; k < kBatches; ++k) {
      const std::vector<float> expected = Reference(where, k);
      for (size_t i = 0; i < expected.size(); ++i) {
        ASSERT_TRUE(std::abs(out[k][i] - expected[i]) <= 1e-5f)
            << "batch " << k << " [" << i << "] " << out[k][i] << " vs "
            << expected[i];
      }
    }
    for (auto& d : devices_) {
      for (const FakeOp& op : d->log()) {
        EXPECT_FALSE(op.pageable)
            << op.backend << " transfer of '" << op.tensor << "' (" << op.bytes
            << " bytes) with pageable host memory";
      }
    }
  }
}

// With every device held, Submit returns for each free slot without waiting
// for any device; the batches run when the devices do.
TEST_F(SchedulerFakeTest, SubmitDoesNotWaitForDevices) {
  auto m = MakeMlp({0, 1, 2});
  FERRY_ASSERT_OK_AND_ASSIGN(auto sched,
                             Scheduler::Create(All(), {.n_copies = 3}));
  FERRY_ASSERT_OK(sched->AllocGraph(m->graph));
  FakeGate gate;
  for (auto& backend : backends_) {
    static_cast<testing::FakeBackend*>(backend.get())->Hold(gate);
  }
  std::vector<std::vector<float>> in(3), out(3);
  auto submitted = std::async(std::launch::async, [&] {
    std::vector<Event> events;
    for (int k = 0; k < 3; ++k) {
      in[k] = Input(k);
      out[k].assign(8 * kTokens, NAN);
      auto event = sched->Submit(
          m->graph, BatchIo()
                        .In(*m->x, in[k].data(), in[k].size() * 4)
                        .Out(*m->out, out[k].data(), out[k].size() * 4));
      EXPECT_THAT(event, IsOk());
      if (event.ok()) events.push_back(*event);
    }
    return events;
  });
  ASSERT_EQ(submitted.wait_for(std::chrono::seconds(20)),
            std::future_status::ready)
      << "Submit waited for a held device";
  std::vector<Event> events = submitted.get();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_FALSE(events.back().IsComplete());
  gate.Open();
  for (const Event& event : events) FERRY_EXPECT_OK(event.WaitBlocking());
  EXPECT_EQ(out[2], Reference({0, 1, 2}, 2));
}

// A new graph built where the planned one lived is a new graph: the
// scheduler plans it rather than running the old plan.
TEST_F(SchedulerFakeTest, ANewGraphAtTheOldAddressIsPlannedAgain) {
  auto m = MakeMlp({0, 1, 2});
  FERRY_ASSERT_OK_AND_ASSIGN(auto sched,
                             Scheduler::Create(All(), {.n_copies = 2}));
  std::vector<float> in = Input(0), out(8 * kTokens, NAN);
  FERRY_ASSERT_OK(
      sched->Compute(m->graph, BatchIo()
                                   .In(*m->x, in.data(), in.size() * 4)
                                   .Out(*m->out, out.data(), out.size() * 4)));
  const std::vector<float> plain = Reference({0, 1, 2}, 0);
  EXPECT_EQ(out, plain);

  Tensor* clipped = *Relu(m->ctx, m->out);
  clipped->name = "clipped";
  SetOutput(*clipped);
  const Graph* address = &m->graph;
  m->graph = *Graph::Build({clipped});
  ASSERT_EQ(&m->graph, address);
  std::vector<float> got(8 * kTokens, NAN);
  FERRY_ASSERT_OK(
      sched->Compute(m->graph, BatchIo()
                                   .In(*m->x, in.data(), in.size() * 4)
                                   .Out(*clipped, got.data(), got.size() * 4)));
  std::vector<float> want = plain;
  for (float& v : want) v = v > 0.0f ? v : 0.0f;
  ASSERT_TRUE(std::any_of(plain.begin(), plain.end(), [](float v) {
    return v < 0.0f;
  })) << "the test needs negative outputs to tell the graphs apart";
  EXPECT_EQ(got, want);
}

TEST_F(SchedulerFakeTest, AFailureNamesTheBatchTheSplitAndTheBackend) {
  auto m = MakeMlp({0, 1, 1});
  FERRY_ASSERT_OK_AND_ASSIGN(auto sched,
                             Scheduler::Create(All(), {.n_copies = 2}));
  std::vector<float> in = Input(0), out(8 * kTokens);
  BatchIo io = BatchIo()
                   .In(*m->x, in.data(), in.size() * 4)
                   .Out(*m->out, out.data(), out.size() * 4);
  FERRY_ASSERT_OK(sched->Compute(m->graph, io));
  devices_[1]->FailNextCompute(absl::DataLossError("planted fault"));
  EXPECT_THAT(sched->Compute(m->graph, io),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("batch 1"), HasSubstr("on fake1"),
                             HasSubstr("split "), HasSubstr("planted fault"))));
  // Synchronize reports it once more and clears it; the scheduler works.
  EXPECT_THAT(sched->Synchronize(), StatusIs(absl::StatusCode::kDataLoss));
  FERRY_ASSERT_OK(sched->Compute(m->graph, io));
  EXPECT_EQ(out, Reference({0, 1, 1}, 0));
}

TEST_F(SchedulerFakeTest, BadBatchIoIsRefusedNamingTheTensor) {
  auto m = MakeMlp({0, 1, 1});
  FERRY_ASSERT_OK_AND_ASSIGN(auto sched, Scheduler::Create(All()));
  std::vector<float> in = Input(0), out(8 * kTokens);
  EXPECT_THAT(sched->Submit(m->graph, BatchIo().In(*m->x, in.data(), 12)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'x'"), HasSubstr("not 12"))));
  EXPECT_THAT(
      sched->Submit(m->graph,
                    BatchIo().In(*m->out, out.data(), out.size() * 4)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("flagged input")));
  EXPECT_THAT(
      sched->Submit(m->graph, BatchIo()
                                  .In(*m->x, in.data(), in.size() * 4)
                                  .Out(*m->x, in.data(), in.size() * 4)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("flagged output")));
  // An input that is neither given nor placed.
  EXPECT_THAT(sched->Submit(m->graph),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("pass it in BatchIo")));
  EXPECT_EQ(sched->stats().batches, 0);
}

TEST_F(SchedulerFakeTest, CopyBuffersThatDoNotFitNameWhatWasAsked) {
  // A device with 64 KiB: its weights fit, 4 slots of its copies do not.
  auto small = FakeDevice::Create("small", {.memory_bytes = 64 << 10});
  FERRY_ASSERT_OK_AND_ASSIGN(auto backend, small->CreateBackend());
  Context ctx;
  Tensor* x = *ctx.NewTensor(DType::kF32, {1024, 8}, "x");  // 32 KiB.
  SetInput(*x);
  Tensor* y = *Relu(ctx, x);
  Graph graph = *Graph::Build({y});
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto sched,
      Scheduler::Create({backend.get(), cpu_.get()}, {.n_copies = 4}));
  FERRY_ASSERT_OK(sched->SetTensorBackend(*y, *backend));
  EXPECT_THAT(sched->AllocGraph(graph),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("copies buffer for 'small'"),
                             HasSubstr("4 slots"), HasSubstr("bytes"))));
}

TEST_F(SchedulerFakeTest, PinningANodeTheDeviceRefusesSaysWhy) {
  auto picky = FakeDevice::Create("picky", {.supports_op = [](const Tensor& n) {
                                    return n.op != Op::kRelu;
                                  }});
  FERRY_ASSERT_OK_AND_ASSIGN(auto backend, picky->CreateBackend());
  Context ctx;
  Tensor* x = *ctx.NewTensor(DType::kF32, {16, 8}, "x");
  SetInput(*x);
  Tensor* y = *Relu(ctx, x);
  y->name = "y";
  FERRY_ASSERT_OK_AND_ASSIGN(auto sched,
                             Scheduler::Create({backend.get(), cpu_.get()}));
  EXPECT_THAT(sched->SetTensorBackend(*y, *backend),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("cannot pin 'y' (relu) to 'picky"),
                             HasSubstr("the test's supports_op refuses"))));
}

}  // namespace
}  // namespace ferry
