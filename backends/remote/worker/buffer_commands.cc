// WorkerServer::Impl's buffer commands: kAllocBuffer (quotas checked before
// allocating), kFreeBuffer, kMemset, kCopyLocal, kAllocSize.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/remote/protocol/wire_graph.h"
#include "ferry/backends/remote/worker/internal/buffer_checks.h"
#include "ferry/backends/remote/worker/internal/worker_impl.h"
#include "ferry/graph/tensor.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::remote {

using ::ferry::remote::worker_internal::BufferRec;
using ::ferry::remote::worker_internal::RangeError;
using ::ferry::remote::worker_internal::RefuseWeights;
using ::ferry::remote::worker_internal::ResolveTarget;
using ::ferry::remote::worker_internal::Session;
using ::ferry::remote::worker_internal::SessionPtr;
using ::ferry::remote::worker_internal::StreamRec;
using ::ferry::remote::worker_internal::Target;

namespace {

// A tensor of exactly `size` bytes at `offset` of `b` (f32 words, or f16
// halves for sizes that are not whole words).
absl::StatusOr<Tensor> Slice(const BufferRec& b, uint64_t offset,
                             uint64_t size) {
  Tensor t;
  const int64_t element = size % 4 == 0 ? 4 : 2;
  if (size % element != 0 || offset % element != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "copy of ", size, " bytes at ", offset, ": not whole 2-byte halves"));
  }
  t.dtype = element == 4 ? DType::kF32 : DType::kF16;
  t.ne = {static_cast<int64_t>(size) / element, 1, 1, 1};
  t.nb = ContiguousStrides(t.dtype, t.ne);
  t.buffer = b.buffer.get();
  t.data = static_cast<char*>(b.buffer->base()) + offset;
  t.name = absl::StrCat("buffer", b.id, "+", offset);
  return t;
}

}  // namespace

absl::Status WorkerServer::Impl::AllocBuffer(const SessionPtr& sp,
                                             const Message& m) {
  Session& s = *sp;
  if (m.device >= options_.devices.size()) {
    return absl::NotFoundError(absl::StrCat("no device ", m.device));
  }
  Device* d = options_.devices[m.device];
  if (m.byte > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer kind ", m.byte, " (0 default, 1 weights)"));
  }
  BufferType* type =
      m.byte == 1 ? d->weights_buffer_type() : d->default_buffer_type();
  // Whole 4-byte words, so a tensor of f32 covers the buffer.
  const uint64_t size = (std::max<uint64_t>(m.size, 4) + 63) & ~uint64_t{63};
  if (m.size > type->max_size() || size < m.size) {
    return absl::InvalidArgumentError(absl::StrCat(m.size, " bytes is over ",
                                                   d->name(), "'s limit of ",
                                                   type->max_size()));
  }
  const WorkerQuotas& q = options_.quotas;
  if (static_cast<int64_t>(s.buffers.size()) >= q.max_session_buffers) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this session has ", s.buffers.size(), " buffers (the limit)"));
  }
  if (size > q.max_session_bytes - std::min(s.bytes, q.max_session_bytes) ||
      size > q.max_worker_bytes - std::min(worker_bytes_, q.max_worker_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        m.size, " more bytes is over the quota: this session holds ", s.bytes,
        " of ", q.max_session_bytes, ", the worker ", worker_bytes_, " of ",
        q.max_worker_bytes));
  }
  // Checked before allocating: never ask the allocator for the absurd.
  const uint64_t total = d->props().memory_total;
  if (total > 0 && size > total) {
    return absl::ResourceExhaustedError(
        absl::StrCat(m.size, " bytes is more than ", d->name(), "'s ", total,
                     " bytes of memory"));
  }
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> buffer, type->Allocate(size));
  auto rec = std::make_shared<BufferRec>();
  rec->id = s.next_id++;
  rec->device = m.device;
  rec->weights = type != d->default_buffer_type();
  rec->whole.dtype = DType::kF32;
  rec->whole.ne = {static_cast<int64_t>(buffer->size() / 4), 1, 1, 1};
  rec->whole.nb = ContiguousStrides(DType::kF32, rec->whole.ne);
  rec->whole.name = absl::StrCat("buffer", rec->id);
  FERRY_RETURN_IF_ERROR(PlaceTensor(*buffer, rec->whole, 0));
  if (buffer->is_host()) {
    ucp_mem_map_params_t params = {};
    params.field_mask =
        UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    params.address = buffer->base();
    params.length = buffer->size();
    if (ucp_mem_map(loop_->context(), &params, &rec->mem) == UCS_OK) {
      rec->context = loop_->context();
    } else {
      rec->mem = nullptr;
    }
  }
  rec->buffer = std::move(buffer);
  s.buffers[rec->id] = rec;
  s.bytes += rec->buffer->size();
  worker_bytes_ += rec->buffer->size();
  ++stats_.buffers;
  ++s.stats.buffers;
  Result(sp, m.req, absl::OkStatus(), rec->id);
  return absl::OkStatus();
}

absl::Status WorkerServer::Impl::FreeBuffer(const SessionPtr& sp,
                                            const Message& m) {
  Session& s = *sp;
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<BufferRec> b, FindBuffer(s, m.buffer));
  s.buffers.erase(m.buffer);
  s.bytes -= b->buffer->size();
  worker_bytes_ -= b->buffer->size();
  --stats_.buffers;
  --s.stats.buffers;
  ReleaseAfterStreams(s, std::move(b));
  return absl::OkStatus();
}

absl::Status WorkerServer::Impl::Memset(const SessionPtr& sp,
                                        const Message& m) {
  Session& s = *sp;
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<BufferRec> b, FindRange(s, m));
  FERRY_ASSIGN_OR_RETURN(Target target, ResolveTarget(*b, m));
  FERRY_RETURN_IF_ERROR(
      b->buffer->MemsetTensor(*target.tensor, m.byte, target.offset, m.size));
  Result(sp, m.req, absl::OkStatus());
  return absl::OkStatus();
}

absl::Status WorkerServer::Impl::AllocSize(const SessionPtr& sp,
                                           const Message& m) {
  if (m.device >= options_.devices.size()) {
    return absl::NotFoundError(absl::StrCat("no device ", m.device));
  }
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<WireTensorRef> ref,
                         DecodeTensorRef(m.blob, nullptr));
  BufferType* type = options_.devices[m.device]->weights_buffer_type();
  Result(sp, m.req, absl::OkStatus(), type->AllocSize(ref->tensor));
  return absl::OkStatus();
}

absl::Status WorkerServer::Impl::CopyLocal(const SessionPtr& sp,
                                           const Message& m) {
  Session& s = *sp;
  FERRY_ASSIGN_OR_RETURN(StreamRec * stream, FindStream(s, m.stream));
  FERRY_ASSIGN_OR_RETURN(StreamRec * src_stream, FindStream(s, m.src_stream));
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<BufferRec> dst, FindRange(s, m));
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<BufferRec> src,
                         FindBuffer(s, m.src_buffer));
  if (m.src_offset > src->buffer->size() ||
      m.size > src->buffer->size() - m.src_offset) {
    return RangeError("copy source", m.src_offset, m.size, *src);
  }
  FERRY_RETURN_IF_ERROR(RefuseWeights(*src, "copy_local source"));
  FERRY_RETURN_IF_ERROR(RefuseWeights(*dst, "copy_local"));
  if (m.size == 0) return absl::OkStatus();
  FERRY_ASSIGN_OR_RETURN(Tensor from, Slice(*src, m.src_offset, m.size));
  FERRY_ASSIGN_OR_RETURN(Tensor to, Slice(*dst, m.offset, m.size));
  Flush(*src_stream);
  Flush(*stream);
  return stream->backend->EnqueueCopyTensor(*src_stream->backend, from, to);
}

}  // namespace ferry::remote
