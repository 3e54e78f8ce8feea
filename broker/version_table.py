"""The README's table of served API versions, generated from the registry:
`python -m broker.version_table` prints it; `tests/test_readme_versions.py` checks the
README holds exactly this."""

from __future__ import annotations

import broker.apis  # noqa: F401  (registers every handler)
from broker.registry import APIS
from protocol.api_keys import ApiKey
from protocol.messages import REQUESTS

START, END = "<!-- api-versions:start -->", "<!-- api-versions:end -->"


def markdown() -> str:
    rows = ["| API | key | versions served | newest in Kafka 4.3 |", "|---|---|---|---|"]
    for key in sorted(APIS):
        api = APIS[key]
        # The declarations go up to Kafka 4.3's newest version (protocol/schema/import_spec.py).
        newest = REQUESTS[key].valid.hi
        rows.append(
            f"| {ApiKey(key).name} | {key} | {api.min_version}-{api.max_version} | {newest} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    print(START)
    print(markdown())
    print(END)
