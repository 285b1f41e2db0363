"""Records: the JSONL schema, the run header, atomic appends, trial ids and resume (``jsonl``);
the published record schema, JSON Schema files per schema version and task (``schema``), and
its generated reference pages (``schema_doc``)."""
