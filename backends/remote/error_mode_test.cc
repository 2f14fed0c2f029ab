#include "ferry/backends/remote/error_mode.h"

#include "ferry/backends/remote/address.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry::remote {
namespace {

TEST(ErrorModeTest, LoopbackIsLocalAndAForeignAddressIsNot) {
  FERRY_ASSERT_OK_AND_ASSIGN(sockaddr_storage loopback,
                             ResolveAddress("127.0.0.1", 7000));
  EXPECT_TRUE(IsLocalAddress(loopback));
  FERRY_ASSERT_OK_AND_ASSIGN(sockaddr_storage v6, ResolveAddress("::1", 7000));
  EXPECT_TRUE(IsLocalAddress(v6));
  // TEST-NET-3 (RFC 5737): never a local interface's.
  FERRY_ASSERT_OK_AND_ASSIGN(sockaddr_storage foreign,
                             ResolveAddress("203.0.113.7", 7000));
  EXPECT_FALSE(IsLocalAddress(foreign));
}

TEST(ErrorModeTest, UcxTlsDecidesWhetherSharedMemoryIsAllowed) {
  EXPECT_TRUE(TlsAllowsSharedMemory(""));
  EXPECT_TRUE(TlsAllowsSharedMemory("sm,self,tcp"));
  EXPECT_TRUE(TlsAllowsSharedMemory("cma,tcp"));
  EXPECT_TRUE(TlsAllowsSharedMemory("all"));
  EXPECT_TRUE(TlsAllowsSharedMemory("^tcp"));
  EXPECT_FALSE(TlsAllowsSharedMemory("tcp"));
  EXPECT_FALSE(TlsAllowsSharedMemory("tcp,self"));
  EXPECT_FALSE(TlsAllowsSharedMemory("^sm"));
}

TEST(ErrorModeTest, OnlyAPeerOnThisHostGoesWithoutPeerFailureHandling) {
  FERRY_ASSERT_OK_AND_ASSIGN(sockaddr_storage loopback,
                             ResolveAddress("127.0.0.1", 7000));
  FERRY_ASSERT_OK_AND_ASSIGN(sockaddr_storage foreign,
                             ResolveAddress("203.0.113.7", 7000));
  setenv("UCX_TLS", "sm,self,tcp", 1);
  unsetenv("FERRY_REMOTE_SHARED_MEMORY");
  EXPECT_EQ(ErrorHandlingFor(loopback), UCP_ERR_HANDLING_MODE_NONE);
  EXPECT_EQ(ErrorHandlingFor(foreign), UCP_ERR_HANDLING_MODE_PEER);
  setenv("FERRY_REMOTE_SHARED_MEMORY", "0", 1);
  EXPECT_EQ(ErrorHandlingFor(loopback), UCP_ERR_HANDLING_MODE_PEER);
  unsetenv("FERRY_REMOTE_SHARED_MEMORY");
  setenv("UCX_TLS", "tcp", 1);
  EXPECT_EQ(ErrorHandlingFor(loopback), UCP_ERR_HANDLING_MODE_PEER);
}

}  // namespace
}  // namespace ferry::remote
