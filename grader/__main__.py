"""`python -m grader`: the `kata` command (grader/__init__ has already taken the start folder off sys.path)."""

from grader.cli.commands import main

main()
