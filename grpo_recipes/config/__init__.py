"""The command line and the config: checks, resume rules, TRL's names and arguments."""
