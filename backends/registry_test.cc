#include "ferry/backends/registry.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ferry/backends/testing/fake_device.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::FakeDevice;
using ::ferry::testing::IsOk;
using ::ferry::testing::RegisterFakeFamily;
using ::ferry::testing::StatusIs;
using ::testing::HasSubstr;

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FERRY_ASSERT_OK(RegisterFakeFamily(registry_));
    FERRY_ASSERT_OK(registry_.RegisterDevice(FakeDevice::Create("host")));
  }
  Registry registry_;
};

TEST_F(RegistryTest, SplitDeviceNameIsExact) {
  absl::string_view family;
  int index = -1;
  EXPECT_TRUE(SplitDeviceName("sim12", &family, &index));
  EXPECT_EQ(family, "sim");
  EXPECT_EQ(index, 12);
  EXPECT_TRUE(SplitDeviceName("sim0", &family, &index));
  EXPECT_EQ(index, 0);
  for (const char* bad : {"sim00", "sim01", "sim-1", "sim+1", "sim", "0",
                          "Sim0", "sim 0", "", "sim1x", "cuda9999999"}) {
    EXPECT_FALSE(SplitDeviceName(bad, &family, &index)) << bad;
  }
}

TEST_F(RegistryTest, CreateBackendsMakesMissingDevicesInListOrder) {
  FERRY_ASSERT_OK_AND_ASSIGN(BackendList list,
                             registry_.CreateBackends("fake3,fake1,host"));
  ASSERT_EQ(list.backends.size(), 3u);
  EXPECT_EQ(list.backends[0]->name(), "fake3");
  EXPECT_EQ(list.backends[1]->name(), "fake1");
  EXPECT_EQ(list.backends[2]->name(), "host");
  // Only what was named was made.
  EXPECT_THAT(registry_.FindDevice("fake0"),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(registry_.devices().size(), 3u);
  // Existing devices are reused.
  FERRY_ASSERT_OK_AND_ASSIGN(BackendList again,
                             registry_.CreateBackends("fake1,host"));
  EXPECT_EQ(&again.backends[0]->device(), &list.backends[1]->device());
}

TEST_F(RegistryTest, CreateBackendsRejectsBadItemsNamingThem) {
  struct Case {
    const char* list;
    absl::StatusCode code;
    const char* says;
  };
  for (const Case& c : {
           Case{"fake0, host", absl::StatusCode::kInvalidArgument, "' host'"},
           Case{"fake00,host", absl::StatusCode::kNotFound, "'fake00'"},
           Case{"fake-1,host", absl::StatusCode::kInvalidArgument, "'fake-1'"},
           Case{"fake+1,host", absl::StatusCode::kInvalidArgument, "'fake+1'"},
           Case{"fake0,,host", absl::StatusCode::kInvalidArgument,
                "item 2 is empty"},
           Case{"", absl::StatusCode::kInvalidArgument, "item 1 is empty"},
           Case{"fake0,fake0", absl::StatusCode::kInvalidArgument, "twice"},
           Case{"gpu0,host", absl::StatusCode::kNotFound, "'gpu0'"},
           Case{"fake64,host", absl::StatusCode::kInvalidArgument,
                "index above"},
           Case{"fake1e308", absl::StatusCode::kNotFound, "'fake1e308'"},
       }) {
    EXPECT_THAT(registry_.CreateBackends(c.list),
                StatusIs(c.code, HasSubstr(c.says)))
        << c.list;
  }
  // Nothing was made by the failed calls.
  EXPECT_EQ(registry_.devices().size(), 1u);
}

TEST_F(RegistryTest, FailedFactoryUsesUpNoNameAndRollsBack) {
  CreateBackendsOptions options;
  options.family_options["fake"] = "bad";
  EXPECT_THAT(registry_.CreateBackends("fake0,fake1,host", options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("making device 'fake0'")));
  EXPECT_EQ(registry_.devices().size(), 1u);
  EXPECT_THAT(registry_.AddDevice("fake", "bad"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  FERRY_ASSERT_OK_AND_ASSIGN(Device * device, registry_.AddDevice("fake"));
  EXPECT_EQ(device->name(), "fake0");
  // A backend that cannot be made removes the devices made for the call.
  options.family_options.clear();
  options.backend_params["fake2"] = "threads=2";
  EXPECT_THAT(registry_.CreateBackends("fake2,host", options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("creating a backend on 'fake2'")));
  EXPECT_THAT(registry_.FindDevice("fake2"),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(RegistryTest, FamiliesAndNamesAreChecked) {
  EXPECT_THAT(RegisterFakeFamily(registry_),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(registry_.RegisterFamily("Sim2", nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(registry_.AddDevice("nope"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("fakeN")));
  EXPECT_THAT(registry_.AddDevice("fake", Registry::kMaxFamilyIndex, ""),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(registry_.RegisterDevice(FakeDevice::Create("host")),
              StatusIs(absl::StatusCode::kAlreadyExists));
}

TEST_F(RegistryTest, BestBackendPrefersAccelerators) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto backend, registry_.CreateBackend());
  EXPECT_EQ(backend->name(), "host");  // FakeDevice is an accelerator.
  Registry empty;
  EXPECT_THAT(empty.CreateBackend(), StatusIs(absl::StatusCode::kNotFound));
}

// An address family as backends/remote registers it: "at:ADDR" items whose
// address is checked first and made (as a fake device named after it).
absl::Status RegisterAtFamily(Registry& registry, int* made) {
  return registry.RegisterAddressFamily(
      "at",
      [](absl::string_view address) {
        return address.find('/') != absl::string_view::npos
                   ? absl::OkStatus()
                   : absl::InvalidArgumentError("expected HOST/DEV");
      },
      [made](absl::string_view address,
             absl::string_view) -> absl::StatusOr<std::unique_ptr<Device>> {
        if (absl::StrContains(address, "down")) {
          return absl::UnavailableError("cannot connect");
        }
        ++*made;
        return std::unique_ptr<Device>(
            FakeDevice::Create(absl::StrCat("at:", address)));
      });
}

TEST_F(RegistryTest, AddressItemsAreCheckedThenMadeOnce) {
  int made = 0;
  FERRY_ASSERT_OK(RegisterAtFamily(registry_, &made));
  EXPECT_TRUE(registry_.HasAddressFamily("at"));
  FERRY_ASSERT_OK_AND_ASSIGN(
      BackendList list,
      registry_.CreateBackends("at:10.0.0.1:7000/sim0,fake1,at:h:1/cpu"));
  ASSERT_EQ(list.backends.size(), 3u);
  EXPECT_EQ(list.backends[0]->name(), "at:10.0.0.1:7000/sim0");
  EXPECT_EQ(list.backends[2]->name(), "at:h:1/cpu");
  EXPECT_EQ(made, 2);
  // Existing address devices are reused, not made again.
  FERRY_ASSERT_OK(registry_.CreateBackends("at:h:1/cpu").status());
  EXPECT_EQ(made, 2);
  // A bad address is refused before anything is made, naming the item.
  EXPECT_THAT(
      registry_.CreateBackends("fake5,at:nodevice"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'at:nodevice'")));
  EXPECT_THAT(registry_.FindDevice("fake5"),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(registry_.CreateBackends("nope:h:1/cpu"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("'nope'")));
  EXPECT_THAT(registry_.CreateBackends("at:h:1/cpu,at:h:1/cpu"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("twice")));
  // A device that cannot be made rolls back what the call made.
  EXPECT_THAT(
      registry_.CreateBackends("fake7,at:down:1/cpu"),
      StatusIs(absl::StatusCode::kUnavailable, HasSubstr("at:down:1/cpu")));
  EXPECT_THAT(registry_.FindDevice("fake7"),
              StatusIs(absl::StatusCode::kNotFound));
  // Family names are one name space.
  EXPECT_THAT(registry_.RegisterAddressFamily("fake", nullptr, nullptr),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(registry_.RegisterFamily("at", nullptr),
              StatusIs(absl::StatusCode::kAlreadyExists));
}

}  // namespace
}  // namespace ferry
