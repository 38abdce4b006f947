"""For courses: the student edition, submissions, class grading, Gradescope and Classroom kits."""
