"""Privacy accounting of deletions: the Rényi accountant of the certified algorithms, memory-pair's
zCDP odometer, the deletion ledger and dp-tofw's tree aggregation; the pure conversions and
calibrations live in :mod:`.analysis`. Depends on nothing else in the engine but its exceptions."""
