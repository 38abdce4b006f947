"""The `kata` command line: click commands that parse, call the library below, and print."""
