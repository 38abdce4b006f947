"""The grading suites (pytest files the judge runs against a jailed kata) and their speed baselines."""
