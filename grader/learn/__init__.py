"""The learner's loop around a grade: progress on disk, `kata watch`, `kata play`."""
