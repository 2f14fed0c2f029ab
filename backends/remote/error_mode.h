// Which UCX error handling an endpoint asks for, and so which transports
// UCX may pick for it.
//
// UCX 1.13's shared-memory transports (posix, sysv, cma) cannot report a
// dead peer, so UCX leaves them out of any endpoint made with peer-failure
// handling: two processes on one host then talk over TCP loopback. Measured
// on a 2-core VM, a 64 MiB upload went 4.1 GiB/s over TCP and 8.2 GiB/s over
// shared memory, and a 4 KiB round trip took 21 us against 9 us.
//
// So an endpoint to a peer on this host (its address is one of this network
// namespace's, loopback included) is made without UCX's peer-failure
// handling when UCX_TLS lets UCX use shared memory; ferry's own deadlines
// stand in for it (a client's FERRY_REMOTE_DEADLINE_MS and keep-alives, a
// worker's client timeout). Every other endpoint keeps it.
// Both ends apply the same rule to each other's address, so they agree;
// FERRY_REMOTE_SHARED_MEMORY=0 on both turns it off.
#ifndef FERRY_BACKENDS_REMOTE_ERROR_MODE_H_
#define FERRY_BACKENDS_REMOTE_ERROR_MODE_H_

#include <sys/socket.h>
#include <ucp/api/ucp.h>

#include "absl/strings/string_view.h"

namespace ferry::remote {

// True if `addr` is an address of this host in this network namespace.
bool IsLocalAddress(const sockaddr_storage& addr);

// True if a UCX_TLS value lets UCX use shared memory (unset or empty
// included: UCX's default takes every transport).
bool TlsAllowsSharedMemory(absl::string_view ucx_tls);

// The error handling for an endpoint to `peer`, by the rule above.
ucp_err_handling_mode_t ErrorHandlingFor(const sockaddr_storage& peer);

}  // namespace ferry::remote

#endif  // FERRY_BACKENDS_REMOTE_ERROR_MODE_H_
