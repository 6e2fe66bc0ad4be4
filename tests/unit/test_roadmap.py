"""docs/roadmap.md cannot call "next" what has landed (issue 30, Measured 6: it listed security and observability
as next long after both landed). Each item under "## Next" says the path it lands as; that path must not exist
yet. A landed item fails this test until it leaves the list."""

import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROADMAP = os.path.join(REPO, "docs", "roadmap.md")


def next_items(text: str) -> list[tuple[str, str | None]]:
    """(title, the path it lands as or None) of each numbered item under "## Next"."""
    section = re.search(r"^## Next\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert section, "docs/roadmap.md has no '## Next' section"
    items = re.split(r"^\d+\. ", section.group(1), flags=re.M)[1:]
    found = []
    for item in items:
        title = re.match(r"\*\*(.+?)\*\*", item)
        lands = re.search(r"^\s*Lands as: (\S+)\s*$", item, re.M)
        found.append((title.group(1) if title else item.split("\n")[0], lands.group(1) if lands else None))
    return found


def problems(text: str, exists=lambda path: os.path.exists(os.path.join(REPO, path))) -> list[str]:
    found = []
    for title, path in next_items(text):
        if path is None:
            found.append(f"'{title}' says no 'Lands as: PATH' line")
        elif exists(path):
            found.append(f"'{title}' has landed ({path} exists): take it off the list, and document it where it "
                         "is used")
    return found


def test_nothing_listed_as_next_has_landed():
    text = open(ROADMAP).read()
    assert next_items(text), "docs/roadmap.md lists nothing under '## Next'"
    assert not problems(text), "\n".join(problems(text))


def test_the_check_catches_a_landed_item_and_one_without_a_path():
    """The check itself, on the measured case: an item whose code exists, and one that says no path."""
    text = ("## Next\n\n1. **Security** (TLS, credentials).\n   Lands as: cluster/shared/credentials.py\n"
            "2. **Observability**, then streaming heartbeats.\n")
    assert problems(text) == [
        "'Security' has landed (cluster/shared/credentials.py exists): take it off the list, and document it "
        "where it is used",
        "'Observability' says no 'Lands as: PATH' line"]
