#include "ferry/backends/remote/worker/open_beneath.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::remote {
namespace {

absl::Status OpenError(absl::string_view relative, int err) {
  const std::string why =
      absl::StrCat("cannot open '", relative, "': ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(why);
    case ELOOP:
    case EXDEV:
      return absl::PermissionDeniedError(
          absl::StrCat(why,
                       " (symbolic links and paths leaving the directory are "
                       "refused)"));
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(why);
    default:
      return absl::InvalidArgumentError(why);
  }
}

// `fd` if it is a regular file (then made blocking for reads), else closed.
absl::StatusOr<int> RegularFile(int fd, absl::string_view relative) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("'", relative, "' is not a regular file"));
  }
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

constexpr int kFileFlags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;

}  // namespace

absl::Status CheckRelativePath(absl::string_view relative) {
  if (relative.empty() || relative[0] == '/' ||
      relative.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", relative, "' is not a relative path"));
  }
  for (absl::string_view part : absl::StrSplit(relative, '/')) {
    if (part == ".." || part == "." || part.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", relative, "' leaves the weights directory"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> OpenBeneathByComponents(absl::string_view dir,
                                            absl::string_view relative) {
  FERRY_RETURN_IF_ERROR(CheckRelativePath(relative));
  // The directory itself is the operator's (it may be a link).
  int at = open(std::string(dir).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (at < 0) return OpenError(dir, errno);
  std::vector<std::string> parts = absl::StrSplit(relative, '/');
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    const int flags = last ? kFileFlags | O_NOFOLLOW
                           : O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW;
    const int next = openat(at, parts[i].c_str(), flags);
    int err = errno;
    struct stat st;
    // O_DIRECTORY | O_NOFOLLOW on a link says ENOTDIR: say it was a link.
    if (next < 0 && err == ENOTDIR &&
        fstatat(at, parts[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISLNK(st.st_mode)) {
      err = ELOOP;
    }
    close(at);
    if (next < 0) return OpenError(relative, err);
    at = next;
  }
  return RegularFile(at, relative);
}

absl::StatusOr<int> OpenBeneath(absl::string_view dir,
                                absl::string_view relative) {
  FERRY_RETURN_IF_ERROR(CheckRelativePath(relative));
  const int root =
      open(std::string(dir).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) return OpenError(dir, errno);
  open_how how = {};
  how.flags = kFileFlags;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const std::string path(relative);
  const long fd = syscall(SYS_openat2, root, path.c_str(), &how, sizeof(how));
  const int err = errno;
  close(root);
  if (fd < 0) {
    // A kernel before 5.6 (or a sandbox that filters the call).
    if (err == ENOSYS || err == EPERM) {
      return OpenBeneathByComponents(dir, relative);
    }
    return OpenError(relative, err);
  }
  return RegularFile(static_cast<int>(fd), relative);
}

}  // namespace ferry::remote
