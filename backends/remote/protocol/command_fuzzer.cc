// libFuzzer target for what a worker decodes from the network: command and
// reply headers, device infos, wire graphs (against two real buffers) and
// tensor refs (against a buffer of the CPU's packed weights type).
// A decoded graph's every tensor is read in full, so ASan catches an extent
// the decoder let out of its buffer; a decoded header must re-encode to
// itself. Built and run by backends/remote/build_fuzzer.sh (clang), as CI
// does.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "ferry/backends/cpu/cpu_packed_buffer.h"
#include "ferry/backends/host_buffer.h"
#include "ferry/backends/remote/protocol/protocol.h"
#include "ferry/backends/remote/protocol/wire_graph.h"

namespace {

using ferry::remote::DecodeCommand;
using ferry::remote::DecodeDeviceInfos;
using ferry::remote::DecodeGraph;
using ferry::remote::DecodeReply;
using ferry::remote::EncodeCommand;
using ferry::remote::EncodeReply;

void CheckGraph(const ferry::remote::WireGraph& graph) {
  static std::vector<char>* sink = new std::vector<char>(1 << 16);
  for (const ferry::Tensor& t : graph.tensors) {
    if (t.data == nullptr) continue;
    const int64_t bytes = t.NumBytes();
    if (bytes < 0) std::abort();
    // Every byte the kernels could touch must be inside the buffer.
    for (int64_t done = 0; done < bytes;) {
      const size_t n = static_cast<size_t>(
          std::min<int64_t>(bytes - done, static_cast<int64_t>(sink->size())));
      std::memcpy(sink->data(), static_cast<const char*>(t.data) + done, n);
      done += static_cast<int64_t>(n);
    }
  }
}

// A valid wire graph: leaf x [16] f32 in buffer 2, y = scale(x) after it.
std::string ValidGraph() {
  ferry::remote::Writer w;
  w.U32(2);
  for (int i = 0; i < 2; ++i) {
    w.U8(0);  // f32
    w.U8(i == 0 ? 0 : static_cast<uint8_t>(ferry::Op::kScale));
    w.U32(0);
    for (int d = 0; d < 4; ++d) w.I64(d == 0 ? 16 : 1);  // ne
    for (int d = 0; d < 4; ++d) w.I64(d == 0 ? 4 : 64);  // nb
    for (int p = 0; p < 16; ++p) w.I32(p == 0 ? 0x40000000 : 0);
    for (int s = 0; s < 4; ++s) w.I32(i == 1 && s == 0 ? 0 : -1);
    w.U8(1);
    w.U64(2);
    w.U64(i * 64);
    w.U8(0);  // Not a view.
    w.Str(i == 0 ? "x" : "y");
  }
  w.U32(1);
  w.U32(1);
  return w.out();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 6) {
    case 0: {
      auto m = DecodeCommand(in);
      if (m.ok() && EncodeCommand(*m) != in) std::abort();
      break;
    }
    case 1: {
      auto m = DecodeReply(in);
      if (m.ok() && EncodeReply(*m) != in) std::abort();
      break;
    }
    case 2:
      (void)DecodeDeviceInfos(in);
      break;
    case 3: {
      static ferry::HostBufferType* type =
          new ferry::HostBufferType("fuzz", 64, nullptr);
      static ferry::Buffer* small = type->Allocate(64)->release();
      static ferry::Buffer* large = type->Allocate(4096)->release();
      auto lookup = [](uint64_t id) -> absl::StatusOr<ferry::Buffer*> {
        if (id == 1) return small;
        if (id == 2) return large;
        return absl::NotFoundError("no buffer");
      };
      ferry::remote::WireLookup ref = lookup;
      auto graph = DecodeGraph(in, &ref);
      if (graph.ok()) CheckGraph(**graph);
      (void)DecodeGraph(in, nullptr);
      // A SupportsOp query: what it places must lie inside as well.
      auto query = DecodeGraph(in, &ref, /*query=*/true);
      if (query.ok()) CheckGraph(**query);
      break;
    }
    case 4: {
      // Mutations of a valid graph: (position, xor) byte pairs.
      static const std::string* valid = new std::string(ValidGraph());
      std::string blob = *valid;
      for (size_t i = 0; i + 1 < in.size(); i += 2) {
        blob[static_cast<uint8_t>(in[i]) * 7 % blob.size()] ^= in[i + 1];
      }
      static ferry::HostBufferType* type =
          new ferry::HostBufferType("fuzz", 64, nullptr);
      static ferry::Buffer* large = type->Allocate(4096)->release();
      auto lookup = [](uint64_t id) -> absl::StatusOr<ferry::Buffer*> {
        if (id == 2) return large;
        return absl::NotFoundError("no buffer");
      };
      ferry::remote::WireLookup ref = lookup;
      auto graph = DecodeGraph(blob, &ref);
      if (blob == *valid && !graph.ok()) std::abort();  // The seed decodes.
      if (graph.ok()) CheckGraph(**graph);
      auto query = DecodeGraph(blob, &ref, /*query=*/true);
      if (graph.ok() && !query.ok()) std::abort();  // A query takes as much.
      if (query.ok()) CheckGraph(**query);
      break;
    }
    case 5: {
      // A ref the worker accepts lies inside the buffer as the type lays
      // it out: read all of that.
      static ferry::CpuPackedBufferType* type =
          new ferry::CpuPackedBufferType(nullptr);
      static ferry::Buffer* packed = type->Allocate(1 << 16)->release();
      auto ref = ferry::remote::DecodeTensorRef(in, packed);
      if (ref.ok()) {
        const ferry::Tensor& t = (*ref)->tensor;
        const size_t bytes = t.view_src != nullptr
                                 ? static_cast<size_t>(t.NumBytes())
                                 : type->AllocSize(t);
        static std::vector<char>* sink = new std::vector<char>(1 << 16);
        if (bytes > sink->size()) std::abort();
        if (bytes > 0) std::memcpy(sink->data(), t.data, bytes);
      }
      (void)ferry::remote::DecodeTensorRef(in, nullptr);
      break;
    }
  }
  return 0;
}
