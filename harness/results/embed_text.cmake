# cmake -DIN=<text file> -DOUT=<.cpp> -DSYMBOL=<name> -P embed_text.cmake
# Writes a translation unit defining `extern const char fsdpp::results::embedded::<SYMBOL>[]`
# as the file's text (a raw string literal), so the binary needs no source tree at run time.
file(READ "${IN}" content)
string(FIND "${content}" ")fsdpp_embed\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter )fsdpp_embed\"")
endif()
file(WRITE "${OUT}.tmp"
  "// Generated from ${IN} by harness/results/embed_text.cmake; do not edit.\n"
  "namespace fsdpp::results::embedded {\n"
  "extern const char ${SYMBOL}[];\n"
  "const char ${SYMBOL}[] = R\"fsdpp_embed(${content})fsdpp_embed\";\n"
  "}  // namespace fsdpp::results::embedded\n")
file(RENAME "${OUT}.tmp" "${OUT}")
