"""The ``moestat`` command: one module per subcommand, argument parsing only."""
