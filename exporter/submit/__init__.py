"""The ``spark-submit`` entry point of ``kcoord report`` (:mod:`exporter.submit.kcoord_report`).

It lives in a folder of its own: ``spark-submit`` runs a file with its folder first on the
module path, and ``exporter/`` holds modules named like standard ones (``html``).
"""
