// Fixture of ci/mutation's self-test (suites/ci/mutation_selftest.py): each kind of site once,
// and the things that must not become sites. Every mutant of it changes what main.cpp prints.
#include <optional>
#include <string>
#include <vector>

#define FIXTURE_TWICE(x) ((x) + (x))  // a macro: never a site

namespace fixture {

int clamp_index(int i, int n) {
  if (i < 0) return 0;
  if (i >= n) return n - 1;
  return i;
}

int sum_first(const std::vector<int>& v, int k) {
  int total = 0;  // a declaration: never a site
  for (int i = 0; i < k; ++i) total += v[i];
  return total;
}

int subtract(int a, int b) { return a - b; }

int difference(int a, int b) { return subtract(a, b); }

std::string tagged(bool loud, const std::string& word) {
  std::string s = "<" + word;
  if (loud) s += "!";
  return s + " > b && c";  // a string beside "+": not a site; operators inside strings: never sites
}

bool both(bool a, bool b) { return a && b; }

int count_down(int n) {
  int steps = 0;
  while (n > 0 && steps < 100) {
    n = n - 2;
    steps++;
  }
  return FIXTURE_TWICE(steps);
}

int mismatched(const std::string& name, int size) { return static_cast<int>(name.size()) + size; }

int swapped_types(int size, const std::string& name) { return mismatched(name, size); }

int never_called(int x) { return x * 3; }

int value_or(const std::optional<int>& v) {  // a condition that converts to bool only explicitly
  if (v) return *v;
  return -1;
}

}  // namespace fixture
