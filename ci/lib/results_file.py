"""Writing a results document under results/ so that a crash never leaves half of one.

Shared by the ci/ scripts that record runs (fuzz.sh, sanitize.sh, multinode.py,
fault_trials/fault_trials.py). Import with ci/lib on sys.path.
"""

import json
import os
import tempfile


def write_json_atomically(path, doc):
    """Writes `doc` as indented JSON to `path`: a temporary file in the same folder, fsynced,
    renamed over `path`, then the folder fsynced. A reader sees the old file or the whole new
    one, never a part; the folder is created if missing."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
