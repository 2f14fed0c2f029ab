// The wire form of the nodes a remote backend computes: what the client
// sends once per distinct split (kDefineGraph) and the worker rebuilds,
// checked, into Tensors placed in its own buffers.
//
// The client writes a table of tensors: each compute node of the span, and
// each tensor they read that is not computed in the span as a leaf (its
// metadata and where its bytes are: a worker buffer id and an offset). A
// source computed earlier in the span is referred to by its index. Leafs
// and view nodes of the span compute nothing and are not sent.
//
// The worker's decoder trusts nothing: dtypes and ops in range, shapes and
// strides bounded and non-negative, sources referring only to earlier
// entries, every tensor's bytes inside its buffer as the buffer's type lays
// them out (CheckInBuffer, with arithmetic that cannot overflow), names
// bounded.
//
// A tensor ref (EncodeTensorRef) is one tensor's metadata and place, for
// transfers into memory whose layout depends on the tensor: a device's
// weights_buffer_type(), e.g. the CPU's panels. The worker rebuilds the
// tensor and lets its buffer put the logical bytes where they belong. What the
// op itself requires of shapes and layouts is checked afterwards by the
// device's own SupportsOp (the CPU kernels' CheckSupported), before anything
// runs.
#ifndef FERRY_BACKENDS_REMOTE_PROTOCOL_WIRE_GRAPH_H_
#define FERRY_BACKENDS_REMOTE_PROTOCOL_WIRE_GRAPH_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ferry/backends/buffer.h"
#include "ferry/graph/tensor.h"

namespace ferry::remote {

// Where a tensor's bytes are on the worker.
struct WirePlace {
  uint64_t buffer = 0;
  uint64_t offset = 0;
};

// Returns the place of a placed tensor, or why it cannot be used.
using WireLocate =
    absl::FunctionRef<absl::StatusOr<WirePlace>(const Tensor& tensor)>;

// Which tensors EncodeNodes places.
enum class WirePlacing {
  // Every tensor, or an error: a graph to run (kDefineGraph).
  kAll,
  // Those `locate` finds, the rest unplaced: a SupportsOp query, whose
  // answer can depend on a source's memory (a view into the CPU's packed
  // weights is refused where the weight itself is read).
  kWhereKnown,
};

// Encodes the compute nodes of `nodes` and what they read. With `locate`
// null the tensors carry no places. Errors name the node or source (null,
// unplaced, in memory the worker cannot use). `with_names` false leaves
// names out (a query whose answer they do not change).
absl::StatusOr<std::string> EncodeNodes(
    absl::Span<Tensor* const> nodes, const WireLocate* locate,
    bool with_names = true, WirePlacing placing = WirePlacing::kAll);

// Limits the decoder enforces.
inline constexpr uint32_t kMaxWireTensors = 1u << 16;
inline constexpr int64_t kMaxWireDim = int64_t{1} << 40;
inline constexpr int64_t kMaxWireStride = int64_t{1} << 48;
inline constexpr size_t kMaxWireName = 128;

// A decoded graph: tensors with stable addresses, and the nodes to compute.
struct WireGraph {
  std::vector<Tensor> tensors;
  std::vector<Tensor*> nodes;
  std::deque<Tensor> view_sources;  // What leaf views' view_src point at.
};

// Returns the worker's buffer with that id, or NotFound.
using WireLookup = absl::FunctionRef<absl::StatusOr<Buffer*>(uint64_t id)>;

// Decodes and checks `blob`. With `lookup` null the tensors must carry no
// places and stay unplaced. A `query` (kSupportsOp) may leave any tensor
// unplaced; a graph to run may not.
absl::StatusOr<std::unique_ptr<WireGraph>> DecodeGraph(absl::string_view blob,
                                                       const WireLookup* lookup,
                                                       bool query = false);

// The bytes [0, extent) a tensor of this shape and dtype covers from its
// data, or InvalidArgument when the shape or strides are out of bounds.
absl::StatusOr<uint64_t> CheckedExtent(const Tensor& t);

// OK when `t` at `offset` of `buffer` lies inside it: its extent, or the
// bytes the buffer's type gives such a tensor where that is more (AllocSize:
// padded panels). `view` says `t` is a view (its own extent is what it
// covers). OutOfRange names the tensor otherwise.
absl::Status CheckInBuffer(const Tensor& t, const Buffer& buffer,
                           uint64_t offset, bool view);

// A tensor `tensor` placed at `offset` of its worker buffer; `source`, when
// not null, is the view's source at `source_offset` of the same buffer.
std::string EncodeTensorRef(const Tensor& tensor, uint64_t offset,
                            const Tensor* source, uint64_t source_offset);

// A decoded tensor ref. Not movable: tensor.view_src points at source.
struct WireTensorRef {
  WireTensorRef() = default;
  WireTensorRef(const WireTensorRef&) = delete;
  WireTensorRef& operator=(const WireTensorRef&) = delete;

  uint64_t offset = 0;  // Of `tensor` in its buffer.
  Tensor tensor;
  Tensor source;  // Meaningful when tensor.view_src is not null.
};

// Decodes and checks `blob`. With `buffer` the tensors are placed in it
// (after CheckInBuffer); null leaves them unplaced (a size query).
absl::StatusOr<std::unique_ptr<WireTensorRef>> DecodeTensorRef(
    absl::string_view blob, Buffer* buffer);

}  // namespace ferry::remote

#endif  // FERRY_BACKENDS_REMOTE_PROTOCOL_WIRE_GRAPH_H_
