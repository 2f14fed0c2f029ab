// WorkerServer::Impl's graph commands: kDefineGraph (decoded against the
// session's buffers, every node checked by the device), kDropGraph,
// kLaunch, kSupportsOp.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ferry/backends/remote/protocol/wire_graph.h"
#include "ferry/backends/remote/worker/internal/worker_impl.h"
#include "ferry/graph/graph.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/trace.h"

namespace ferry::remote {

using ::ferry::remote::worker_internal::BufferRec;
using ::ferry::remote::worker_internal::GraphRec;
using ::ferry::remote::worker_internal::Session;
using ::ferry::remote::worker_internal::SessionPtr;
using ::ferry::remote::worker_internal::StreamRec;

namespace {

constexpr size_t kMaxGraphs = 8192;
constexpr size_t kMaxSpanNames = 65536;

}  // namespace

absl::Status WorkerServer::Impl::DefineGraph(const SessionPtr& sp,
                                             const Message& m) {
  Session& s = *sp;
  if (m.device >= options_.devices.size()) {
    return absl::NotFoundError(absl::StrCat("no device ", m.device));
  }
  if (s.graphs.size() >= kMaxGraphs) {
    return absl::ResourceExhaustedError(
        absl::StrCat("over ", kMaxGraphs, " graphs"));
  }
  if (m.blob.size() >
      options_.quotas.max_session_graph_bytes -
          std::min(s.graph_bytes, options_.quotas.max_session_graph_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a graph of ", m.blob.size(), " bytes: this session's graphs take ",
        s.graph_bytes, " of ", options_.quotas.max_session_graph_bytes));
  }
  Device* d = options_.devices[m.device];
  auto rec = std::make_shared<GraphRec>();
  rec->device = m.device;
  rec->bytes = m.blob.size();
  auto lookup_fn = [&](uint64_t id) {
    return DeviceBuffer(s, *d, id, &rec->buffers);
  };
  WireLookup lookup = lookup_fn;
  FERRY_ASSIGN_OR_RETURN(rec->graph, DecodeGraph(m.blob, &lookup));
  for (Tensor* node : rec->graph->nodes) {
    if (absl::Status op = d->CheckOp(*node); !op.ok()) {
      return absl::Status(
          op.code(), absl::StrCat(d->name(), " does not support ",
                                  OpName(node->op), " node '", node->name, "' ",
                                  node->ShapeString(), ": ", op.message()));
    }
  }
  const uint64_t id = s.next_id++;
  for (Tensor* node : rec->graph->nodes) {
    if (s.span_names.size() >= kMaxSpanNames) break;
    if (IsComputeOp(node->op)) s.span_names.insert(NodeSpanName(*node));
  }
  s.graph_bytes += rec->bytes;
  s.graphs[id] = std::move(rec);
  ++stats_.graphs_defined;
  ++s.stats.graphs_defined;
  Result(sp, m.req, absl::OkStatus(), id);
  return absl::OkStatus();
}

absl::Status WorkerServer::Impl::DropGraph(const SessionPtr& sp,
                                           const Message& m) {
  Session& s = *sp;
  auto it = s.graphs.find(m.id);
  if (it == s.graphs.end()) {
    return absl::NotFoundError(absl::StrCat("no graph ", m.id));
  }
  std::shared_ptr<GraphRec> graph = std::move(it->second);
  s.graphs.erase(it);
  s.graph_bytes -= graph->bytes;
  ReleaseAfterStreams(s, std::move(graph));
  return absl::OkStatus();
}

absl::Status WorkerServer::Impl::Launch(const SessionPtr& sp,
                                        const Message& m) {
  Session& s = *sp;
  FERRY_ASSIGN_OR_RETURN(StreamRec * stream, FindStream(s, m.stream));
  auto it = s.graphs.find(m.id);
  if (it == s.graphs.end()) {
    return absl::NotFoundError(absl::StrCat("no graph ", m.id));
  }
  if (it->second->device != stream->device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "graph ", m.id, " is for another device than stream ", m.stream));
  }
  Flush(*stream);
  return stream->backend->EnqueueCompute(it->second->graph->nodes);
}

absl::Status WorkerServer::Impl::SupportsOp(const SessionPtr& sp,
                                            const Message& m) {
  Session& s = *sp;
  if (m.device >= options_.devices.size()) {
    return absl::NotFoundError(absl::StrCat("no device ", m.device));
  }
  // Sources the client placed are read where they are: the answer can
  // depend on their memory (the CPU's packed weights).
  Device& d = *options_.devices[m.device];
  std::vector<std::shared_ptr<BufferRec>> held;
  auto lookup_fn = [&](uint64_t id) { return DeviceBuffer(s, d, id, &held); };
  WireLookup lookup = lookup_fn;
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<WireGraph> graph,
                         DecodeGraph(m.blob, &lookup, /*query=*/true));
  // Value 1: supported; otherwise the device's reason as the error.
  absl::Status supported = graph->nodes.empty()
                               ? absl::InvalidArgumentError("no node to check")
                               : absl::OkStatus();
  for (Tensor* node : graph->nodes) {
    if (supported.ok()) supported = d.CheckOp(*node);
  }
  Result(sp, m.req, supported, supported.ok() ? 1 : 0);
  return absl::OkStatus();
}

}  // namespace ferry::remote
