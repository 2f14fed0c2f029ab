#include "ferry/backends/cuda/cuda_probe.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ferry/backends/cuda/cuda_status.h"

namespace ferry {
namespace {

std::string Version(int version) {
  return absl::StrCat(version / 1000, ".", version % 1000 / 10, " (", version,
                      ")");
}

}  // namespace

std::string CudaVersionString() {
  int driver = 0;
  int runtime = 0;
  const bool have_driver =
      cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0;
  (void)cudaRuntimeGetVersion(&runtime);
  (void)cudaGetLastError();  // Version queries leave nothing pending.
  return absl::StrCat("driver ", have_driver ? Version(driver) : "none",
                      ", runtime ", Version(runtime));
}

absl::StatusOr<int> CudaDeviceCount() {
  static const absl::StatusOr<int>* const result = [] {
    int count = 0;
    absl::Status status =
        CudaToStatus(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    (void)cudaGetLastError();
    if (status.ok() && count == 0) {
      status = absl::UnavailableError("cudaGetDeviceCount: no CUDA devices");
    }
    if (!status.ok()) {
      status = absl::Status(
          status.code(),
          absl::StrCat(status.message(), " (", CudaVersionString(), ")"));
      std::fprintf(stderr, "ferry: no CUDA device: %s\n",
                   std::string(status.message()).c_str());
      return new absl::StatusOr<int>(status);
    }
    return new absl::StatusOr<int>(count);
  }();
  return *result;
}

}  // namespace ferry
