#include "core/tokenizer/nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/tokenizer/unicode.h"
#include "core/tokenizer/unicode_nfc_tables.h"

namespace fsdpp::tokenizer::unicode {
namespace {

// Hangul syllables decompose and compose arithmetically (Unicode 3.12, "Conjoining Jamo
// Behavior").
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t combining_class(uint32_t cp) {
  const CombiningClassRun* end = kCombiningClasses + kCombiningClassesCount;
  const CombiningClassRun* it =
      std::lower_bound(kCombiningClasses, end, cp, [](const CombiningClassRun& r, uint32_t v) { return r.last < v; });
  return it != end && it->first <= cp ? it->combining_class : 0;
}

// Appends the full canonical decomposition of `cp` (applied recursively).
void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const CanonicalDecomposition* end = kCanonicalDecompositions + kCanonicalDecompositionsCount;
  const CanonicalDecomposition* it = std::lower_bound(
      kCanonicalDecompositions, end, cp, [](const CanonicalDecomposition& d, uint32_t v) { return d.cp < v; });
  if (it == end || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  decompose(it->first, out);
  if (it->second != 0) decompose(it->second, out);
}

// The primary composite of (first, second), or 0 if they do not compose.
uint32_t compose(uint32_t first, uint32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount)
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 && second > kTBase &&
      second < kTBase + kTCount)
    return first + (second - kTBase);
  const Composition* end = kCompositions + kCompositionsCount;
  const Composition* it = std::lower_bound(kCompositions, end, std::make_pair(first, second),
                                           [](const Composition& c, const std::pair<uint32_t, uint32_t>& v) {
                                             return std::make_pair(c.first, c.second) < v;
                                           });
  return it != end && it->first == first && it->second == second ? it->composite : 0;
}

// NFC of a run of valid code points, appended to `out` as UTF-8.
void normalize_run(const std::vector<uint32_t>& cps, std::string& out) {
  std::vector<uint32_t> d;
  for (uint32_t cp : cps) decompose(cp, d);
  // Canonical ordering: each maximal run of non-starters stably sorted by combining class.
  for (size_t i = 0; i < d.size();) {
    if (combining_class(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && combining_class(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + static_cast<std::ptrdiff_t>(i), d.begin() + static_cast<std::ptrdiff_t>(j),
                     [](uint32_t a, uint32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  // Canonical composition (UAX #15's reference algorithm): a character composes with the
  // last starter unless a character between them has a combining class >= its own (or is
  // a starter), which blocks it.
  if (!d.empty()) {
    size_t starter = 0;
    int last_class = combining_class(d[0]) == 0 ? 0 : 256;  // a leading non-starter composes with nothing
    size_t kept = 1;
    for (size_t i = 1; i < d.size(); ++i) {
      const int cls = combining_class(d[i]);
      const uint32_t composite = last_class == 256 ? 0 : compose(d[starter], d[i]);
      if (composite != 0 && (last_class < cls || last_class == 0)) {
        d[starter] = composite;
        continue;
      }
      if (cls == 0) starter = kept;
      last_class = cls;
      d[kept++] = d[i];
    }
    d.resize(kept);
  }
  for (uint32_t cp : d) append_utf8(cp, out);
}

}  // namespace

std::string nfc(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::vector<uint32_t> run;
  for (size_t pos = 0; pos < text.size();) {
    const CodePoint cp = decode_utf8(text, pos);
    const bool invalid = cp.value == 0xFFFD && !(cp.byte_len == 3 && text.substr(pos, 3) == "\xEF\xBF\xBD");
    if (invalid) {
      // An invalid byte: a starter that composes with nothing, so the runs on either side
      // normalize independently; the byte itself is kept as it is.
      normalize_run(run, out);
      run.clear();
      out += text[pos];
    } else {
      run.push_back(cp.value);
    }
    pos += cp.byte_len;
  }
  normalize_run(run, out);
  return out;
}

}  // namespace fsdpp::tokenizer::unicode
