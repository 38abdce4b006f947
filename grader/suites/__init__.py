"""The grading suites (a package of pytest modules per kata, which the judge runs against a jailed kata) and their speed baselines."""
