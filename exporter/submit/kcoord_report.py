"""``kcoord report`` for ``spark-submit``: the same arguments, the master and resources from
spark-submit::

    spark-submit --master spark://HOST:7077 --conf spark.pyspark.python=PYTHON \\
        "$(python -c 'import exporter.submit.kcoord_report as m; print(m.__file__)')" \\
        --storage postgresql://... --out /reports
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from exporter.report_command import add_parser, run

    parser = argparse.ArgumentParser(prog="kcoord report (spark-submit)")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["report", *(sys.argv[1:] if argv is None else argv)])
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
