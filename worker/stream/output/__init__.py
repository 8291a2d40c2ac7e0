"""The output side: release records (JSON or registry-framed),
dead letters out, exactly-once publishing."""
