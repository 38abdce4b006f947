"""The judge process: runs a kata's suite under pytest, judges each check, and streams its events to the runner."""
