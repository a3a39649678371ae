"""One long-lived process that runs a reference script's command lines one after another.

A judge suite calls transformers dozens of times; each fresh Python pays seconds to import
torch and transformers before it does a millisecond of work. `serve(main)` answers the
command lines of one suite in one process instead (suites/references/serve.sh is the shell
side).

Protocol: one request per line on stdin, fields separated by the unit separator \\x1f (which
no argument holds): OUT, ERR, then the command's arguments, each newline in them sent as the
record separator \\x1e. The command runs as `main(args)` with its stdout and stderr
redirected at the file-descriptor level to the files OUT and ERR (so that what C++ code under
torch prints lands there too), and the reply is its exit code, one line on what was stdout
when serving began. A command that raises reports the traceback on ERR and exit code 1; one
that calls sys.exit reports that code. The process ends at the end of stdin.

Commands share one process: each must set what it depends on (seeds, threads, default
dtype) itself and put back what it changes, as the reference scripts do.
"""

import os
import sys
import traceback

SEPARATOR = "\x1f"
NEWLINE = "\x1e"


def _exit_code(e):
    """sys.exit's argument as an exit code, as the interpreter maps it."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def _run(main, args, out_path, err_path):
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.close(out)
    os.close(err)
    try:
        code = main(args)
        code = 0 if code is None else int(code)
    except SystemExit as e:
        code = _exit_code(e)
    except Exception:  # the suite reads the traceback on ERR, and goes on with its next call
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
    return code


def serve(main):
    """Answers requests on stdin until it ends (the protocol above); returns 0."""
    reply = os.fdopen(os.dup(1), "w")
    for line in sys.stdin:
        fields = line.rstrip("\n").split(SEPARATOR)
        if len(fields) < 2:
            reply.write("2\n")  # not a request: the shell side never sends one
            reply.flush()
            continue
        args = [arg.replace(NEWLINE, "\n") for arg in fields[2:]]
        reply.write(f"{_run(main, args, fields[0], fields[1])}\n")
        reply.flush()
    return 0


def main_or_serve(main):
    """A reference script's entry point: `SCRIPT serve` answers command lines (serve above),
    any other command line runs main once. Returns the exit code."""
    if sys.argv[1:] == ["serve"]:
        return serve(main)
    return main(sys.argv[1:])
