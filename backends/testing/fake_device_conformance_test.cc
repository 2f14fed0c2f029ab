// The fake device (a test double) runs the backend conformance suite too:
// scheduler tests stand on it, so it must behave like a real backend.
#include "ferry/backends/testing/fake_device.h"
#include "ferry/tests/conformance/conformance.h"

namespace ferry::testing {
namespace {

FERRY_INSTANTIATE_CONFORMANCE(
    Fake, ConformanceBackend{
              .name = "fake",
              .create =
                  [] {
                    static FakeDevice* const device =
                        FakeDevice::Create("fakeconf0").release();
                    return device->CreateBackend();
                  },
              .unsupported = {
                  {"ComputeConformanceTest.TracingRecordsOneSpanPerComputeNode",
                   "a test double: it logs operations, it keeps no trace"}}});

}  // namespace
}  // namespace ferry::testing
