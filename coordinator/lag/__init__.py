"""Consumer lag: Burrow's evaluation rules (``burrow``), shared with the Spark report, and the
broker's live lag model (``model``). Pure: the clock comes in as an argument."""
