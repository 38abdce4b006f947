"""What a kata is on disk: the registry (katas.toml and its schema), targets, stubs, loading a kata in-process."""
