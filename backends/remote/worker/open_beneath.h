// OpenBeneath: opens a file for reading beneath a directory without ever
// following a symbolic link or leaving the directory, so a link planted in
// a weights directory cannot hand out another file of the worker's user.
#ifndef FERRY_BACKENDS_REMOTE_WORKER_OPEN_BENEATH_H_
#define FERRY_BACKENDS_REMOTE_WORKER_OPEN_BENEATH_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ferry::remote {

// Checks `relative` is a path a client may name: relative, no "..", no
// empty or "." parts, no NUL.
absl::Status CheckRelativePath(absl::string_view relative);

// A read-only descriptor (close-on-exec) of the regular file `relative`
// beneath `dir`: openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, or,
// where the kernel lacks openat2, one component at a time with O_NOFOLLOW.
// Never blocks on a FIFO or device (opened non-blocking, then refused as
// not a regular file). NotFound, PermissionDenied or InvalidArgument say
// why not.
absl::StatusOr<int> OpenBeneath(absl::string_view dir,
                                absl::string_view relative);

// For tests: the fallback alone, as on a kernel without openat2.
absl::StatusOr<int> OpenBeneathByComponents(absl::string_view dir,
                                            absl::string_view relative);

}  // namespace ferry::remote

#endif  // FERRY_BACKENDS_REMOTE_WORKER_OPEN_BENEATH_H_
