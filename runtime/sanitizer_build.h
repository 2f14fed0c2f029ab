#ifndef FERRY_RUNTIME_SANITIZER_BUILD_H_
#define FERRY_RUNTIME_SANITIZER_BUILD_H_

namespace ferry {

// True when built with AddressSanitizer or ThreadSanitizer (the macros GCC
// defines; CI's --config=asan/tsan build with it). Tests shrink their sizes
// under a sanitizer, which runs 5-15x slower while what it checks does not
// depend on size.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizerBuild = true;
#else
inline constexpr bool kSanitizerBuild = false;
#endif

}  // namespace ferry

#endif  // FERRY_RUNTIME_SANITIZER_BUILD_H_
