"""One folder per kata (README.md): its suite (a package of pytest modules the judge runs against the jailed kata),
its part of the registry, baselines, mistakes, mutants, checklist section and benchmark."""
