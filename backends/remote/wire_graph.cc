#include "ferry/backends/remote/wire_graph.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "ferry/backends/remote/protocol.h"
#include "ferry/graph/dtype.h"
#include "ferry/graph/op.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::remote {
namespace {

void WriteTensor(Writer& w, const Tensor& t, uint8_t op,
                 const std::array<int32_t, kMaxSrc>& src,
                 const WirePlace* place, bool with_names) {
  w.U8(static_cast<uint8_t>(t.dtype));
  w.U8(op);
  w.U32(DescriptiveFlags(t));
  for (int i = 0; i < kMaxDims; ++i) w.I64(t.ne[i]);
  for (int i = 0; i < kMaxDims; ++i) w.I64(t.nb[i]);
  for (int i = 0; i < kMaxOpParams; ++i) w.I32(t.op_params[i]);
  for (int i = 0; i < kMaxSrc; ++i) w.I32(src[i]);
  w.U8(place != nullptr ? 1 : 0);
  if (place != nullptr) {
    w.U64(place->buffer);
    w.U64(place->offset);
  }
  w.Str(with_names ? absl::string_view(t.name).substr(0, kMaxWireName) : "");
}

}  // namespace

absl::StatusOr<std::string> EncodeNodes(absl::Span<Tensor* const> nodes,
                                        const WireLocate* locate,
                                        bool with_names) {
  Writer w;
  std::string body;
  absl::flat_hash_map<const Tensor*, int32_t> index;
  std::vector<uint32_t> computed;
  int32_t count = 0;
  Writer tensors;
  auto place_of = [&](const Tensor& t,
                      absl::string_view role) -> absl::StatusOr<WirePlace> {
    if (t.data == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(role, " '", t.name, "' is not placed"));
    }
    absl::StatusOr<WirePlace> place = (*locate)(t);
    if (!place.ok()) {
      return absl::Status(
          place.status().code(),
          absl::StrCat(role, " '", t.name, "': ", place.status().message()));
    }
    return place;
  };
  for (size_t n = 0; n < nodes.size(); ++n) {
    const Tensor* node = nodes[n];
    if (node == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("node ", n, " is null"));
    }
    if (!IsComputeOp(node->op)) continue;
    std::array<int32_t, kMaxSrc> src;
    src.fill(-1);
    for (int s = 0; s < kMaxSrc; ++s) {
      const Tensor* source = node->src[s];
      if (source == nullptr) continue;
      auto it = index.find(source);
      if (it != index.end()) {
        src[s] = it->second;
        continue;
      }
      WirePlace place;
      if (locate != nullptr) {
        FERRY_ASSIGN_OR_RETURN(
            place, place_of(*source, absl::StrCat("source ", s, " of node '",
                                                  node->name, "',")));
      }
      WriteTensor(tensors, *source, static_cast<uint8_t>(Op::kNone),
                  {-1, -1, -1, -1}, locate != nullptr ? &place : nullptr,
                  with_names);
      index[source] = count;
      src[s] = count++;
    }
    WirePlace place;
    if (locate != nullptr) {
      FERRY_ASSIGN_OR_RETURN(place, place_of(*node, "node"));
    }
    WriteTensor(tensors, *node, static_cast<uint8_t>(node->op), src,
                locate != nullptr ? &place : nullptr, with_names);
    index[node] = count;
    computed.push_back(static_cast<uint32_t>(count++));
  }
  w.U32(static_cast<uint32_t>(count));
  w.out().append(tensors.out());
  w.U32(static_cast<uint32_t>(computed.size()));
  for (uint32_t i : computed) w.U32(i);
  return std::move(w.out());
}

absl::StatusOr<uint64_t> CheckedExtent(const Tensor& t) {
  for (int i = 0; i < kMaxDims; ++i) {
    if (t.ne[i] < 0 || t.ne[i] > kMaxWireDim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", t.name, "': ne[", i, "] = ", t.ne[i], " is outside [0, 2^40]"));
    }
    if (t.nb[i] < 0 || t.nb[i] > kMaxWireStride) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", t.name, "': nb[", i, "] = ", t.nb[i], " is outside [0, 2^48]"));
    }
  }
  const int64_t block = DTypeBlockSize(t.dtype);
  if (t.ne[0] % block != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", t.name, "': ne[0] = ", t.ne[0], " is not whole blocks"));
  }
  for (int i = 0; i < kMaxDims; ++i) {
    if (t.ne[i] == 0) return 0;
  }
  // Checked after each factor, so the product never wraps (2^48 * 2^40 fits
  // in 128 bits; four factors of 2^40 would not).
  unsigned __int128 elements = 1;
  for (int i = 0; i < kMaxDims; ++i) {
    elements *= static_cast<uint64_t>(t.ne[i]);
    if (elements > (unsigned __int128)1 << 48) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", t.name, "': over 2^48 elements"));
    }
  }
  unsigned __int128 extent = static_cast<uint64_t>(t.ElementSize());
  extent += static_cast<unsigned __int128>(t.ne[0] / block - 1) *
            static_cast<uint64_t>(t.nb[0]);
  for (int i = 1; i < kMaxDims; ++i) {
    extent += static_cast<unsigned __int128>(t.ne[i] - 1) *
              static_cast<uint64_t>(t.nb[i]);
  }
  if (extent > (unsigned __int128)1 << 56) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", t.name, "': byte extent over 2^56"));
  }
  return static_cast<uint64_t>(extent);
}

absl::StatusOr<std::unique_ptr<WireGraph>> DecodeGraph(
    absl::string_view blob, const WireLookup* lookup) {
  Reader r(blob);
  uint32_t count;
  FERRY_RETURN_IF_ERROR(r.U32(&count));
  if (count > kMaxWireTensors) {
    return absl::InvalidArgumentError(absl::StrCat(
        "graph of ", count, " tensors (at most ", kMaxWireTensors, ")"));
  }
  // Each tensor takes at least 128 bytes: refuse counts the blob cannot
  // hold before reserving memory for them.
  if (static_cast<uint64_t>(count) * 128 > r.left()) {
    return absl::InvalidArgumentError(
        absl::StrCat("graph of ", count, " tensors in ", r.left(), " bytes"));
  }
  auto graph = std::make_unique<WireGraph>();
  graph->tensors.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    Tensor& t = graph->tensors[i];
    uint8_t dtype, op, placed;
    FERRY_RETURN_IF_ERROR(r.U8(&dtype));
    FERRY_RETURN_IF_ERROR(r.U8(&op));
    if (dtype >= kNumDTypes) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", i, ": dtype ", dtype, " is not a dtype"));
    }
    if (op >= kNumOps) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", i, ": op ", op, " is not an op"));
    }
    t.dtype = static_cast<DType>(dtype);
    t.op = static_cast<Op>(op);
    if (IsViewOp(t.op)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", i, ": view ops are sent as leafs"));
    }
    FERRY_RETURN_IF_ERROR(r.U32(&t.flags));
    t.flags &= kTensorFlagInput | kTensorFlagOutput | kTensorFlagWeight;
    for (int d = 0; d < kMaxDims; ++d) FERRY_RETURN_IF_ERROR(r.I64(&t.ne[d]));
    for (int d = 0; d < kMaxDims; ++d) FERRY_RETURN_IF_ERROR(r.I64(&t.nb[d]));
    for (int p = 0; p < kMaxOpParams; ++p) {
      FERRY_RETURN_IF_ERROR(r.I32(&t.op_params[p]));
    }
    for (int s = 0; s < kMaxSrc; ++s) {
      int32_t src;
      FERRY_RETURN_IF_ERROR(r.I32(&src));
      if (src < -1 || src >= static_cast<int32_t>(i)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", i, ": source ", s, " = ", src,
                         " is not an earlier tensor"));
      }
      if (src >= 0 && t.op == Op::kNone) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", i, ": a leaf with a source"));
      }
      t.src[s] = src < 0 ? nullptr : &graph->tensors[src];
    }
    FERRY_RETURN_IF_ERROR(r.U8(&placed));
    uint64_t buffer_id = 0, offset = 0;
    if (placed > 1 || (placed == 1) != (lookup != nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", i, placed ? ": placed in a query" : ": not placed"));
    }
    if (placed) {
      FERRY_RETURN_IF_ERROR(r.U64(&buffer_id));
      FERRY_RETURN_IF_ERROR(r.U64(&offset));
    }
    FERRY_RETURN_IF_ERROR(r.Str(&t.name, kMaxWireName, "tensor name"));
    FERRY_ASSIGN_OR_RETURN(const uint64_t extent, CheckedExtent(t));
    if (placed) {
      absl::StatusOr<Buffer*> buffer = (*lookup)(buffer_id);
      if (!buffer.ok()) {
        return absl::Status(buffer.status().code(),
                            absl::StrCat("tensor ", i, " '", t.name,
                                         "': ", buffer.status().message()));
      }
      const uint64_t size = (*buffer)->size();
      if (offset > size || extent > size - offset) {
        return absl::OutOfRangeError(absl::StrCat(
            "tensor ", i, " '", t.name, "': bytes [", offset, ", +", extent,
            ") are outside buffer ", buffer_id, " of ", size, " bytes"));
      }
      t.buffer = *buffer;
      t.data = static_cast<char*>((*buffer)->base()) + offset;
    }
  }
  uint32_t nodes;
  FERRY_RETURN_IF_ERROR(r.U32(&nodes));
  if (nodes > count) {
    return absl::InvalidArgumentError(
        absl::StrCat(nodes, " nodes of ", count, " tensors"));
  }
  graph->nodes.reserve(nodes);
  uint32_t last = 0;
  for (uint32_t n = 0; n < nodes; ++n) {
    uint32_t i;
    FERRY_RETURN_IF_ERROR(r.U32(&i));
    if (i >= count || (n > 0 && i <= last)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node ", n, ": tensor ", i, " is out of range or out of order"));
    }
    if (graph->tensors[i].op == Op::kNone) {
      return absl::InvalidArgumentError(
          absl::StrCat("node ", n, ": tensor ", i, " is a leaf"));
    }
    last = i;
    graph->nodes.push_back(&graph->tensors[i]);
  }
  if (!r.done()) {
    return absl::InvalidArgumentError(
        absl::StrCat(r.left(), " bytes after the graph"));
  }
  return graph;
}

}  // namespace ferry::remote
