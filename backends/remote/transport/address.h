// Worker addresses: "HOST:PORT" (a name or IPv4 address, or "[v6]:PORT"),
// and the remote device names built on them ("remote:HOST:PORT/sim0").
#ifndef FERRY_BACKENDS_REMOTE_TRANSPORT_ADDRESS_H_
#define FERRY_BACKENDS_REMOTE_TRANSPORT_ADDRESS_H_

#include <sys/socket.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ferry::remote {

struct HostPort {
  std::string host;
  int port = 0;
  std::string ToString() const;
};

// Parses "HOST:PORT"; InvalidArgument names what is wrong.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view text);

// A device on a worker: "HOST:PORT/DEVICE" (what follows "remote:").
struct RemoteDeviceAddress {
  HostPort worker;
  std::string device;  // The worker's name for it: "sim0", "cpu".
};
absl::StatusOr<RemoteDeviceAddress> ParseRemoteDeviceAddress(
    absl::string_view text);

// Resolves a host (name or numeric) and port for UCX's sockaddr API.
absl::StatusOr<sockaddr_storage> ResolveAddress(const std::string& host,
                                                int port);
// The port of a socket address.
int SockaddrPort(const sockaddr_storage& addr);

}  // namespace ferry::remote

#endif  // FERRY_BACKENDS_REMOTE_TRANSPORT_ADDRESS_H_
