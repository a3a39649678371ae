// Drives fixture.cpp for suites/ci/mutation_selftest.py: prints what each function returns.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace fixture {
int clamp_index(int i, int n);
int sum_first(const std::vector<int>& v, int k);
int difference(int a, int b);
std::string tagged(bool loud, const std::string& word);
bool both(bool a, bool b);
int count_down(int n);
int swapped_types(int size, const std::string& name);
int never_called(int x);
int value_or(const std::optional<int>& v);
}  // namespace fixture

int main(int argc, char**) {
  std::printf("%d %d %d %d\n", fixture::clamp_index(-3, 5), fixture::clamp_index(5, 5), fixture::clamp_index(2, 5),
              fixture::clamp_index(0, 5));
  std::printf("%d %d\n", fixture::sum_first({1, 2, 3, 4}, 2), fixture::sum_first({5, 6}, 0));
  std::printf("%d\n", fixture::difference(10, 3));
  std::printf("%s %s\n", fixture::tagged(true, "a").c_str(), fixture::tagged(false, "b").c_str());
  std::printf("%d %d\n", fixture::both(true, false), fixture::both(true, true));
  std::printf("%d %d\n", fixture::count_down(5), fixture::count_down(4));
  std::printf("%d\n", fixture::swapped_types(2, "abc"));
  std::printf("%d %d\n", fixture::value_or(7), fixture::value_or(std::nullopt));
  if (argc > 5) std::printf("%d\n", fixture::never_called(argc));
  return 0;
}
