"""What a grading is written as: terminal and JSON reports, Gradescope results, and the one atomic file writer."""
