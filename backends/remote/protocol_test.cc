#include "ferry/backends/remote/protocol.h"

#include <string>

#include "ferry/backends/host_buffer.h"
#include "ferry/backends/remote/wire_graph.h"
#include "ferry/graph/context.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::remote {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(ProtocolTest, CommandsRoundTripAndAreStrict) {
  Message m;
  m.kind = static_cast<uint8_t>(Cmd::kCopyLocal);
  m.seq = 7;
  m.stream = 3;
  m.src_stream = 4;
  m.src_buffer = 5;
  m.src_offset = 6;
  m.buffer = 8;
  m.offset = 9;
  m.size = 1ull << 40;
  const std::string header = EncodeCommand(m);
  FERRY_ASSERT_OK_AND_ASSIGN(Message back, DecodeCommand(header));
  EXPECT_EQ(back.kind, m.kind);
  EXPECT_EQ(back.size, m.size);
  EXPECT_EQ(back.src_offset, 6u);
  EXPECT_EQ(EncodeCommand(back), header);
  // Every truncation is a status.
  for (size_t n = 0; n < header.size(); ++n) {
    EXPECT_THAT(DecodeCommand(header.substr(0, n)), Not(IsOk())) << n;
  }
  EXPECT_THAT(DecodeCommand(header + "x"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("after")));
  std::string bad_mask = header;
  bad_mask[1] ^= 0x01;
  EXPECT_THAT(
      DecodeCommand(bad_mask),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("field mask")));
  EXPECT_THAT(
      DecodeCommand(std::string(1, '\x7f')),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown")));
}

TEST(ProtocolTest, LengthsAreBoundedBeforeTheyAreRead) {
  Writer w;
  w.U8(static_cast<uint8_t>(Cmd::kDefineGraph));
  w.U32(CommandFields(Cmd::kDefineGraph));
  w.U64(1);
  w.U64(2);
  w.U32(0);
  w.U32(0xfffffff0u);  // A blob "length" far past the message.
  EXPECT_THAT(DecodeCommand(w.out()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("blob")));
  Message status;
  status.kind = static_cast<uint8_t>(ReplyKind::kResult);
  status.set_status(absl::NotFoundError("no buffer 3"));
  FERRY_ASSERT_OK_AND_ASSIGN(Message back, DecodeReply(EncodeReply(status)));
  EXPECT_THAT(back.status(),
              StatusIs(absl::StatusCode::kNotFound, "no buffer 3"));
}

TEST(WireGraphTest, RoundTripsPlacedNodesAndChecksExtents) {
  HostBufferType type("test", 64, nullptr);
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer, type.Allocate(1024));
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x, ctx.NewTensor(DType::kF32, {64}, "x"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, Scale(ctx, x, 2.0f));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * z, Add(ctx, y, x));
  z->name = "z";
  Tensor* nodes[] = {x, y, z};
  uint64_t z_offset = 512;
  auto locate = [&](const Tensor& t) -> absl::StatusOr<WirePlace> {
    return WirePlace{1, &t == x ? 0u : &t == y ? 256u : z_offset};
  };
  WireLocate ref = locate;
  for (Tensor* t : nodes) t->data = buffer->base();
  FERRY_ASSERT_OK_AND_ASSIGN(std::string blob, EncodeNodes(nodes, &ref));
  auto lookup = [&](uint64_t id) -> absl::StatusOr<Buffer*> {
    if (id == 1) return buffer.get();
    return absl::NotFoundError("no buffer");
  };
  WireLookup look = lookup;
  FERRY_ASSERT_OK_AND_ASSIGN(auto graph, DecodeGraph(blob, &look));
  ASSERT_EQ(graph->nodes.size(), 2u);  // The leaf x is not a node.
  const Tensor& zz = *graph->nodes[1];
  EXPECT_EQ(zz.op, Op::kAdd);
  EXPECT_EQ(zz.src[0], graph->nodes[0]);  // Wired to the decoded y.
  EXPECT_EQ(zz.data, static_cast<char*>(buffer->base()) + 512);
  EXPECT_EQ(zz.name, "z");  // Names travel for error messages.
  // z's 256 bytes at 800 leave the buffer.
  z_offset = 800;
  FERRY_ASSERT_OK_AND_ASSIGN(blob, EncodeNodes(nodes, &ref));
  EXPECT_THAT(DecodeGraph(blob, &look),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("'")));
  // Unplaced and null nodes are refused at encoding, naming them.
  z->data = nullptr;
  EXPECT_THAT(EncodeNodes(nodes, &ref),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("'")));
  Tensor* null_nodes[] = {nullptr};
  EXPECT_THAT(EncodeNodes(null_nodes, &ref), Not(IsOk()));
  // A query carries no places, and a placed decode of it is refused.
  FERRY_ASSERT_OK_AND_ASSIGN(std::string query, EncodeNodes(nodes, nullptr));
  FERRY_EXPECT_OK(DecodeGraph(query, nullptr).status());
  EXPECT_THAT(DecodeGraph(query, &look), Not(IsOk()));
}

TEST(WireGraphTest, ExtentArithmeticDoesNotOverflow) {
  Tensor t;
  t.ne = {int64_t{1} << 40, int64_t{1} << 40, 1, 1};
  t.nb = {4, int64_t{1} << 42, 0, 0};
  EXPECT_THAT(CheckedExtent(t), Not(IsOk()));
  t.ne = {4, 1, 1, 1};
  t.nb = {-4, 16, 16, 16};
  EXPECT_THAT(CheckedExtent(t), Not(IsOk()));
  t.nb = {4, 16, 16, 16};
  FERRY_ASSERT_OK_AND_ASSIGN(uint64_t extent, CheckedExtent(t));
  EXPECT_EQ(extent, 16u);
  t.ne[2] = 0;
  FERRY_ASSERT_OK_AND_ASSIGN(extent, CheckedExtent(t));
  EXPECT_EQ(extent, 0u);
  // Four dims of up to 2^40 each: their product (2^136 here) must not wrap
  // to zero elements (found by the fuzzer).
  t.ne = {int64_t{1} << 38, int64_t{1} << 32, int64_t{1} << 32,
          int64_t{1} << 34};
  t.nb = {4, 256, 16384, 16384};
  EXPECT_THAT(CheckedExtent(t), Not(IsOk()));
}

}  // namespace
}  // namespace ferry::remote
