"""The grading suites (per kata a package of pytest modules the judge runs against the jailed kata) and baselines."""
