#include "ferry/backends/sim/sim_config.h"

#include "ferry/graph/op.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::StatusIs;
using ::testing::HasSubstr;

TEST(SimConfigTest, EmptyGivesDefaults) {
  FERRY_ASSERT_OK_AND_ASSIGN(SimConfig config, ParseSimConfig(""));
  EXPECT_EQ(config.mem_bytes, uint64_t{8} << 30);
  EXPECT_EQ(config.max_alloc(), uint64_t{8} << 30);
  EXPECT_DOUBLE_EQ(config.flops, 20e12);
  EXPECT_DOUBLE_EQ(config.mem_bw, 1e12);
  EXPECT_DOUBLE_EQ(config.h2d_bw, 25e9);
  EXPECT_DOUBLE_EQ(config.d2h_bw, 25e9);
  EXPECT_DOUBLE_EQ(config.d2d_bw, 50e9);
  EXPECT_DOUBLE_EQ(config.pageable_h2d_bw(), 12.5e9);
  EXPECT_EQ(config.latency_ns, 10000);
  EXPECT_EQ(config.launch_ns, 0);
  EXPECT_DOUBLE_EQ(config.time_scale, 1.0);
  EXPECT_TRUE(config.ops.all());
}

TEST(SimConfigTest, ParsesTheIssueExample) {
  FERRY_ASSERT_OK_AND_ASSIGN(
      SimConfig config,
      ParseSimConfig("sim:mem=8GiB,flops=20T,bw=1TB/s,h2d=25GB/s,lat=10us,"
                     "ops=-soft_max"));
  EXPECT_EQ(config.mem_bytes, uint64_t{8} << 30);
  EXPECT_DOUBLE_EQ(config.flops, 20e12);
  EXPECT_DOUBLE_EQ(config.mem_bw, 1e12);
  EXPECT_EQ(config.latency_ns, 10000);
  EXPECT_FALSE(config.SupportsOp(Op::kSoftMax));
  EXPECT_TRUE(config.SupportsOp(Op::kMulMat));
  EXPECT_TRUE(config.SupportsOp(Op::kNone));
}

TEST(SimConfigTest, Units) {
  FERRY_ASSERT_OK_AND_ASSIGN(
      SimConfig config,
      ParseSimConfig("mem=512MB,max_alloc=1.5MiB,flops=2.5G,bw=900GiB/s,"
                     "h2d=64GB/s,d2h=12000MB/s,d2d=1e11B/s,pageable=3GB/s,"
                     "lat=1.5ms,launch=250ns,scale=10"));
  EXPECT_EQ(config.mem_bytes, 512000000u);
  EXPECT_EQ(config.max_alloc(), 1572864u);
  EXPECT_DOUBLE_EQ(config.flops, 2.5e9);
  EXPECT_DOUBLE_EQ(config.mem_bw, 900.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(config.h2d_bw, 64e9);
  EXPECT_DOUBLE_EQ(config.d2h_bw, 12e9);
  EXPECT_DOUBLE_EQ(config.d2d_bw, 1e11);
  EXPECT_DOUBLE_EQ(config.pageable_h2d_bw(), 3e9);
  EXPECT_DOUBLE_EQ(config.pageable_d2h_bw(), 3e9);
  EXPECT_EQ(config.latency_ns, 1500000);
  EXPECT_EQ(config.launch_ns, 250);
  EXPECT_DOUBLE_EQ(config.time_scale, 10);
}

TEST(SimConfigTest, OpsListsOnlyTheAllowedOps) {
  FERRY_ASSERT_OK_AND_ASSIGN(SimConfig config,
                             ParseSimConfig("ops=mul_mat,add,lat=0"));
  EXPECT_TRUE(config.SupportsOp(Op::kMulMat));
  EXPECT_TRUE(config.SupportsOp(Op::kAdd));
  EXPECT_FALSE(config.SupportsOp(Op::kMul));
  EXPECT_TRUE(config.SupportsOp(Op::kNone));
  EXPECT_EQ(config.latency_ns, 0);
}

TEST(SimConfigTest, OpsRemovesSeveral) {
  FERRY_ASSERT_OK_AND_ASSIGN(SimConfig config,
                             ParseSimConfig("ops=-soft_max,-rope, mem=1GiB"));
  EXPECT_FALSE(config.SupportsOp(Op::kSoftMax));
  EXPECT_FALSE(config.SupportsOp(Op::kRope));
  EXPECT_TRUE(config.SupportsOp(Op::kAdd));
  EXPECT_EQ(config.mem_bytes, uint64_t{1} << 30);
}

TEST(SimConfigTest, FaultsAndGuard) {
  FERRY_ASSERT_OK_AND_ASSIGN(
      SimConfig config,
      ParseSimConfig("fail_alloc=2,fail_copy=3,fail_kernel=1,guard=off"));
  EXPECT_EQ(config.faults.alloc, 2);
  EXPECT_EQ(config.faults.copy, 3);
  EXPECT_EQ(config.faults.kernel, 1);
  EXPECT_FALSE(config.guarded());
  FERRY_ASSERT_OK_AND_ASSIGN(config, ParseSimConfig("guard=on"));
  EXPECT_TRUE(config.guarded());
}

TEST(SimConfigTest, ToStringRoundTrips) {
  FERRY_ASSERT_OK_AND_ASSIGN(
      SimConfig config,
      ParseSimConfig("mem=3GiB,flops=7T,bw=2TB/s,h2d=64GB/s,d2h=32GB/s,"
                     "d2d=100GB/s,pageable=6GB/s,lat=3us,launch=2us,scale=2,"
                     "guard=off,fail_copy=4,ops=-rope,-concat"));
  FERRY_ASSERT_OK_AND_ASSIGN(SimConfig again,
                             ParseSimConfig(config.ToString()));
  EXPECT_EQ(again.ToString(), config.ToString());
  EXPECT_EQ(again.mem_bytes, config.mem_bytes);
  EXPECT_DOUBLE_EQ(again.flops, config.flops);
  EXPECT_DOUBLE_EQ(again.d2h_bw, config.d2h_bw);
  EXPECT_EQ(again.launch_ns, config.launch_ns);
  EXPECT_EQ(again.ops, config.ops);
  EXPECT_EQ(again.faults.copy, 4);
}

TEST(SimConfigTest, ClearErrors) {
  EXPECT_THAT(
      ParseSimConfig("flops=abc"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "sim config 'flops=abc': expected a number with an optional "
               "k/M/G/T suffix"));
  EXPECT_THAT(ParseSimConfig("mem=8XB"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("sim config 'mem=8XB': expected a size")));
  EXPECT_THAT(ParseSimConfig("h2d=25GB"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'h2d=25GB': expected a rate like 25GB/s")));
  EXPECT_THAT(ParseSimConfig("lat=10"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'lat=10': expected a duration like 10us")));
  EXPECT_THAT(ParseSimConfig("speed=3"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown key 'speed'")));
  EXPECT_THAT(ParseSimConfig("mem"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'mem': expected key=value")));
  EXPECT_THAT(ParseSimConfig("ops=-soft_max,-sotf_max"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown op 'sotf_max' (known: mul_mat")));
  EXPECT_THAT(
      ParseSimConfig("ops=-soft_max,add"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not both")));
  EXPECT_THAT(ParseSimConfig("h2d=0GB/s"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("must be positive")));
  EXPECT_THAT(ParseSimConfig("scale=-1"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'scale=-1': expected a positive number")));
  EXPECT_THAT(
      ParseSimConfig("mem=1GiB,max_alloc=2GiB"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_alloc")));
  EXPECT_THAT(ParseSimConfig("fail_copy=x"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("expected a count")));
  EXPECT_THAT(ParseSimConfig("guard=maybe"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("expected on or off")));
}

}  // namespace
}  // namespace ferry
