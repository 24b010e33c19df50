"""What an experiment is: the Experiment base class, its config, its data
(sources and the fast batch path), the MindSpore pieces built from the config
(optimizer, loss, metrics), and finding experiments by name or file."""
