"""The command line: one module per command group. Kept light: a command imports
what it uses when it runs."""
