// Suppressions every ferry test and program carries into sanitizer builds
// (the runtimes call these hooks at start; other builds never do). Each entry
// is a report from code the sanitizer cannot see into, not from ferry's:
// Debian's Abseil and UCX are built without instrumentation, so TSan misses
// the atomics inside them and LSan cannot tell their process-lifetime state
// from a leak. (Races are suppressed only where UCX's own code makes the
// access, the report's top frame: ferry's callbacks run under UCX's
// progress calls, and those must stay checked.)
extern "C" const char* __tsan_default_suppressions() {
  return
      // absl::Status frees its shared rep in UnrefNonInlined, inside the
      // uninstrumented libabsl_status: a Status copied to another thread and
      // released there looks like a race on the rep.
      "race:absl::*Status::Unref\n"
      // libucs itself, through an intercepted libc call, against UCX's async
      // thread (seen rarely, loopback TCP, the remote program test): UCX's
      // locks between the two are invisible to TSan.
      "race_top:libucs.so\n";
}

extern "C" const char* __lsan_default_suppressions() {
  // UCX keeps a small allocation of its own past exit after a TCP connection
  // to another host address.
  return "leak:libucs.so\n";
}
