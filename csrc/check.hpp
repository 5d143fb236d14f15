// Checks from inside the core: STEPTRACE_CHECK(cond, message) is compiled in when
// STEPTRACE_CHECKS is defined (the sanitizer build and CMake's Debug build), and compiles
// to nothing otherwise. A failed check throws std::logic_error naming the invariant and
// the values (RuntimeError in Python); `message` is only evaluated when the check fails.
#pragma once

#include <stdexcept>
#include <string>

namespace steptrace {

#ifdef STEPTRACE_CHECKS
inline constexpr bool kChecks = true;
#else
inline constexpr bool kChecks = false;
#endif

[[noreturn]] inline void check_failed(const char* invariant, const std::string& values,
                                      const char* file, int line) {
  throw std::logic_error(std::string("steptrace check failed: ") + invariant + " (" + values +
                         ") at " + file + ":" + std::to_string(line));
}

}  // namespace steptrace

#ifdef STEPTRACE_CHECKS
#define STEPTRACE_CHECK(cond, message)                                            \
  do {                                                                            \
    if (!(cond)) ::steptrace::check_failed(#cond, (message), __FILE__, __LINE__); \
  } while (false)
#else
#define STEPTRACE_CHECK(cond, message) \
  do {                                 \
    if (false) (void)(cond);           \
  } while (false)
#endif
