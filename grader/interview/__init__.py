"""`kata interview`: a timed task on a fresh stub, its workspace, log and report."""
