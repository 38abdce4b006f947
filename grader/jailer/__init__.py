"""The trusted end of the jails: starts them, watches their logs and files, proxies the learner's objects."""
