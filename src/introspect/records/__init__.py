"""Records: the JSONL schema, the run header, atomic appends, trial ids and resume (``jsonl``)."""
