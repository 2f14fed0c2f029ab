#include "ferry/backends/remote/protocol/protocol.h"

#include <string>
#include <vector>

#include "ferry/backends/cpu/cpu_packed_buffer.h"
#include "ferry/backends/host_buffer.h"
#include "ferry/backends/remote/protocol/wire_graph.h"
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

// A capability is fresh randomness each time and travels whole in the
// messages that carry one.
TEST(ProtocolTest, CapabilitiesAreRandomAndTravelWhole) {
  FERRY_ASSERT_OK_AND_ASSIGN(Capability a, NewCapability());
  FERRY_ASSERT_OK_AND_ASSIGN(Capability b, NewCapability());
  EXPECT_FALSE(SameCapability(a, b));
  EXPECT_TRUE(SameCapability(a, a));
  EXPECT_NE(a, (Capability{0, 0}));
  Message m;
  m.kind = static_cast<uint8_t>(Cmd::kPeerData);
  m.value = 3;
  m.id = 9;
  m.cap = a;
  FERRY_ASSERT_OK_AND_ASSIGN(Message back, DecodeCommand(EncodeCommand(m)));
  EXPECT_EQ(back.cap, a);
  // Cut short inside the capability: refused.
  std::string cut = EncodeCommand(m);
  cut.resize(cut.size() - 1);
  EXPECT_FALSE(DecodeCommand(cut).ok());
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

TEST(ProtocolTest, TraceSpansRoundTripAndLiesAreRefused) {
  const std::vector<WireSpan> spans = {{"cpu/compute", "mul_mat w", 5, 9},
                                       {"cpu/copy", "", -3, -3}};
  const std::string data = EncodeTraceSpans(spans);
  FERRY_ASSERT_OK_AND_ASSIGN(std::vector<WireSpan> back,
                             DecodeTraceSpans(data));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].track, "cpu/compute");
  EXPECT_EQ(back[0].name, "mul_mat w");
  EXPECT_EQ(back[0].begin_ns, 5);
  EXPECT_EQ(back[0].end_ns, 9);
  EXPECT_EQ(back[1].begin_ns, -3);
  FERRY_ASSERT_OK_AND_ASSIGN(back, DecodeTraceSpans(EncodeTraceSpans({})));
  EXPECT_TRUE(back.empty());
  // A count the bytes cannot hold, a truncation, trailing bytes, a span
  // that ends before it begins.
  std::string lie = data;
  lie[3] = '\x7f';
  EXPECT_FALSE(DecodeTraceSpans(lie).ok());
  EXPECT_FALSE(DecodeTraceSpans(data.substr(0, data.size() - 1)).ok());
  EXPECT_FALSE(DecodeTraceSpans(data + "x").ok());
  EXPECT_FALSE(DecodeTraceSpans(EncodeTraceSpans({{"t", "n", 9, 5}})).ok());
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
  // Without places nothing is placed, and a graph to run refuses it.
  FERRY_ASSERT_OK_AND_ASSIGN(std::string query, EncodeNodes(nodes, nullptr));
  FERRY_EXPECT_OK(DecodeGraph(query, nullptr).status());
  EXPECT_THAT(DecodeGraph(query, &look), Not(IsOk()));
  // A SupportsOp query places what it can (x and y) and leaves z unplaced;
  // only a query decode takes that.
  FERRY_ASSERT_OK_AND_ASSIGN(
      query,
      EncodeNodes(nodes, &ref, /*with_names=*/false, WirePlacing::kWhereKnown));
  FERRY_ASSERT_OK_AND_ASSIGN(graph, DecodeGraph(query, &look, /*query=*/true));
  ASSERT_EQ(graph->nodes.size(), 2u);
  EXPECT_EQ(graph->nodes[0]->data, static_cast<char*>(buffer->base()) + 256);
  EXPECT_EQ(graph->nodes[1]->data, nullptr);
  EXPECT_EQ(graph->nodes[1]->src[1]->data, buffer->base());  // x, a leaf.
  EXPECT_THAT(DecodeGraph(query, &look), Not(IsOk()));
  EXPECT_THAT(DecodeGraph(query, nullptr, /*query=*/true), Not(IsOk()));
}

TEST(WireGraphTest, ALeafViewCarriesItsSource) {
  HostBufferType type("test", 64, nullptr);
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer, type.Allocate(4096));
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * w,
                             ctx.NewTensor(DType::kF32, {16, 32}, "w"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * v,
                             View2D(ctx, w, 16, 8, w->nb[1], 4 * w->nb[1]));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, Scale(ctx, v, 2.0f));
  w->data = static_cast<char*>(buffer->base()) + 1024;
  v->data = static_cast<char*>(w->data) + 4 * w->nb[1];
  y->data = buffer->base();
  auto locate = [&](const Tensor& t) -> absl::StatusOr<WirePlace> {
    return WirePlace{1,
                     static_cast<uint64_t>(static_cast<char*>(t.data) -
                                           static_cast<char*>(buffer->base()))};
  };
  WireLocate ref = locate;
  Tensor* nodes[] = {y};
  FERRY_ASSERT_OK_AND_ASSIGN(std::string blob, EncodeNodes(nodes, &ref));
  auto lookup = [&](uint64_t) -> absl::StatusOr<Buffer*> {
    return buffer.get();
  };
  WireLookup look = lookup;
  FERRY_ASSERT_OK_AND_ASSIGN(auto graph, DecodeGraph(blob, &look));
  const Tensor& leaf = *graph->nodes[0]->src[0];
  ASSERT_NE(leaf.view_src, nullptr);
  EXPECT_EQ(leaf.view_src->ne, w->ne);
  EXPECT_EQ(leaf.view_src->data, static_cast<char*>(buffer->base()) + 1024);
  EXPECT_EQ(leaf.data, static_cast<char*>(buffer->base()) + 1024 + 4 * 64);
  // A source whose bytes leave the buffer is refused like any tensor.
  w->data = static_cast<char*>(buffer->base()) + 4000;
  FERRY_ASSERT_OK_AND_ASSIGN(blob, EncodeNodes(nodes, &ref));
  EXPECT_THAT(DecodeGraph(blob, &look),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("w")));
}

// A tensor ref is checked against the buffer as its type lays the tensor
// out: a CPU weight of 520 rows takes 576 rows of panels.
TEST(WireGraphTest, TensorRefsFitTheirTypesLayout) {
  CpuPackedBufferType type(nullptr);
  Tensor w;
  w.dtype = DType::kF32;
  w.ne = {16, 520, 1, 1};
  w.nb = ContiguousStrides(w.dtype, w.ne);
  w.name = "w";
  const size_t packed = type.AllocSize(w);
  ASSERT_EQ(packed, 16u * 576 * 4);
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer, type.Allocate(packed + 64));
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto ref,
      DecodeTensorRef(EncodeTensorRef(w, 64, nullptr, 0), buffer.get()));
  EXPECT_EQ(ref->offset, 64u);
  EXPECT_EQ(ref->tensor.data, static_cast<char*>(buffer->base()) + 64);
  EXPECT_EQ(ref->tensor.buffer, buffer.get());
  EXPECT_EQ(ref->tensor.ne, w.ne);
  EXPECT_EQ(ref->tensor.name, "w");
  // Its logical bytes would fit at 128; its panels do not.
  EXPECT_THAT(
      DecodeTensorRef(EncodeTensorRef(w, 128, nullptr, 0), buffer.get()),
      StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("'w'")));
  // A view names its source, which is checked too.
  Tensor v = w;
  v.ne = {16, 64, 1, 1};
  v.name = "v";
  FERRY_ASSERT_OK_AND_ASSIGN(
      ref, DecodeTensorRef(EncodeTensorRef(v, 64 + 16 * 4 * 32, &w, 64),
                           buffer.get()));
  ASSERT_NE(ref->tensor.view_src, nullptr);
  EXPECT_EQ(ref->tensor.view_src->data,
            static_cast<char*>(buffer->base()) + 64);
  EXPECT_EQ(GetPackedState(ref->tensor), PackedState::kViewOfPacked);
  EXPECT_THAT(DecodeTensorRef(EncodeTensorRef(v, 64, &w, 128), buffer.get()),
              StatusIs(absl::StatusCode::kOutOfRange));
  // Unplaced, for a size query; trailing bytes and bad dtypes refused.
  FERRY_ASSERT_OK_AND_ASSIGN(
      ref, DecodeTensorRef(EncodeTensorRef(w, 0, nullptr, 0), nullptr));
  EXPECT_EQ(ref->tensor.data, nullptr);
  EXPECT_THAT(DecodeTensorRef(EncodeTensorRef(w, 0, nullptr, 0) + "x", nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument));
  std::string bad = EncodeTensorRef(w, 0, nullptr, 0);
  bad[0] = static_cast<char>(200);
  EXPECT_THAT(DecodeTensorRef(bad, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dtype")));
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
