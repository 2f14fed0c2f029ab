#include "ferry/engine/sampler.h"

#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry::engine {
namespace {

using ::ferry::testing::StatusIs;

TEST(SamplerTest, GreedyPicksTheLargestAndSkipsNonFinite) {
  Sampler greedy({});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(greedy.Sample({0.1f, 3.0f, 2.0f}), 1);
  EXPECT_EQ(greedy.Sample({nan, 1.0f, inf, 0.5f}), 1);
  EXPECT_EQ(greedy.Sample({2.0f, 2.0f}), 0);  // Lowest id among equals.
  EXPECT_EQ(greedy.Sample({-inf, -3.0f, -1.0f, -2.0f}), 2);
  EXPECT_EQ(greedy.Sample({nan, nan}), 0);
}

// Frequencies of 20000 draws follow softmax(logits / T) restricted as asked.
std::map<int, double> Frequencies(const SamplingParams& params,
                                  const std::vector<float>& logits) {
  Sampler sampler(params);
  std::map<int, double> freq;
  constexpr int kDraws = 20000;
  for (int i = 0; i < kDraws; ++i) freq[sampler.Sample(logits)] += 1.0 / kDraws;
  return freq;
}

TEST(SamplerTest, TemperatureFollowsSoftmax) {
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(5.0f)};
  auto f = Frequencies({.temperature = 1.0f, .seed = 1}, logits);
  EXPECT_NEAR(f[0], 0.125, 0.015);
  EXPECT_NEAR(f[1], 0.25, 0.015);
  EXPECT_NEAR(f[2], 0.625, 0.015);
  // Temperature 2 flattens: probabilities proportional to sqrt(1, 2, 5).
  f = Frequencies({.temperature = 2.0f, .seed = 2}, logits);
  const double z = 1 + std::sqrt(2.0) + std::sqrt(5.0);
  EXPECT_NEAR(f[0], 1 / z, 0.015);
  EXPECT_NEAR(f[2], std::sqrt(5.0) / z, 0.015);
}

TEST(SamplerTest, TopKAndTopPCut) {
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(5.0f),
                                     std::log(2.0f)};
  // top_k = 2: tokens 2 and 1 (1 beats 3 on equal logits by lower id).
  auto f = Frequencies({.temperature = 1.0f, .top_k = 2, .seed = 3}, logits);
  EXPECT_EQ(f.count(0) + f.count(3), 0u);
  EXPECT_NEAR(f[2], 5.0 / 7.0, 0.015);
  // top_p = 0.5: token 2 alone holds 0.5 of the mass.
  f = Frequencies({.temperature = 1.0f, .top_p = 0.5f, .seed = 4}, logits);
  EXPECT_EQ(f.size(), 1u);
  EXPECT_EQ(f.count(2), 1u);
  // top_p = 0.75: tokens 2, 1 and 3 (0.5 + 0.2 < 0.75 <= 0.5 + 0.2 + 0.2).
  f = Frequencies({.temperature = 1.0f, .top_p = 0.75f, .seed = 5}, logits);
  EXPECT_EQ(f.size(), 3u);
}

TEST(SamplerTest, SameSeedSameTokens) {
  const std::vector<float> logits = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f};
  Sampler a({.temperature = 1.0f, .seed = 9});
  Sampler b({.temperature = 1.0f, .seed = 9});
  Sampler c({.temperature = 1.0f, .seed = 10});
  int differ = 0;
  for (int i = 0; i < 50; ++i) {
    const int32_t x = a.Sample(logits);
    EXPECT_EQ(x, b.Sample(logits));
    differ += x != c.Sample(logits);
  }
  EXPECT_GT(differ, 0);
}

TEST(SamplerTest, ValidatesParams) {
  EXPECT_THAT(SamplingParams({.temperature = -1}).Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(
      SamplingParams({.temperature = std::numeric_limits<float>::quiet_NaN()})
          .Validate(),
      StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SamplingParams({.top_k = -2}).Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SamplingParams({.top_p = 0}).Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SamplingParams({.top_p = 1.5f}).Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(SamplingParams({.temperature = 0.7f, .top_k = 40, .top_p = 0.9f})
                  .Validate()
                  .ok());
}

TEST(SamplerTest, CountsNonFinite) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(CountNonFinite({1.0f, nan, -inf, inf, 0.0f}), 3);
  EXPECT_EQ(CountNonFinite({}), 0);
}

}  // namespace
}  // namespace ferry::engine
