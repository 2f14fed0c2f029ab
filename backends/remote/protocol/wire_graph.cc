#include "ferry/backends/remote/protocol/wire_graph.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "ferry/backends/remote/protocol/protocol.h"
#include "ferry/graph/dtype.h"
#include "ferry/graph/op.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::remote {
namespace {

void WriteLayout(Writer& w, const Tensor& t) {
  w.U8(static_cast<uint8_t>(t.dtype));
  for (int i = 0; i < kMaxDims; ++i) w.I64(t.ne[i]);
  for (int i = 0; i < kMaxDims; ++i) w.I64(t.nb[i]);
}

absl::Status ReadLayout(Reader& r, Tensor* t) {
  uint8_t dtype;
  FERRY_RETURN_IF_ERROR(r.U8(&dtype));
  if (dtype >= kNumDTypes) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype ", dtype, " is not a dtype"));
  }
  t->dtype = static_cast<DType>(dtype);
  for (int d = 0; d < kMaxDims; ++d) FERRY_RETURN_IF_ERROR(r.I64(&t->ne[d]));
  for (int d = 0; d < kMaxDims; ++d) FERRY_RETURN_IF_ERROR(r.I64(&t->nb[d]));
  return absl::OkStatus();
}

// Where a placed tensor and, for a view, its source are.
struct Places {
  WirePlace tensor;
  bool view = false;
  WirePlace source;
};

void WriteTensor(Writer& w, const Tensor& t, uint8_t op,
                 const std::array<int32_t, kMaxSrc>& src, const Places* places,
                 bool with_names) {
  w.U8(static_cast<uint8_t>(t.dtype));
  w.U8(op);
  w.U32(DescriptiveFlags(t));
  for (int i = 0; i < kMaxDims; ++i) w.I64(t.ne[i]);
  for (int i = 0; i < kMaxDims; ++i) w.I64(t.nb[i]);
  for (int i = 0; i < kMaxOpParams; ++i) w.I32(t.op_params[i]);
  for (int i = 0; i < kMaxSrc; ++i) w.I32(src[i]);
  w.U8(places != nullptr ? 1 : 0);
  if (places != nullptr) {
    w.U64(places->tensor.buffer);
    w.U64(places->tensor.offset);
    w.U8(places->view ? 1 : 0);
    if (places->view) {
      WriteLayout(w, *t.view_src);
      w.U64(places->source.offset);
    }
  }
  w.Str(with_names ? absl::string_view(t.name).substr(0, kMaxWireName) : "");
}

}  // namespace

absl::StatusOr<std::string> EncodeNodes(absl::Span<Tensor* const> nodes,
                                        const WireLocate* locate,
                                        bool with_names, WirePlacing placing) {
  Writer w;
  std::string body;
  absl::flat_hash_map<const Tensor*, int32_t> index;
  std::vector<uint32_t> computed;
  int32_t count = 0;
  Writer tensors;
  auto locate_one = [&](const Tensor& t, absl::string_view role,
                        WirePlace* out) -> absl::Status {
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
    *out = *place;
    return absl::OkStatus();
  };
  // A leaf view also names its source, which must share its buffer.
  auto places_of = [&](const Tensor& t, absl::string_view role,
                       bool leaf) -> absl::StatusOr<Places> {
    Places places;
    FERRY_RETURN_IF_ERROR(locate_one(t, role, &places.tensor));
    if (leaf && t.view_src != nullptr) {
      places.view = true;
      FERRY_RETURN_IF_ERROR(locate_one(
          *t.view_src,
          absl::StrCat("the view source of ", role, " '", t.name, "',"),
          &places.source));
      if (places.source.buffer != places.tensor.buffer) {
        return absl::InvalidArgumentError(absl::StrCat(
            role, " '", t.name, "' is not in its view source's buffer"));
      }
    }
    return places;
  };
  // Null when `t` goes unplaced (a query, and `locate` cannot place it or,
  // for a view, its source).
  auto write_places = [&](const Tensor& t, absl::string_view role, bool leaf,
                          Places* places) -> absl::StatusOr<const Places*> {
    if (locate == nullptr) return nullptr;
    absl::StatusOr<Places> found = places_of(t, role, leaf);
    if (!found.ok()) {
      if (placing == WirePlacing::kWhereKnown) return nullptr;
      return found.status();
    }
    *places = *found;
    return places;
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
      Places places;
      FERRY_ASSIGN_OR_RETURN(
          const Places* placed,
          write_places(
              *source,
              absl::StrCat("source ", s, " of node '", node->name, "',"),
              /*leaf=*/true, &places));
      WriteTensor(tensors, *source, static_cast<uint8_t>(Op::kNone),
                  {-1, -1, -1, -1}, placed, with_names);
      index[source] = count;
      src[s] = count++;
    }
    Places places;
    FERRY_ASSIGN_OR_RETURN(
        const Places* placed,
        write_places(*node, "node", /*leaf=*/false, &places));
    WriteTensor(tensors, *node, static_cast<uint8_t>(node->op), src, placed,
                with_names);
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

absl::Status CheckInBuffer(const Tensor& t, const Buffer& buffer,
                           uint64_t offset, bool view) {
  FERRY_ASSIGN_OR_RETURN(uint64_t extent, CheckedExtent(t));
  // AllocSize is asked only of a shape CheckedExtent bounded.
  if (!view && extent > 0) {
    extent = std::max<uint64_t>(extent, buffer.type()->AllocSize(t));
  }
  const uint64_t size = buffer.size();
  if (offset > size || extent > size - offset) {
    return absl::OutOfRangeError(
        absl::StrCat("'", t.name, "': bytes [", offset, ", +", extent,
                     ") are outside its buffer of ", size, " bytes"));
  }
  return absl::OkStatus();
}

std::string EncodeTensorRef(const Tensor& tensor, uint64_t offset,
                            const Tensor* source, uint64_t source_offset) {
  Writer w;
  WriteLayout(w, tensor);
  w.U64(offset);
  w.U8(source != nullptr ? 1 : 0);
  if (source != nullptr) {
    WriteLayout(w, *source);
    w.U64(source_offset);
  }
  w.Str(absl::string_view(tensor.name).substr(0, kMaxWireName));
  return std::move(w.out());
}

absl::StatusOr<std::unique_ptr<WireTensorRef>> DecodeTensorRef(
    absl::string_view blob, Buffer* buffer) {
  Reader r(blob);
  auto ref = std::make_unique<WireTensorRef>();
  uint8_t view;
  uint64_t source_offset = 0;
  FERRY_RETURN_IF_ERROR(ReadLayout(r, &ref->tensor));
  FERRY_RETURN_IF_ERROR(r.U64(&ref->offset));
  FERRY_RETURN_IF_ERROR(r.U8(&view));
  if (view > 1) return absl::InvalidArgumentError("tensor ref: bad view flag");
  if (view) {
    FERRY_RETURN_IF_ERROR(ReadLayout(r, &ref->source));
    FERRY_RETURN_IF_ERROR(r.U64(&source_offset));
  }
  FERRY_RETURN_IF_ERROR(r.Str(&ref->tensor.name, kMaxWireName, "tensor name"));
  if (!r.done()) {
    return absl::InvalidArgumentError(
        absl::StrCat(r.left(), " bytes after the tensor ref"));
  }
  Tensor& t = ref->tensor;
  FERRY_RETURN_IF_ERROR(CheckedExtent(t).status());
  if (view) {
    ref->source.name = absl::StrCat(t.name, " (view source)");
    FERRY_RETURN_IF_ERROR(CheckedExtent(ref->source).status());
    t.view_src = &ref->source;
  }
  if (buffer == nullptr) return ref;
  FERRY_RETURN_IF_ERROR(CheckInBuffer(t, *buffer, ref->offset, view == 1));
  t.buffer = buffer;
  t.data = static_cast<char*>(buffer->base()) + ref->offset;
  if (view) {
    FERRY_RETURN_IF_ERROR(
        CheckInBuffer(ref->source, *buffer, source_offset, false));
    ref->source.buffer = buffer;
    ref->source.data = static_cast<char*>(buffer->base()) + source_offset;
  }
  return ref;
}

absl::StatusOr<std::unique_ptr<WireGraph>> DecodeGraph(absl::string_view blob,
                                                       const WireLookup* lookup,
                                                       bool query) {
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
    uint64_t buffer_id = 0, offset = 0, source_offset = 0;
    uint8_t view = 0;
    Tensor source;
    // A query may leave any tensor unplaced; with no lookup, all are.
    const bool may_place = lookup != nullptr;
    const bool must_place = may_place && !query;
    if (placed > 1 || (placed == 1 && !may_place) ||
        (placed == 0 && must_place)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", i,
          placed ? ": placed where nothing can be" : ": not placed"));
    }
    if (placed) {
      FERRY_RETURN_IF_ERROR(r.U64(&buffer_id));
      FERRY_RETURN_IF_ERROR(r.U64(&offset));
      FERRY_RETURN_IF_ERROR(r.U8(&view));
      if (view > 1 || (view == 1 && t.op != Op::kNone)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", i, ": only a leaf can be a view"));
      }
      if (view) {
        FERRY_RETURN_IF_ERROR(ReadLayout(r, &source));
        FERRY_RETURN_IF_ERROR(r.U64(&source_offset));
      }
    }
    FERRY_RETURN_IF_ERROR(r.Str(&t.name, kMaxWireName, "tensor name"));
    FERRY_RETURN_IF_ERROR(CheckedExtent(t).status());
    if (placed) {
      absl::StatusOr<Buffer*> buffer = (*lookup)(buffer_id);
      if (!buffer.ok()) {
        return absl::Status(buffer.status().code(),
                            absl::StrCat("tensor ", i, " '", t.name,
                                         "': ", buffer.status().message()));
      }
      FERRY_RETURN_IF_ERROR(CheckInBuffer(t, **buffer, offset, view == 1));
      t.buffer = *buffer;
      t.data = static_cast<char*>((*buffer)->base()) + offset;
      if (view) {
        source.name = absl::StrCat(t.name, " (view source)");
        FERRY_RETURN_IF_ERROR(
            CheckInBuffer(source, **buffer, source_offset, false));
        source.buffer = *buffer;
        source.data = static_cast<char*>((*buffer)->base()) + source_offset;
        t.view_src = &graph->view_sources.emplace_back(std::move(source));
      }
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
