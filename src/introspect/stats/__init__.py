"""Every interval and test the report prints, each with its coverage shown by simulation in the
tests: ``intervals`` (Wilson, bootstraps, MCC, Jeffreys), ``clustered`` (the concept as the unit
of replication), ``auroc`` (Newcombe's interval under clustering), ``holm`` (multiplicity) and
``items`` (items as clusters: cluster bootstrap, calibration, regressions, paired tests).
Pure numerics: nothing here imports from the rest of the package."""
