"""The learner-unlearners, one module per family: passive (noise per deletion), active (descent on
retained data, then noise), ridge Newton, memory-pair, rewind-to-delete, the online-DP baseline
dp-tofw, and the baselines (retrain, restart, plain OGD). Registered in
:mod:`worker.olu.registry`."""
