"""For contributors: `kata new` scaffolds a kata in every place it lives."""
