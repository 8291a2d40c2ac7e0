"""Pure math of privacy: conversions between Rényi / zCDP and (epsilon, delta), Gaussian
calibrations, and the rewind-to-delete depth search. No state, no model."""
