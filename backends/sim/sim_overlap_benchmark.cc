// Copy/compute overlap on the simulated device, for N chunks of input:
//   (a) serial: one stream uploads chunk i, then computes on it, then the
//       next chunk;
//   (b) double-buffered: a copy stream uploads chunk i into slot i % 2 while
//       a compute stream computes on chunk i - 1, ordered by events (the
//       compute waits for the upload; the upload into a slot waits for the
//       compute that last read it).
// Reports both, the ideal max(total copy, total compute) and the overlap
// efficiency ((a) - (b)) / ((a) - ideal), all on the modelled clock (exact
// and independent of host load), plus wall time and model slip. Pipelining
// N chunks cannot hide the first upload, so the best possible efficiency is
// (N - 1) / N.
//
// Run with
//   ./bazelw run --config=opt //backends/sim:sim_overlap_benchmark
// and try other devices: FERRY_SIM_CONFIG="h2d=64GB/s" (appended to the
// benchmark's config, so its keys win).
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/registry.h"
#include "ferry/backends/sim/sim_device.h"
#include "ferry/backends/sim/sim_stats.h"
#include "ferry/backends/sim/sim_testing.h"
#include "ferry/graph/context.h"
#include "ferry/graph/ops.h"
#include "ferry/graph/tensor.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/trace.h"

namespace ferry {
namespace {

// A chunk is [kK, kRows] f32 (1 MiB); each is multiplied by a resident
// [kK, kK] weight: 2 * 64 * 64 * 4096 = 33.5 MFLOP.
constexpr int64_t kK = 64;
constexpr int64_t kRows = 4096;
constexpr size_t kChunkBytes = kK * kRows * sizeof(float);

// PCIe Gen4 x16 uploads (52 us per chunk with latency) and a compute rate
// that makes each chunk's kernel 67 us: a slightly compute-bound pipeline.
// scale=100 runs the model 100x slower than real time so the host's
// single-threaded kernels keep up with it (slip is reported if not).
constexpr char kBaseConfig[] =
    "mem=1GiB,flops=0.5T,bw=1TB/s,h2d=25GB/s,lat=10us,scale=100";

void Check(const absl::Status& status) {
  if (!status.ok()) {
    std::fprintf(stderr, "sim_overlap_benchmark: %s\n",
                 std::string(status.message()).c_str());
    std::abort();
  }
}

template <typename T>
T Check(absl::StatusOr<T> value) {
  Check(value.status());
  return *std::move(value);
}

struct Row {
  double serial_us = 0;
  double overlap_us = 0;
  double ideal_us = 0;
  double efficiency = 0;
  double wall_serial_ms = 0;
  double wall_overlap_ms = 0;
  double slip_us = 0;
};

// Rows of the summary table, printed at exit.
struct Table {
  std::string config;
  std::map<int, Row> rows;
  ~Table() {
    if (rows.empty()) return;
    std::printf("\nsim copy/compute overlap (%s)\n", config.c_str());
    std::printf("%6s %12s %12s %12s %10s %10s %14s %14s %10s\n", "chunks",
                "(a) us", "(b) us", "ideal us", "eff", "best", "wall (a) ms",
                "wall (b) ms", "slip us");
    for (const auto& [n, row] : rows) {
      std::printf(
          "%6d %12.1f %12.1f %12.1f %10.4f %10.4f %14.1f %14.1f %10.1f\n", n,
          row.serial_us, row.overlap_us, row.ideal_us, row.efficiency,
          (n - 1.0) / n, row.wall_serial_ms, row.wall_overlap_ms, row.slip_us);
    }
  }
};
Table table;

struct Setup {
  SimDevice* device = nullptr;
  Context ctx;
  Tensor* weight = nullptr;
  std::array<Tensor*, 2> x{};  // Device slots.
  std::array<Tensor*, 2> y{};  // Results, one per slot.
  std::unique_ptr<Buffer> device_buffer;
  std::unique_ptr<Buffer> host_buffer;  // Pinned: all N chunks.
  std::unique_ptr<Backend> copy_stream;
  std::unique_ptr<Backend> compute_stream;
};

Setup& GetSetup(int max_chunks) {
  static Setup* setup = [&] {
    auto* s = new Setup();
    std::string config = kBaseConfig;
    if (const char* extra = std::getenv("FERRY_SIM_CONFIG")) {
      absl::StrAppend(&config, ",", extra);
    }
    table.config = config;
    Check(RegisterSimFamily(Registry::Global()));
    Device* device = Check(Registry::Global().AddDevice("sim", config));
    s->device = static_cast<SimDevice*>(device);
    s->weight = Check(s->ctx.NewTensor(DType::kF32, {kK, kK}, "w"));
    for (int i = 0; i < 2; ++i) {
      s->x[i] = Check(
          s->ctx.NewTensor(DType::kF32, {kK, kRows}, absl::StrCat("x", i)));
      s->y[i] = Check(MulMat(s->ctx, s->weight, s->x[i]));
    }
    BufferType* type = device->default_buffer_type();
    const size_t align = type->alignment();
    size_t offset = 0;
    std::vector<std::pair<Tensor*, size_t>> places;
    for (Tensor* t : s->ctx.tensors()) {
      offset = (offset + align - 1) / align * align;
      places.emplace_back(t, offset);
      offset += type->AllocSize(*t);
    }
    s->device_buffer = Check(type->Allocate(offset));
    for (auto& [t, at] : places) Check(PlaceTensor(*s->device_buffer, *t, at));
    std::vector<float> w(kK * kK, 0.01f);
    Check(SetTensorData(*s->weight, w.data()));
    s->host_buffer =
        Check(device->host_buffer_type()->Allocate(kChunkBytes * max_chunks));
    auto* host = static_cast<float*>(s->host_buffer->base());
    for (size_t i = 0; i < kChunkBytes * max_chunks / sizeof(float); ++i) {
      host[i] = static_cast<float>(i % 97) * 0.01f;
    }
    s->copy_stream = Check(device->CreateBackend());
    s->compute_stream = Check(device->CreateBackend());
    return s;
  }();
  return *setup;
}

const void* Chunk(Setup& s, int i) {
  return static_cast<const char*>(s.host_buffer->base()) + i * kChunkBytes;
}

// Runs `enqueue` behind a gate and returns the modelled nanoseconds from the
// gate opening to `last()` completing, and the wall nanoseconds.
template <typename Enqueue>
std::pair<int64_t, int64_t> Timed(Setup& s, Enqueue enqueue) {
  SimGate gate(*s.device);
  Event done = enqueue(gate.event());
  const int64_t wall_begin = TraceRecorder::NowNanos();
  gate.Open();
  Check(done.WaitBlocking());
  const int64_t wall = TraceRecorder::NowNanos() - wall_begin;
  const int64_t begin = Check(SimDevice::EventTime(gate.event()));
  const int64_t end = Check(SimDevice::EventTime(done));
  return {end - begin, wall};
}

void BM_CopyComputeOverlap(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  Setup& s = GetSetup(64);
  Backend& cs = *s.copy_stream;
  Backend& ks = *s.compute_stream;
  Row row;
  for (auto _ : state) {
    // (a) Serial on one stream.
    s.device->ResetStats();
    auto [serial, wall_serial] = Timed(s, [&](const Event& gate) {
      Check(ks.EnqueueWait(gate));
      for (int i = 0; i < n; ++i) {
        Check(ks.EnqueueSetTensor(*s.x[0], Chunk(s, i), 0, kChunkBytes));
        Check(ks.EnqueueCompute({&s.y[0], 1}));
      }
      return ks.Record();
    });
    const SimEngineStats h2d = s.device->stats(SimEngineKind::kH2D);
    const SimEngineStats compute = s.device->stats(SimEngineKind::kCompute);
    const int64_t ideal = std::max(h2d.busy_ns, compute.busy_ns);
    int64_t slip = h2d.slip_ns + compute.slip_ns;

    // (b) Double-buffered over a copy and a compute stream.
    s.device->ResetStats();
    auto [overlap, wall_overlap] = Timed(s, [&](const Event& gate) {
      Check(cs.EnqueueWait(gate));
      Check(ks.EnqueueWait(gate));
      std::vector<Event> computed(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) {
        const int slot = i % 2;
        if (i >= 2) Check(cs.EnqueueWait(computed[static_cast<size_t>(i - 2)]));
        Check(cs.EnqueueSetTensor(*s.x[slot], Chunk(s, i), 0, kChunkBytes));
        Check(ks.EnqueueWait(cs.Record()));
        Check(ks.EnqueueCompute({&s.y[slot], 1}));
        computed[static_cast<size_t>(i)] = ks.Record();
      }
      return ks.Record();
    });
    slip += s.device->stats(SimEngineKind::kH2D).slip_ns +
            s.device->stats(SimEngineKind::kCompute).slip_ns;
    Check(cs.Synchronize());
    Check(ks.Synchronize());

    state.SetIterationTime(static_cast<double>(overlap) * 1e-9);
    row.serial_us = serial / 1e3;
    row.overlap_us = overlap / 1e3;
    row.ideal_us = ideal / 1e3;
    row.efficiency = static_cast<double>(serial - overlap) /
                     static_cast<double>(serial - ideal);
    row.wall_serial_ms = wall_serial / 1e6;
    row.wall_overlap_ms = wall_overlap / 1e6;
    row.slip_us = slip / 1e3;
  }
  state.counters["serial_us"] = row.serial_us;
  state.counters["overlap_us"] = row.overlap_us;
  state.counters["ideal_us"] = row.ideal_us;
  state.counters["efficiency"] = row.efficiency;
  state.counters["slip_us"] = row.slip_us;
  table.rows[n] = row;
}

BENCHMARK(BM_CopyComputeOverlap)
    ->Arg(4)
    ->Arg(8)
    ->Arg(16)
    ->Arg(32)
    ->Arg(64)
    ->Iterations(2)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace ferry
