"""What a kata is on disk: the registry (a walk over the kata folders, its schema), CHECKLIST.md, targets,
stubs, loading a kata in-process."""
