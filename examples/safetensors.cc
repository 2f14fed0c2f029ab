#include "ferry/examples/safetensors.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/event.h"
#include "ferry/models/safetensors/safetensors_file.h"
#include "ferry/runtime/file.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/task.h"
#include "ferry/runtime/trace.h"

namespace ferry::examples {
namespace {

using ::ferry::safetensors::SafetensorInfo;
using ::ferry::safetensors::SafetensorsFile;
using ::ferry::safetensors::SafetensorsShapeString;

struct WeightSpec {
  std::string name;
  std::vector<int64_t> ne;
};

// The weights of `config` in file order, with LlamaModel's names.
std::vector<WeightSpec> WeightSpecs(const LlamaConfig& c) {
  const int64_t e = c.n_embd, kv = c.kv_dim();
  std::vector<WeightSpec> out = {{"tok_embd", {e, c.n_vocab}}};
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string p = absl::StrCat("blk.", il, ".");
    out.push_back({p + "attn_norm", {e}});
    out.push_back({p + "attn_q", {e, e}});
    out.push_back({p + "attn_k", {e, kv}});
    out.push_back({p + "attn_v", {e, kv}});
    out.push_back({p + "attn_output", {e, e}});
    out.push_back({p + "ffn_norm", {e}});
    out.push_back({p + "ffn_gate", {e, c.n_ff}});
    out.push_back({p + "ffn_up", {e, c.n_ff}});
    out.push_back({p + "ffn_down", {c.n_ff, e}});
  }
  out.push_back({"output_norm", {e}});
  out.push_back({"output", {e, c.n_vocab}});
  return out;
}

absl::StatusOr<LlamaConfig> ConfigFromMetadata(
    const std::map<std::string, std::string>& md, const std::string& file) {
  LlamaConfig c;
  auto get = [&](const char* key, int64_t& out) -> absl::Status {
    auto it = md.find(key);
    if (it == md.end() || !absl::SimpleAtoi(it->second, &out)) {
      return absl::InvalidArgumentError(absl::StrCat(
          file, ": metadata '", key, "' missing or not an integer"));
    }
    return absl::OkStatus();
  };
  int64_t n_layer = 0;
  FERRY_RETURN_IF_ERROR(get("n_layer", n_layer));
  if (n_layer < 1 || n_layer > 100000) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": metadata n_layer out of range"));
  }
  c.n_layer = static_cast<int>(n_layer);
  FERRY_RETURN_IF_ERROR(get("n_embd", c.n_embd));
  FERRY_RETURN_IF_ERROR(get("n_head", c.n_head));
  FERRY_RETURN_IF_ERROR(get("n_head_kv", c.n_head_kv));
  FERRY_RETURN_IF_ERROR(get("n_ff", c.n_ff));
  FERRY_RETURN_IF_ERROR(get("n_vocab", c.n_vocab));
  FERRY_RETURN_IF_ERROR(get("n_ctx", c.n_ctx));
  if (absl::Status s = c.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", s.message()));
  }
  return c;
}

// One pinned staging slot and the event of the copy that last used it.
struct Staging {
  std::unique_ptr<Buffer> buffer;
  std::byte* data = nullptr;
  Event pending;
  bool busy = false;
};

constexpr size_t kChunk = size_t{4} << 20;
constexpr int kSlots = 3;

Task<absl::Status> LoadAll(
    const std::string& path, const File& file, uint64_t data_base,
    const std::vector<std::pair<Tensor*, uint64_t>>& jobs,
    const LlamaModel& model, IoReactor& io, const std::function<int64_t()>& now,
    LoadStats& stats) {
  const int disk = TraceRecorder::Global().Track("disk");
  std::vector<Staging> staging;
  int next_slot = 0;
  for (const auto& [t, begin] : jobs) {
    const size_t bytes = static_cast<size_t>(t->NumBytes());
    const int64_t offset = static_cast<int64_t>(data_base + begin);
    if (t->buffer->is_host()) {
      const int64_t t0 = now();
      FERRY_CO_RETURN_IF_ERROR(co_await io.Read(
          file, {static_cast<std::byte*>(t->data), bytes}, offset));
      TraceRecorder::Global().Record(disk, t->name, t0, now());
      stats.bytes += static_cast<int64_t>(bytes);
      continue;
    }
    // The backend owning the buffer.
    Backend* backend = nullptr;
    for (Backend* b : model.backends()) {
      if (&b->device() == t->buffer->type()->device()) backend = b;
    }
    if (backend == nullptr) {
      co_return absl::InternalError(
          absl::StrCat(path, ": no backend for tensor '", t->name, "'"));
    }
    if (staging.empty()) {
      BufferType* pinned = backend->device().host_buffer_type();
      for (int i = 0; i < kSlots; ++i) {
        Staging s;
        if (pinned != nullptr) {
          FERRY_CO_ASSIGN_OR_RETURN(s.buffer, pinned->Allocate(kChunk));
          s.data = static_cast<std::byte*>(s.buffer->base());
        }
        staging.push_back(std::move(s));
      }
    }
    for (size_t done = 0; done < bytes; done += kChunk) {
      const size_t n = std::min(kChunk, bytes - done);
      Staging& s = staging[next_slot];
      next_slot = (next_slot + 1) % kSlots;
      if (s.busy) {
        FERRY_CO_RETURN_IF_ERROR(co_await s.pending);
        s.busy = false;
      }
      std::vector<std::byte> pageable;
      std::byte* dst = s.data;
      if (dst == nullptr) {  // No pinned memory: a synchronous upload.
        pageable.resize(n);
        dst = pageable.data();
      }
      const int64_t t0 = now();
      FERRY_CO_RETURN_IF_ERROR(co_await io.Read(
          file, {dst, n}, offset + static_cast<int64_t>(done)));
      TraceRecorder::Global().Record(disk, t->name, t0, now());
      if (s.data == nullptr) {
        FERRY_CO_RETURN_IF_ERROR(SetTensorData(*t, dst, done, n));
      } else {
        FERRY_CO_RETURN_IF_ERROR(backend->EnqueueSetTensor(*t, dst, done, n));
        s.pending = backend->Record();
        s.busy = true;
      }
      stats.bytes += static_cast<int64_t>(n);
      stats.staged_bytes += static_cast<int64_t>(n);
    }
  }
  for (Staging& s : staging) {
    if (s.busy) FERRY_CO_RETURN_IF_ERROR(co_await s.pending);
  }
  co_return absl::OkStatus();
}

}  // namespace

absl::Status WriteRandomWeights(const std::string& path,
                                const LlamaConfig& config, uint64_t seed) {
  FERRY_RETURN_IF_ERROR(config.Validate());
  const std::vector<WeightSpec> specs = WeightSpecs(config);
  std::string json = absl::StrCat(
      "{\"__metadata__\":{\"format\":\"ferry-llama\",\"n_layer\":\"",
      config.n_layer, "\",\"n_embd\":\"", config.n_embd, "\",\"n_head\":\"",
      config.n_head, "\",\"n_head_kv\":\"", config.n_head_kv, "\",\"n_ff\":\"",
      config.n_ff, "\",\"n_vocab\":\"", config.n_vocab, "\",\"n_ctx\":\"",
      config.n_ctx, "\"}");
  uint64_t offset = 0;
  for (const WeightSpec& w : specs) {
    uint64_t n = 1;
    std::vector<int64_t> shape(w.ne.rbegin(), w.ne.rend());
    for (int64_t d : w.ne) n *= static_cast<uint64_t>(d);
    absl::StrAppend(&json, ",\"", w.name, "\":{\"dtype\":\"F32\",\"shape\":",
                    SafetensorsShapeString(shape), ",\"data_offsets\":[",
                    offset, ",", offset + 4 * n, "]}");
    offset += 4 * n;
  }
  json += "}";
  while ((json.size() + 8) % 64 != 0) json += ' ';  // Aligns the data.
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"),
                                          &std::fclose);
  if (f == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create ", path));
  }
  uint8_t len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<uint8_t>(json.size() >> (8 * i));
  bool ok = std::fwrite(len, 1, 8, f.get()) == 8 &&
            std::fwrite(json.data(), 1, json.size(), f.get()) == json.size();
  std::vector<float> values;
  for (const WeightSpec& w : specs) {
    int64_t n = 1;
    for (int64_t d : w.ne) n *= d;
    values.resize(static_cast<size_t>(n));
    llama::RandomWeightValues(w.name, w.ne.size() > 1 ? w.ne[1] : 1, seed,
                              absl::MakeSpan(values));
    ok = ok &&
         std::fwrite(values.data(), 4, values.size(), f.get()) == values.size();
  }
  if (!ok || std::fflush(f.get()) != 0) {
    return absl::DataLossError(absl::StrCat("short write to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<LlamaConfig> ReadSafetensorsConfig(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(path));
  return ConfigFromMetadata(f.header().metadata, path);
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LoadLlamaModel(
    const std::string& path, std::vector<Backend*> backends,
    const LlamaModelOptions& options, IoReactor& io, LoadStats* stats,
    const LoadOptions& load_options) {
  const auto start = std::chrono::steady_clock::now();
  FERRY_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(path));
  FERRY_ASSIGN_OR_RETURN(LlamaConfig config,
                         ConfigFromMetadata(f.header().metadata, path));
  // Check every tensor against the config before allocating anything.
  for (const WeightSpec& spec : WeightSpecs(config)) {
    auto it = f.header().tensors.find(spec.name);
    if (it == f.header().tensors.end()) {
      return absl::NotFoundError(
          absl::StrCat(path, ": missing tensor '", spec.name, "'"));
    }
    const SafetensorInfo& info = it->second;
    if (info.dtype != "F32") {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor '", spec.name, "' has dtype ",
                       info.dtype, ", expected F32"));
    }
    // safetensors shapes are outermost first.
    const std::vector<int64_t> want(spec.ne.rbegin(), spec.ne.rend());
    if (info.shape != want) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor '", spec.name, "' has shape ",
                       SafetensorsShapeString(info.shape), ", expected ",
                       SafetensorsShapeString(want)));
    }
  }
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model,
                         LlamaModel::Create(config, backends, options));
  std::vector<std::pair<Tensor*, uint64_t>> jobs;
  for (Tensor* t : model->Weights()) {
    auto it = f.header().tensors.find(t->name);
    if (it == f.header().tensors.end()) {
      return absl::InternalError(
          absl::StrCat(path, ": model tensor '", t->name, "' not in the file"));
    }
    jobs.emplace_back(t, it->second.begin);
  }
  std::sort(jobs.begin(), jobs.end(),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  LoadStats local;
  const std::function<int64_t()> now =
      load_options.now ? load_options.now : &TraceRecorder::NowNanos;
  FERRY_RETURN_IF_ERROR(SyncWait(
      LoadAll(path, f.file(), f.data_base(), jobs, *model, io, now, local)));
  local.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (stats != nullptr) *stats = local;
  return model;
}

}  // namespace ferry::examples
