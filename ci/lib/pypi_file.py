"""Downloads one file of a PyPI release, chosen by its pinned sha256, without installing it.

    pypi_file.py NAME SHA256 DEST

`pip download --no-binary :all:` of a source distribution first builds its metadata (for
llama-cpp-python that means fetching and building scikit-build-core from source: minutes);
ci/fetch_assets.sh only needs the archive. This reads the project's page on PyPI's simple
index (PEP 691 JSON; $PIP_INDEX_URL when set, as pip would), takes the file whose sha256 is
the pinned one, downloads it to DEST and checks the hash again. Exit 1 with one line on a
missing file, a network failure or a hash mismatch.
"""

import hashlib
import json
import os
import sys
import urllib.parse
import urllib.request


def fail(message):
    print(f"ci/lib/pypi_file.py: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    if len(sys.argv) != 4:
        fail("usage: pypi_file.py NAME SHA256 DEST")
    name, want, dest = sys.argv[1:]
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    page = f"{index}/{name}/"
    request = urllib.request.Request(page, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            files = json.load(response)["files"]
    except (OSError, ValueError, KeyError) as e:
        fail(f"could not read {page}: {e}")
    urls = [f["url"] for f in files if f.get("hashes", {}).get("sha256") == want]
    if not urls:
        fail(f"{page} lists no file with sha256 {want}")
    url = urllib.parse.urljoin(page, urls[0])
    digest = hashlib.sha256()
    partial = dest + ".partial"
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(partial, "wb") as out:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    except OSError as e:
        fail(f"could not download {url}: {e}")
    if digest.hexdigest() != want:
        os.remove(partial)
        fail(f"{url}: sha256 {digest.hexdigest()} is not the pinned {want}; refusing it")
    os.replace(partial, dest)


if __name__ == "__main__":
    main()
