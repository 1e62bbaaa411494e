"""One module per subcommand; each exposes main(args) -> exit code."""
