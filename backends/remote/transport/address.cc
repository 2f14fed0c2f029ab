#include "ferry/backends/remote/transport/address.h"

#include <netdb.h>
#include <netinet/in.h>

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ferry/backends/registry.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::remote {

std::string HostPort::ToString() const {
  if (host.find(':') != std::string::npos) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view text) {
  HostPort out;
  absl::string_view port;
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    if (close == absl::string_view::npos || close + 1 >= text.size() ||
        text[close + 1] != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("'", text, "': expected [IPV6]:PORT"));
    }
    out.host = std::string(text.substr(1, close - 1));
    port = text.substr(close + 2);
    for (char c : out.host) {
      if (!absl::ascii_isxdigit(c) && c != ':' && c != '.') {
        return absl::InvalidArgumentError(
            absl::StrCat("'", text, "': bad IPv6 address"));
      }
    }
  } else {
    const size_t colon = text.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", text, "': expected HOST:PORT"));
    }
    out.host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
    for (char c : out.host) {
      if (!absl::ascii_isalnum(c) && c != '.' && c != '-' && c != '_') {
        return absl::InvalidArgumentError(
            absl::StrCat("'", text, "': host has '", std::string(1, c),
                         "' (letters, digits, '.', '-', '_')"));
      }
    }
  }
  if (out.host.empty() || out.host.size() > 253) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "': empty or overlong host"));
  }
  if (port.empty() || port.size() > 5 || port[0] == '0' ||
      !std::all_of(port.begin(), port.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(port, &out.port) || out.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "': port '", port, "' is not 1..65535"));
  }
  return out;
}

absl::StatusOr<RemoteDeviceAddress> ParseRemoteDeviceAddress(
    absl::string_view text) {
  const size_t slash = text.rfind('/');
  if (slash == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "': expected HOST:PORT/DEVICE"));
  }
  RemoteDeviceAddress out;
  FERRY_ASSIGN_OR_RETURN(out.worker, ParseHostPort(text.substr(0, slash)));
  out.device = std::string(text.substr(slash + 1));
  absl::string_view family;
  int index;
  if (out.device != "cpu" && !SplitDeviceName(out.device, &family, &index)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "': '", out.device, "' is not a device name"));
  }
  return out;
}

absl::StatusOr<sockaddr_storage> ResolveAddress(const std::string& host,
                                                int port) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* result = nullptr;
  const std::string service = absl::StrCat(port);
  const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &result);
  if (rc != 0 || result == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  sockaddr_storage out = {};
  std::memcpy(&out, result->ai_addr, result->ai_addrlen);
  freeaddrinfo(result);
  return out;
}

int SockaddrPort(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
  }
  if (addr.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
  }
  return 0;
}

}  // namespace ferry::remote
