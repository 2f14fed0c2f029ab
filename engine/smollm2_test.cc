// The real SmolLM2-135M-Instruct (Q4_1 GGUF) through the engine, on the CPU
// alone and split over sim0, sim1, cpu, compared with two references on the
// same file (testdata/smollm2_reference.json, written by
// testdata/make_smollm2_reference.py): llama.cpp itself, and "exact", a
// float64 numpy forward pass on the weights dequantized by the gguf package.
// Compared: the logits of every prompt position (the reference's top 16 per
// row), their argmax, and the greedy continuation (16 tokens). Skips,
// visibly, when the GGUF is absent (tools/fetch_smollm2.sh).
//
// Two ways to load: the default keeps the q4_1/q8_0 weights quantized and,
// like llama.cpp's CPU kernels, rounds activations to q8_1/q8_0 before the
// integer dot products of decode steps and short batches (prompts of 64+
// tokens multiply f32 activations by dequantized weights); F32Weights
// dequantizes every weight at load and computes the exact f32 products.
// The 8-bit rounding of activations is discontinuous, so any difference in
// summation order flips some roundings, and over 30 layers that moves
// logits by up to ~1 in either direction: llama-cpp-python 0.3.36 built
// here differs from the reference's llama.cpp by 0.58, ferry's quantized
// path from it by ~0.95 and from "exact" by ~0.87, so matching llama.cpp's
// arithmetic does not bring ferry closer than another llama.cpp build is.
// So f32 weights are held tightly to "exact", and quantized weights (and
// both vs llama.cpp) loosely, with every argmax of the prompt positions
// equal to llama.cpp's; a greedy continuation may leave a reference only at
// a near-tie of that reference (the margin between its two best logits
// below the stated bound). A wrong rope style, eps or weight mapping is off
// by whole units.
#include "ferry/models/gguf/testing/smollm2.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/backends/sim/sim_device.h"
#include "ferry/engine/engine.h"
#include "ferry/engine/testing/smollm2_reference.h"
#include "ferry/models/llama/llama_gguf.h"
#include "ferry/runtime/io_reactor.h"
#include "ferry/runtime/sanitizer_build.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::engine {
namespace {

using ::ferry::testing::IsOk;

using testing::Agreement;
using testing::Bounds;
using testing::Compare;
using testing::Reference;
using testing::ReferencePrompt;

constexpr Bounds kExactBounds = {0.005, 1.0, 0.01};
constexpr Bounds kLlamaCppBounds = {1.0, 0.95, 1.0};
// Quantized weights, 8-bit activations (max |err| seen: 0.95 vs llama.cpp,
// 0.87 vs exact; top-1 52/52 vs both).
constexpr Bounds kQuantizedBounds = {1.5, 0.95, 1.0};

struct Placement {
  int n_sims;
  bool f32_weights;
};

class SmolLm2Test : public ::testing::TestWithParam<Placement> {};

TEST_P(SmolLm2Test, MatchesLlamaCppAndExactMath) {
  FERRY_REQUIRE_SMOLLM2(path);
  const int n_sims = GetParam().n_sims;
  const bool f32_weights = GetParam().f32_weights;
  // Each case is many minutes under a sanitizer (30 layers, 52 positions,
  // 16 tokens each): the f32 kernels run under the sanitizers in the
  // engine's and the CPU backend's own tests, and the quantized cases
  // continue each prompt by 4 tokens instead of 16.
  if (kSanitizerBuild && f32_weights) {
    GTEST_SKIP() << "SKIPPED under a sanitizer: the quantized cases cover "
                    "the engine on the real model";
  }
  constexpr size_t kGreedySteps = kSanitizerBuild ? 4 : 16;
  FERRY_ASSERT_OK_AND_ASSIGN(
      std::vector<ReferencePrompt> reference,
      testing::LoadReference("engine/testdata/smollm2_reference.json"));
  ASSERT_FALSE(reference.empty());
  testing::TruncateGreedy(reference, kGreedySteps);

  FERRY_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Backend> cpu,
                             GetCpuDevice().CreateBackend("threads=2"));
  std::vector<std::unique_ptr<Device>> sim_devices;
  std::vector<std::unique_ptr<Backend>> sims;
  std::vector<Backend*> backends;
  for (int i = 0; i < n_sims; ++i) {
    FERRY_ASSERT_OK_AND_ASSIGN(
        auto device, SimDevice::Create(absl::StrCat("smollm2_sim", i), ""));
    FERRY_ASSERT_OK_AND_ASSIGN(auto backend, device->CreateBackend());
    backends.push_back(backend.get());
    sim_devices.push_back(std::move(device));
    sims.push_back(std::move(backend));
  }
  backends.push_back(cpu.get());
  ThreadPool pool(2);
  FERRY_ASSERT_OK_AND_ASSIGN(std::unique_ptr<IoReactor> io,
                             IoReactor::Create(&pool));
  FERRY_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<llama::LlamaModel> model,
      llama::LoadLlamaGguf(
          path, backends,
          {.weight_dtype = f32_weights ? llama::F32Weights : nullptr}, *io,
          /*n_ctx=*/64));
  for (Tensor* w : model->Weights()) {
    // 1-D norms are f32 in the file; every matrix is q4_1 or q8_0 there.
    EXPECT_EQ(IsQuantized(w->dtype), !f32_weights && w->ne[1] > 1) << w->name;
  }
  const int64_t n_vocab = model->config().n_vocab;

  FERRY_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Engine> engine,
      Engine::Create(*model, {.max_sequences = 4,
                              .max_sequence_len = 64,
                              .batch_tokens = 32,
                              .n_copies = n_sims > 0 ? 2 : 1}));
  std::vector<RequestHandle> handles;
  for (size_t k = 0; k < reference.size(); ++k) {
    Request req;
    req.id = absl::StrCat(k);
    req.prompt = reference[k].tokens;
    req.max_new_tokens = static_cast<int>(reference[k].exact.greedy.size());
    for (size_t p = 0; p < req.prompt.size(); ++p) {
      req.logits_positions.push_back(static_cast<int64_t>(p));
    }
    FERRY_ASSERT_OK_AND_ASSIGN(RequestHandle h, engine->Submit(req));
    handles.push_back(std::move(h));
  }

  const Bounds exact_bounds = f32_weights ? kExactBounds : kQuantizedBounds;
  const Bounds llama_cpp_bounds =
      f32_weights ? kLlamaCppBounds : kQuantizedBounds;
  Agreement vs_exact, vs_llama_cpp;
  for (size_t k = 0; k < reference.size(); ++k) {
    const ReferencePrompt& ref = reference[k];
    FERRY_ASSERT_OK_AND_ASSIGN(Result res, handles[k].Wait());
    EXPECT_EQ(res.non_finite_logits, 0);
    ASSERT_EQ(res.logits.size(), ref.tokens.size());
    for (const auto& [pos, row] : res.logits) {
      ASSERT_EQ(static_cast<int64_t>(row.size()), n_vocab);
    }
    std::string ours;
    for (int32_t t : res.tokens) absl::StrAppend(&ours, t, " ");
    const std::string exact = Compare(ref.exact, res, exact_bounds, vs_exact);
    const std::string llama =
        Compare(ref.llama_cpp, res, llama_cpp_bounds, vs_llama_cpp);
    std::printf(
        "prompt %zu (%zu tokens): ferry greedy %s\n  vs exact:     %s\n  vs "
        "llama.cpp: %s\n",
        k, ref.tokens.size(), ours.c_str(), exact.c_str(), llama.c_str());
  }
  const auto check = [&](const char* name, const Agreement& a,
                         const Bounds& b) {
    std::printf(
        "%d sims + cpu, %s weights vs %s: max |err| %.2e over the top-16 "
        "logits of %d positions, top-1 agreement %d/%d, greedy equal %d/%zu "
        "(%d left at a clear choice)\n",
        n_sims, f32_weights ? "f32" : "quantized", name, a.max_err, a.rows,
        a.top1, a.rows, a.greedy_equal, reference.size(), a.greedy_bad);
    EXPECT_LE(a.max_err, b.max_abs_error) << name;
    EXPECT_GE(static_cast<double>(a.top1) / a.rows, b.min_top1_agreement)
        << name;
    EXPECT_EQ(a.greedy_bad, 0) << name;
  };
  check("exact", vs_exact, exact_bounds);
  check("llama.cpp", vs_llama_cpp, llama_cpp_bounds);
}

INSTANTIATE_TEST_SUITE_P(Placements, SmolLm2Test,
                         ::testing::Values(Placement{0, false},
                                           Placement{2, false},
                                           Placement{0, true}),
                         [](const auto& info) {
                           return absl::StrCat(
                               info.param.n_sims == 0 ? "cpu" : "sim0_sim1_cpu",
                               info.param.f32_weights ? "_f32" : "_quantized");
                         });

}  // namespace
}  // namespace ferry::engine
