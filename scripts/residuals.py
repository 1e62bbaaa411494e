"""Write engine/config/catalogs/residuals.json: every validation row's error and what makes runs alike, the
data of the error band on every estimate (engine/model/uncertainty.py). Run it from the repository root after
any change to the model; tests/test_uncertainty.py fails while the file differs from what `validate` gives:

    python scripts/residuals.py
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
from clustertop.engine.model import validate

OUT = Path(__file__).resolve().parent.parent / "engine" / "config" / "catalogs" / "residuals.json"
NOTE = ("Every validation row's error (predicted / published - 1, on throughput) with what makes runs "
        "alike: the data of the error band on every estimate (engine/model/uncertainty.py). Written by "
        "scripts/residuals.py from `clustertop validate`; tests/test_uncertainty.py checks that it matches. "
        "Do not edit by hand.")


def main() -> None:
    rows = validate.residuals(validate.run(), validate.run_serving())
    text = orjson.dumps({"note": NOTE, "rows": [dataclasses.asdict(r) for r in rows]},
                        option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
    tmp = OUT.with_suffix(".tmp")
    tmp.write_bytes(text)
    tmp.replace(OUT)
    print(f"{OUT}: {len(rows)} rows")


if __name__ == "__main__":
    main()
