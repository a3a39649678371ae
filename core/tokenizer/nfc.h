// Unicode Normalization Form C (UAX #15): canonical decomposition, canonical ordering,
// canonical composition. The normalizer "NFC" of Hugging Face tokenizers (Qwen2's
// tokenizer.json), which applies it to the whole text before pre-tokenization.
// Data: unicode_nfc_tables.cpp, generated from Unicode 14.0 (see gen_unicode_nfc.py).
#pragma once

#include <string>
#include <string_view>

namespace fsdpp::tokenizer::unicode {

// The NFC form of `text` (UTF-8). Bytes that are not valid UTF-8 are copied unchanged and
// act as a starter that composes with nothing (as U+FFFD would), so that every byte of the
// input is kept. Idempotent: nfc(nfc(t)) == nfc(t).
std::string nfc(std::string_view text);

}  // namespace fsdpp::tokenizer::unicode
