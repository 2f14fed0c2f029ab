// Item 8 of issue #15: registering CUDA devices touches no driver state.
// Nothing runs at static initialization; registration reads properties
// only (no context, no peer access, the caller's current device kept);
// the first use of a device creates its context, and the first copy
// between two GPUs enables peer access between them. Its own binary: it
// checks the fake runtime from the process's first call on.
#include <cuda_runtime_api.h>

#include <vector>

#include "ferry/backends/cuda/cuda_backend.h"
#include "ferry/backends/cuda/cuda_device.h"
#include "ferry/backends/cuda/testing/fake_cuda_control.h"
#include "ferry/backends/registry.h"
#include "ferry/graph/context.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

int CurrentDevice() {
  int device = -1;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  return device;
}

TEST(CudaLazyInitTest, DevicesAreSetUpByTheirFirstUse) {
  // Static initialization (ferry's, gtest's) made no CUDA call.
  EXPECT_EQ(fake_cuda::GetStats().api_calls, 0);

  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);  // The program's own choice.
  ASSERT_TRUE(fake_cuda::ContextCreated(1));
  Registry registry;
  FERRY_ASSERT_OK(RegisterCudaFamily(registry));
  FERRY_ASSERT_OK_AND_ASSIGN(int registered, RegisterCudaDevices(registry));
  EXPECT_EQ(registered, 2);
  FERRY_ASSERT_OK_AND_ASSIGN(Device * zero, registry.FindDevice("cuda0"));
  FERRY_ASSERT_OK_AND_ASSIGN(Device * one, registry.FindDevice("cuda1"));
  const DeviceProps props = zero->props();  // Asking creates nothing.
  EXPECT_EQ(props.memory_free, props.memory_total);
  EXPECT_FALSE(fake_cuda::ContextCreated(0));
  EXPECT_FALSE(fake_cuda::PeerAccessEnabled(0, 1));
  EXPECT_FALSE(fake_cuda::PeerAccessEnabled(1, 0));
  EXPECT_EQ(CurrentDevice(), 1);

  // First use of cuda0: its context, nothing else; the caller's current
  // device stays.
  FERRY_ASSERT_OK_AND_ASSIGN(auto backend0, zero->CreateBackend());
  EXPECT_TRUE(fake_cuda::ContextCreated(0));
  EXPECT_FALSE(fake_cuda::PeerAccessEnabled(0, 1));
  EXPECT_EQ(CurrentDevice(), 1);

  // The first copy from cuda1 to cuda0 enables peer access 0 -> 1 only.
  FERRY_ASSERT_OK_AND_ASSIGN(auto backend1, one->CreateBackend());
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * src, ctx.NewTensor(DType::kF32, {64}));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * dst, ctx.NewTensor(DType::kF32, {64}));
  FERRY_ASSERT_OK_AND_ASSIGN(auto src_buffer,
                             one->default_buffer_type()->Allocate(256));
  FERRY_ASSERT_OK_AND_ASSIGN(auto dst_buffer,
                             zero->default_buffer_type()->Allocate(256));
  FERRY_ASSERT_OK(PlaceTensor(*src_buffer, *src, 0));
  FERRY_ASSERT_OK(PlaceTensor(*dst_buffer, *dst, 0));
  std::vector<float> values(64, 3.0f);
  FERRY_ASSERT_OK(SetTensorData(*src, values.data()));
  FERRY_ASSERT_OK(backend0->EnqueueCopyTensor(*backend1, *src, *dst));
  FERRY_ASSERT_OK(backend0->Synchronize());
  EXPECT_TRUE(fake_cuda::PeerAccessEnabled(0, 1));
  EXPECT_FALSE(fake_cuda::PeerAccessEnabled(1, 0));
  std::vector<float> out(64);
  FERRY_ASSERT_OK(GetTensorData(*dst, out.data()));
  EXPECT_EQ(out, values);
  EXPECT_EQ(CurrentDevice(), 1);
}

}  // namespace
}  // namespace ferry
