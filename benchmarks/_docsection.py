"""Replace one marked section of docs/benchmarks.md (the benchmark scripts' ``--write-doc``).

``replace_section(doc, begin, end, section)``: ``section`` (which starts with ``begin`` and ends with
``end`` and a newline) takes the place of the text between the markers, or is appended when the markers
are absent. The file is written to ``doc + ".tmp"`` and renamed, so a failed write leaves the old file.
"""

import os


def replace_section(doc: str, begin: str, end: str, section: str) -> None:
    text = open(doc).read() if os.path.exists(doc) else "# Benchmarks\n\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + section + rest.split(end, 1)[1].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    with open(doc + ".tmp", "w") as f:
        f.write(text)
    os.replace(doc + ".tmp", doc)
