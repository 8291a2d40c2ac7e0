"""``olu-worker plan``: the privacy guarantee, the deletion noise and the accuracy a deployment's
deletions will cost, computed before deploying from the same settings as ``run``.

One job per module:

- :mod:`~worker.planning.target`: the unit, slope and engine of the settings (the one place that
  builds an engine for the plan);
- :mod:`~worker.planning.predict`: the predicted noise of a plan (pure math on public constants);
- :mod:`~worker.planning.sample`: reading a sample of insert events;
- :mod:`~worker.planning.simulate`: the released model against plain OGD on the sample;
- :mod:`~worker.planning.advice`: warnings and recommendations (pure);
- :mod:`~worker.planning.plan`: assembling the plan;
- :mod:`~worker.planning.render`: text, JSON (its fields) and the PNG plot;
- :mod:`~worker.planning.command`: the subcommand's options and errors.
"""
