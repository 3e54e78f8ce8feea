"""The metrics listener's HTTP side: Prometheus metrics, the lag JSON API, Burrow's HTTP API v3
and the web console (``app.py`` wires them; ``views.py`` reads the broker)."""
