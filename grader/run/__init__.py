"""The run side of a grading: starts the judge processes, turns their events into results, and names known mistakes."""
