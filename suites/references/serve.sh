# shellcheck shell=bash
# Sourced by a judge suite: one Python process runs every call to a reference script
# (harness/references/serve.py), so that the suite imports torch and transformers once.
#   ref_start DIR PYTHON SCRIPT   start SCRIPT's server; DIR holds each call's output
#   ref ARG...                    SCRIPT ARG...: its stdout and stderr as if SCRIPT ran alone,
#                                 its exit code as the function's
# The server ends when the suite does (its stdin closes).
ref_start() {
  ref_dir=$1
  shift
  coproc REF_SERVER { "$@" serve; }
  # Plain descriptors: bash keeps a coprocess's own from pipelines' subshells.
  exec {ref_requests}>&"${REF_SERVER[1]}" {ref_replies}<&"${REF_SERVER[0]}"
}

ref() {
  local arg rc args=()
  for arg in "$@"; do
    case $arg in *$'\x1e'* | *$'\x1f'*)
      echo "ref: argument '$arg' holds a control character (RS or US) that serve.py's requests cannot carry" >&2
      return 2 ;;
    esac
    args+=("${arg//$'\n'/$'\x1e'}")  # a newline travels as \x1e
  done
  local IFS=$'\x1f'
  if ! { printf '%s\n' "$ref_dir/ref.out${IFS}$ref_dir/ref.err${IFS}${args[*]}" >&"$ref_requests"; } 2>/dev/null ||
    ! IFS= read -r rc <&"$ref_replies"; then
    echo "ref: the reference server (serve.py) has exited; '$1' was not run" >&2
    return 1
  fi
  cat "$ref_dir/ref.out"
  cat "$ref_dir/ref.err" >&2
  return "$rc"
}
