"""What every algorithm is built on: the estimator base (projected OGD, ingest checks, state),
losses, step schedules, the domain, the applied-record index, retained examples, replay helpers and
the compiled kernels. Depends on :mod:`worker.olu.privacy` for the accountant and the ledger."""
