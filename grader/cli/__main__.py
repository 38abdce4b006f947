"""`python -m grader.cli`: the `kata` command, as `python -m grader` (the start folder already off sys.path)."""

from grader.cli.commands import main

main()
