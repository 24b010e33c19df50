"""The `mindexp` command line: commands, the experiment catalog, sweeps."""
