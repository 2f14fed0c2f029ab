#include "ferry/backends/remote/error_mode.h"

#include <ifaddrs.h>
#include <netinet/in.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"

namespace ferry::remote {
namespace {

bool SameIp(const sockaddr* a, const sockaddr_storage& b) {
  if (a == nullptr || a->sa_family != b.ss_family) return false;
  if (b.ss_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in&>(b).sin_addr.s_addr;
  }
  if (b.ss_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6&>(b).sin6_addr,
                       sizeof(in6_addr)) == 0;
  }
  return false;
}

}  // namespace

bool IsLocalAddress(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET) {
    const uint32_t ip =
        ntohl(reinterpret_cast<const sockaddr_in&>(addr).sin_addr.s_addr);
    if ((ip >> 24) == 127) return true;
  } else if (addr.ss_family == AF_INET6) {
    if (IN6_IS_ADDR_LOOPBACK(
            &reinterpret_cast<const sockaddr_in6&>(addr).sin6_addr)) {
      return true;
    }
  } else {
    return false;
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool local = false;
  for (ifaddrs* i = list; i != nullptr && !local; i = i->ifa_next) {
    local = SameIp(i->ifa_addr, addr);
  }
  freeifaddrs(list);
  return local;
}

bool TlsAllowsSharedMemory(absl::string_view ucx_tls) {
  const bool excluding = !ucx_tls.empty() && ucx_tls.front() == '^';
  if (excluding) ucx_tls.remove_prefix(1);
  if (ucx_tls.empty()) return true;
  bool named_all = false, named_shm = false;
  for (absl::string_view name : absl::StrSplit(ucx_tls, ',')) {
    if (name == "all") named_all = true;
    if (name == "sm" || name == "shm" || name == "posix" || name == "sysv" ||
        name == "cma" || name == "knem" || name == "xpmem") {
      named_shm = true;
    }
  }
  // "^sm" rules shared memory out; "^tcp" leaves it in.
  if (excluding) return !named_shm && !named_all;
  return named_shm || named_all;
}

ucp_err_handling_mode_t ErrorHandlingFor(const sockaddr_storage& peer) {
  const char* off = std::getenv("FERRY_REMOTE_SHARED_MEMORY");
  if (off != nullptr && std::string(off) == "0") {
    return UCP_ERR_HANDLING_MODE_PEER;
  }
  const char* tls = std::getenv("UCX_TLS");
  if (!TlsAllowsSharedMemory(tls == nullptr ? "" : tls) ||
      !IsLocalAddress(peer)) {
    return UCP_ERR_HANDLING_MODE_PEER;
  }
  return UCP_ERR_HANDLING_MODE_NONE;
}

}  // namespace ferry::remote
