// Loading every tensor of the SmolLM2 GGUF (94 MiB) into host memory
// through IoReactor: io_uring against the pread fallback, page cache warm
// (the file was just read) and cold (dropped before each iteration, where
// the filesystem allows). Needs tools/fetch_smollm2.sh's file. Run with
//   ./bazelw run --config=opt //models/gguf:gguf_load_benchmark
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "ferry/models/gguf/gguf_tensor_reader.h"
#include "ferry/models/gguf/testing/smollm2.h"
#include "ferry/runtime/io_reactor.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/thread_pool.h"

namespace ferry::gguf {
namespace {

void BM_LoadSmolLm2(benchmark::State& state, bool fallback, bool cold) {
  const auto path = testing::FindSmolLm2Gguf();
  if (!path.has_value()) {
    state.SkipWithError("no SmolLM2 GGUF (tools/fetch_smollm2.sh)");
    return;
  }
  auto reader = GgufTensorReader::Open(*path);
  if (!reader.ok()) {
    state.SkipWithError(std::string(reader.status().message()).c_str());
    return;
  }
  ThreadPool pool(4);
  IoReactorOptions options;
  options.force_fallback = fallback;
  auto io = IoReactor::Create(&pool, options);
  std::vector<std::vector<std::byte>> buffers;
  std::vector<TensorDestination> reads;
  int64_t bytes = 0;
  for (const GgufTensorInfo& t : (*reader)->gguf().tensors()) {
    buffers.emplace_back(t.size);
    bytes += static_cast<int64_t>(t.size);
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    reads.push_back(
        {&(*reader)->gguf().tensors()[i], absl::MakeSpan(buffers[i])});
  }
  const int in_flight = static_cast<int>(state.range(0));
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      if (!(*reader)->file().DropCache().ok()) {
        state.SkipWithError("cannot drop the page cache here");
        break;
      }
      state.ResumeTiming();
    }
    const absl::Status s =
        SyncWait((*reader)->ReadTensors(**io, reads, in_flight));
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      break;
    }
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.SetLabel((*io)->name().data());
}

BENCHMARK_CAPTURE(BM_LoadSmolLm2, io_uring_warm, false, false)
    ->Arg(1)
    ->Arg(32)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_LoadSmolLm2, pread_warm, true, false)
    ->Arg(1)
    ->Arg(32)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_LoadSmolLm2, io_uring_cold, false, true)
    ->Arg(32)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_LoadSmolLm2, pread_cold, true, true)
    ->Arg(32)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace ferry::gguf
