"""The trusted side of a grading: runner, judge process (pytest + suite), its client of the jail, events."""
