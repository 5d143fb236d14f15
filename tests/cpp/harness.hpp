// A tiny assert-style harness for the C++-only tests: TEST(name) { ... } registers a case,
// EXPECT(cond) records a failure with its file and line and goes on, EXPECT_THROWS(stmt,
// type) expects that exception. main() runs every case and exits 1 on any failure.
#pragma once

#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <vector>

namespace harness {

struct Case {
  const char* name;
  std::function<void()> body;
};

inline std::vector<Case>& cases() {
  static std::vector<Case> all;
  return all;
}
inline int& failures() {
  static int n = 0;
  return n;
}

struct Register {
  Register(const char* name, std::function<void()> body) {
    cases().push_back({name, std::move(body)});
  }
};

inline void fail(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "%s:%d: FAILED %s\n", file, line, what.c_str());
  ++failures();
}

}  // namespace harness

#define TEST(name)                                             \
  static void name();                                          \
  static const harness::Register register_##name(#name, name); \
  static void name()

#define EXPECT(cond) ((cond) ? (void)0 : harness::fail(__FILE__, __LINE__, #cond))

#define EXPECT_THROWS(stmt, type)                                                  \
  do {                                                                             \
    bool thrown = false;                                                           \
    try {                                                                          \
      stmt;                                                                        \
    } catch (const type&) {                                                        \
      thrown = true;                                                               \
    }                                                                              \
    if (!thrown) harness::fail(__FILE__, __LINE__, #stmt " did not throw " #type); \
  } while (false)

int main() {
  for (const harness::Case& c : harness::cases()) {
    const int before = harness::failures();
    try {
      c.body();
    } catch (const std::exception& e) {
      harness::fail(__FILE__, __LINE__, std::string(c.name) + " threw: " + e.what());
    }
    std::printf("%s %s\n", harness::failures() == before ? "ok  " : "FAIL", c.name);
  }
  std::printf("%zu cases, %d failures\n", harness::cases().size(), harness::failures());
  return harness::failures() == 0 ? 0 : 1;
}
