"""Everything that runs MindSpore: checks before a run, the training session, launch, resume."""
